"""A success head on a world model's own latents: the judge reads what the world model believes
(its autoencoder's posterior means, scaled as it scales them) instead of a frame's pixels.

    encoder  the world model's VAE encoder (diffusers' AutoencoderKL without its decoder),
             frozen: eval mode, no gradients, its weights saved with the judge, so the judge
             loads without the world model. Frames at the world model's size (bilinear when
             they differ) in [-1, 1] -> posterior means mu [N,C,h,w] -> (mu - shift) * scale,
             as OpenSora's `encode_frames` (world_models/opensora/model.py)
    head     Conv3x3/2 (C -> w), SiLU, Conv3x3/2 (w -> 2w), SiLU, global average pool
             fusion_layer = Linear(2w + e, hidden), SiLU, Dropout, Linear(hidden, 1) over the
             pooled features and the task's embedding (num_tasks x e) -> sigmoid

A per-frame 2D VAE only: Wan's causal VAE packs 4 frames into a latent, so no latent belongs to
one frame. Training and scoring go through base.FrameRewardModel as a ResNet judge's do.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.rewards.base import FrameRewardModel, check_task_ids, to_unit_range

_ENCODER_PREFIXES = ("encoder.", "quant_conv.")


@dataclass
class LatentRewConfig:
    """Sizes of the latent judge and what rebuilds its encoder. `vae`: the world model's
    `AutoencoderKL` kwargs, its latent `scaling_factor` and `shift_factor` included;
    `frame_size`: the (height, width) the world model's frames have (None: as given).
    `width`: the head's first convolution's channels (the second has 2 * width); a tiny
    config only lowers the sizes. threshold is the calibrated success threshold, if any."""

    vae: dict[str, Any] = field(default_factory=dict)
    frame_size: tuple[int, int] | None = None
    width: int = 64
    num_tasks: int = 10
    task_embed_dim: int = 64
    hidden_dim: int = 256
    dropout: float = 0.1
    threshold: float | None = None

    def __post_init__(self) -> None:
        # as config.json gives it back (tuples as lists), so a loaded config equals the saved
        self.vae = json.loads(json.dumps(self.vae))
        if self.frame_size is not None:
            self.frame_size = (int(self.frame_size[0]), int(self.frame_size[1]))

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def kind(self) -> str:
        return "latent"

    @property
    def latent_affine(self) -> tuple[float, float]:
        """(scale, shift) of z = (mu - shift) * scale, as the world model normalizes."""
        scale = float(self.vae.get("scaling_factor", 1.0))
        return scale, float(self.vae.get("shift_factor") or 0.0)


def frozen_vae_encoder(vae_config: dict[str, Any]) -> nn.Module:
    """diffusers' AutoencoderKL of `vae_config` without its decoder, in eval mode, frozen."""
    from diffusers import AutoencoderKL

    try:
        vae = AutoencoderKL(**vae_config)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"latent reward model: vae is not an AutoencoderKL config ({exc})"
        ) from exc
    vae.decoder = None  # only `encode` runs: the judge neither stores nor builds pixels
    vae.post_quant_conv = None
    return vae.requires_grad_(False).eval()


