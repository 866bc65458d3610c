"""The stronger action path both world-model backends can switch on (all off by default, so a
published checkpoint runs exactly as it was trained).

Why it exists: with the published conditioning alone (actions summed into the timestep
embedding), tiny world models trained on a CPU learn the scene and its average motion and ignore
their actions (docs/results.md). Three mechanisms with published evidence, each a config option:

* **Per-frame action tokens** (`action_tokens`): each frame's action and the running sum of the
  chunk's actions up to that frame (the displacement since the last context frame, which is what
  a delta-predicting model has to add) are embedded and added to every token of that frame, so
  the actions enter the token stream itself rather than only the normalisation statistics
  (IRASim's per-frame action injection; RLinf Wan's `action_mlp1` tokens are the cross-attention
  variant).
* **Action dropout with a learned null action** (`action_dropout`, `null_action`): during training
  a sample's actions are replaced by a learned null embedding with probability p, so one network
  is both p(x | a) and p(x); at sampling **action guidance** extrapolates from the null-action
  velocity towards the conditioned one, v = v_null + w (v_cond - v_null) (classifier-free
  guidance on actions, as in Vid2World and Genie 2). w = 1 is the plain conditioned sampler and
  runs no second pass. A model distilled from a guided teacher (`guidance_distilled`,
  base.GuidanceTeacher) gives the guided velocity in that one pass.
* A training noise distribution that reaches the levels the sampler starts at is the backends'
  `train_shift` (> 1 moves the logit-normal draw towards sigma = 1, where the motion is decided).
"""

from __future__ import annotations

import torch
from torch import nn

from wmrl_cli.errors import ConfigError


def validate_action_options(
    dropout: float, guidance: float, null_action: bool, distilled: float | None = None
) -> None:
    """The action dropout / guidance settings of a world-model config, or a ConfigError."""
    if not 0.0 <= dropout < 1.0:
        raise ConfigError("action_dropout must be in [0, 1)")
    if guidance < 0:
        raise ConfigError("action_guidance must be >= 0")
    if distilled is not None and (distilled < 0 or guidance != 1.0):
        raise ConfigError(
            "guidance_distilled must be >= 0, with action_guidance 1 (the guidance is in the "
            "conditioned pass)"
        )
    if (dropout > 0 or guidance != 1.0) and not null_action:
        raise ConfigError("action_dropout / action_guidance need transformer.null_action: true")


def chunk_action_features(actions: torch.Tensor) -> torch.Tensor:
    """Per-frame action features [B,C,2A]: each action and the running sum of the chunk's
    actions up to and including it (the displacement since the last context frame)."""
    return torch.cat([actions, actions.cumsum(dim=1)], dim=-1)


class ActionTokenEmbedder(nn.Module):
    """An MLP from `in_features` per-frame action features to a `hidden`-wide token offset."""

    def __init__(self, in_features: int, hidden: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_features, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.mlp(features.to(self.mlp[0].weight.dtype))


def with_null(
    embedded: torch.Tensor, null: torch.Tensor | None, drop: torch.Tensor | None
) -> torch.Tensor:
    """Replace the embeddings [B,...,D] of the samples flagged in drop [B] by the null row [D]."""
    if drop is None:
        return embedded
    if null is None:
        raise ValueError("dropping actions needs a model built with null_action")
    mask = drop.to(torch.bool).view(-1, *([1] * (embedded.ndim - 1)))
    return torch.where(mask, null.to(embedded.dtype), embedded)


def action_dropout_mask(
    batch: int, probability: float, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor | None:
    """Which samples of a training batch see the null action (None when p = 0)."""
    if probability <= 0:
        return None
    draw_device = generator.device if generator is not None else device
    return (torch.rand(batch, generator=generator, device=draw_device) < probability).to(device)


def freeze_unused_null_action(model: nn.Module, dropout: float) -> None:
    """The null action's parameters frozen where training never draws it (`dropout` 0: a
    fine-tuning without dropout, a distilled student's one pass): they would get no gradient,
    and DDP needs one for every trainable parameter (two ranks stopped at the second step on
    "Expected to have finished reduction in the prior iteration")."""
    if dropout > 0:
        return
    for name, param in model.named_parameters():
        if "null_action" in name:
            param.requires_grad_(False)


def sampler_guidance(requested: float | None, distilled: float | None) -> float | None:
    """The guidance scale a model's sampler applies when a run asks for `requested` (None: the
    model's own) of a model distilled at `distilled` (None: not distilled): a distilled model
    gives its scale in one pass (1.0) and no other; a ConfigError for another scale."""
    if distilled is None or requested is None:
        return requested
    if requested != distilled:
        raise ConfigError(
            f"world_model.action_guidance={requested:g}, but this world model was distilled to "
            f"give guidance {distilled:g} in one pass: set {distilled:g} or leave it unset"
        )
    return 1.0


def guided(v_cond: torch.Tensor, v_null: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance on actions: v_null + scale * (v_cond - v_null)."""
    return v_null + scale * (v_cond - v_null)
