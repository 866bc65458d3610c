"""Policy shift: does the policy act on the world model's frames as it would on the real frames
they stand for?

A world model can score well in pixels and still mislead RL: what counts is whether the policy
reads an imagined frame as it reads the real one. From each held-out episode's first frame the
world model replays the episode's recorded actions open loop (as imagination resets do, with
the seeds of `open_loop_eval`, so these are the frames that metric saw). At every chunk
boundary t within the horizon the policy reads the real frame t and the imagined frame t; the
measure is the mean per-token KL(pi(. | real_t) || pi(. | imagined_t)) over the chunk's action
tokens. Two references give it a scale:

* ``other``: the policy on the real frame t of another episode of the same task (another
  plausible state of the same task: "acts as in a different state");
* ``first``: the policy on the episode's first frame (a world model that shows no motion).

An imagined KL near `other` is what a fair world model costs; one far above it (relative to
`first`) says the policy misreads the imagined frames, and RL in imagination trains it on
states it will never see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

from wmrl_cli.data.episodes import Episode
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.world_model_eval import (
    open_loop_rollout,
    recorded_starts,
    same_task_partners,
)
from wmrl_cli.logging import track_batches
from wmrl_cli.world_models.interface import WorldModel

REFERENCES = ("imagined", "other", "first")


class ActionDistribution(Protocol):
    """A learned policy's forward (OpenVLA-OFT): logits [B, C, A, bins] of its action tokens."""

    def forward(self, images: torch.Tensor, prompts: list[str], temperature: float = 1.0): ...


def token_kl(reference_logits: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Mean per-token KL(softmax(reference) || softmax(logits)) [B] over logits [B, C, A, bins];
    bins with zero reference probability (cut by top-k) add nothing."""
    log_p = torch.log_softmax(reference_logits.float(), dim=-1)
    log_q = torch.log_softmax(logits.float(), dim=-1)
    p = log_p.exp()
    per_token = torch.where(p > 0, p * (log_p - log_q), torch.zeros_like(p)).sum(-1)
    return per_token.flatten(1).mean(-1)


@dataclass
class PolicyShiftReport:
    horizon: int
    episodes: int
    steps: list[int]  # the chunk boundaries t the policy reads (1..horizon)
    kl: dict[str, list[float]]  # per REFERENCES kind, per step in `steps`
    by_task: dict[str, dict[str, float]] = field(default_factory=dict)  # over all steps

    def summary(self) -> dict[str, float]:
        out = {}
        for i, t in enumerate(self.steps):
            for kind in REFERENCES:
                name = "policy_kl" if kind == "imagined" else f"policy_kl_{kind}"
                out[f"{name}@{t}"] = self.kl[kind][i]
        return out


@torch.no_grad()
def policy_shift_eval(
    world_model: WorldModel,
    policy: ActionDistribution,
    episodes: list[Episode],
    horizon: int = 32,
    batch_size: int = 8,
    seed: int = 0,
    temperature: float = 1.0,
    progress: bool = False,
) -> PolicyShiftReport:
    """The policy's KL between real and imagined frames on `episodes` (see the module doc),
    per chunk boundary and per task; episodes count at a step while they last."""
    c = episodes[0].chunk_size
    if horizon < c:
        raise WmrlError(f"the policy shift needs a horizon of at least one chunk ({c} steps)")
    # the boundaries within the horizon after which some episode still acts
    steps = [t for t in range(c, horizon + 1, c) if any(t < e.length for e in episodes)]
    if not steps:
        raise WmrlError(f"no episode lasts beyond its first chunk ({c} steps)")
    n_steps = steps[-1]
    partners = same_task_partners(episodes)
    kl = {kind: np.full((len(episodes), len(steps)), np.nan) for kind in REFERENCES}
    batches = range(0, len(episodes), batch_size)
    for start in track_batches(batches, "policy shift (episodes)", progress):
        batch = episodes[start : start + batch_size]
        first, actions = recorded_starts(batch, n_steps)
        imagined = open_loop_rollout(world_model, first, actions, c, n_steps, seed + start)
        prompts = [e.instruction for e in batch]

        def logits(frames: np.ndarray | torch.Tensor, prompts: list[str] = prompts) -> torch.Tensor:
            images = torch.as_tensor(np.ascontiguousarray(frames))
            return policy.forward(images, prompts, temperature=temperature).logits

        first_logits = logits(first)
        for j, t in enumerate(steps):
            lasting = np.array([t < e.length for e in batch])
            if not lasting.any():
                continue
            real = logits(np.stack([_frame(e, t) for e in batch]))
            others = [episodes[partners[start + i]] for i in range(len(batch))]
            other = logits(np.stack([_frame(o, t) for o in others]))
            # the other episode's frame counts only while that episode lasts too
            both_last = lasting & np.array([t < o.length for o in others])
            for kind, value, valid in (
                ("imagined", token_kl(real, logits(imagined[:, t - 1])), lasting),
                ("other", token_kl(real, other), both_last),
                ("first", token_kl(real, first_logits), lasting),
            ):
                rows = slice(start, start + len(batch))
                kl[kind][rows, j] = np.where(valid, value.cpu().numpy(), np.nan)

    def mean(values: np.ndarray) -> float:
        return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")

    tasks = sorted({e.task_name for e in episodes})
    by_task = {
        task: {kind: mean(kl[kind][[e.task_name == task for e in episodes]]) for kind in REFERENCES}
        for task in tasks
    }
    return PolicyShiftReport(
        horizon=horizon,
        episodes=len(episodes),
        steps=steps,
        kl={kind: [mean(kl[kind][:, j]) for j in range(len(steps))] for kind in REFERENCES},
        by_task=by_task,
    )


def _frame(episode: Episode, t: int) -> np.ndarray:
    """Frame t, or the last one for an episode that ended before (masked out anyway)."""
    return episode.frames[min(t, len(episode.frames) - 1)]