class LatentRewModel(FrameRewardModel):
    """A success head over the frozen VAE latents of a world model, one frame at a time."""

    def __init__(self, config: LatentRewConfig) -> None:
        super().__init__()
        self.config = c = config
        if not c.vae:
            raise ConfigError("latent reward model: no vae config (build it from a world model)")
        self.vae = frozen_vae_encoder(c.vae)
        channels = int(self.vae.config.latent_channels)
        self.head = nn.Sequential(
            nn.Conv2d(channels, c.width, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.Conv2d(c.width, 2 * c.width, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.AdaptiveAvgPool2d((1, 1)),
            nn.Flatten(),
        )
        self.task_embedding = nn.Embedding(c.num_tasks, c.task_embed_dim)
        self.fusion_layer = nn.Sequential(
            nn.Linear(2 * c.width + c.task_embed_dim, c.hidden_dim),
            nn.SiLU(),
            nn.Dropout(c.dropout),
            nn.Linear(c.hidden_dim, 1),
        )

    def train(self, mode: bool = True) -> LatentRewModel:
        """Train the head; the encoder stays in eval mode."""
        super().train(mode)
        self.vae.eval()
        return self

    def encoder_state_dict(self) -> dict[str, torch.Tensor]:
        """The frozen encoder's tensors, under the VAE's own key names."""
        return {k: v for k, v in self.vae.state_dict().items() if k.startswith(_ENCODER_PREFIXES)}

    def load_encoder(self, vae_state_dict: dict[str, torch.Tensor]) -> None:
        """Copy the encoder's weights from a VAE's state dict (a world model's `vae`); its
        decoder's tensors are not needed and skipped."""
        own = self.encoder_state_dict()
        given = {k: v for k, v in vae_state_dict.items() if k.startswith(_ENCODER_PREFIXES)}
        missing = sorted(set(own) - set(given))
        misshapen = sorted(k for k in set(own) & set(given) if own[k].shape != given[k].shape)
        if missing or misshapen:
            raise WmrlError(
                "the world model's VAE does not match its config: "
                f"missing {missing[:3]}, wrong shape {misshapen[:3]}"
            )
        with torch.no_grad():
            for key, value in own.items():
                value.copy_(given[key])

    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [N,H,W,3] -> float [N,3,H,W] in [-1,1] at the world model's frame size."""
        x = to_unit_range(frames) * 2.0 - 1.0
        size = self.config.frame_size
        if size is not None and tuple(x.shape[-2:]) != size:
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x.clamp(-1.0, 1.0)

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """[N,3,H,W] in [-1,1] -> the world model's scaled latents [N,C,h,w] (posterior means)."""
        mu = self.vae.encode(images).latent_dist.mode()
        scale, shift = self.config.latent_affine
        return (mu - shift) * scale

    def logits(self, images: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        task_ids = check_task_ids(task_ids, self.config.num_tasks)
        features = torch.cat([self.head(self.encode(images)), self.task_embedding(task_ids)], 1)
        return self.fusion_layer(features).squeeze(-1)


@dataclass
class WorldModelEncoder:
    """What a new latent judge takes from a world model: its per-frame VAE (an AutoencoderKL),
    the VAE's kwargs with the world model's latent scaling, and the world model's frame size."""

    vae: nn.Module
    vae_config: dict[str, Any]
    frame_size: tuple[int, int]

    @classmethod
    def of(cls, world_model: Any) -> WorldModelEncoder:
        """A world model's (OpenSora's: `vae`, `config.vae`, `height`, `width`); a VAE whose
        latents span several frames (Wan's) is refused in one line."""
        from diffusers import AutoencoderKL

        vae = getattr(world_model, "vae", None)
        if not isinstance(vae, AutoencoderKL):
            raise ConfigError(
                "a latent reward model reads a per-frame VAE (OpenSora's AutoencoderKL); this "
                f"world model's is {type(vae).__name__}, whose latents span several frames"
            )
        size = (int(world_model.height), int(world_model.width))
        return cls(vae, dict(world_model.config.vae), size)


def latent_reward_model(
    encoder: WorldModelEncoder, width: int, num_tasks: int, **sizes: Any
) -> LatentRewModel:
    """A new latent judge on a world model's VAE encoder (its weights copied, in float32).
    `sizes`: further LatentRewConfig fields (task_embed_dim, hidden_dim, dropout)."""
    config = LatentRewConfig(
        vae=encoder.vae_config,
        frame_size=encoder.frame_size,
        width=width,
        num_tasks=num_tasks,
        **sizes,
    )
    model = LatentRewModel(config)
    model.load_encoder(encoder.vae.state_dict())
    return model
