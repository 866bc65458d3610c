"""WMPO's clip-level success classifier: transformers' VideoMAEForVideoClassification, 2 classes,
scoring a video by sliding clip windows (WMPO, arXiv 2511.09515).

WMPO builds it from MCG-NJU/videomae-base with num_frames=8 and num_labels=2 (videomae-base has
use_mean_pooling=false: the classifier reads the first token after the final LayerNorm), and
feeds 224x224 clips normalized with ImageNet statistics by VideoMAEImageProcessor (shorter side
to 224, center crop). The clip ending at frame t is labelled positive when the task is solved
at t. The probability of success is softmax(logits)[1] as in WMPO's training and threshold
search; WMPO's rollout code thresholds sigmoid(logits[1]) instead, so `score="sigmoid"`
reproduces that for their published per-task thresholds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from torch import nn

from wmrl_cli.errors import ConfigError
from wmrl_cli.rewards.base import (
    as_frames,
    eval_mode,
    module_device,
    resize_square,
    to_unit_range,
)

if TYPE_CHECKING:
    from transformers import VideoMAEConfig

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass
class VideoMAERewConfig:
    """Sizes of the VideoMAE reward model. The defaults are WMPO's: videomae-base with 8-frame
    clips at 224x224; `tiny()` is the same class at a CPU-friendly size."""

    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    image_size: int = 224
    patch_size: int = 16
    tubelet_size: int = 2
    num_frames: int = 8
    use_mean_pooling: bool = False
    score: Literal["softmax", "sigmoid"] = "softmax"
    threshold: float | None = None

    @classmethod
    def full(cls) -> VideoMAERewConfig:
        return cls()

    @classmethod
    def tiny(cls) -> VideoMAERewConfig:
        return cls(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=32,
            patch_size=8,
        )

    def to_dict(self) -> dict:
        return asdict(self)

    def to_hf(self) -> VideoMAEConfig:
        # transformers is imported on first use: it costs seconds, and the ResNet reward
        # models (the imagined env's default) never need it.
        from transformers import VideoMAEConfig

        if self.num_frames % self.tubelet_size != 0:
            raise ConfigError(
                f"num_frames {self.num_frames} must be a multiple of tubelet_size "
                f"{self.tubelet_size}"
            )
        if self.score not in ("softmax", "sigmoid"):
            raise ConfigError(f"score must be 'softmax' or 'sigmoid' (got {self.score!r})")
        return VideoMAEConfig(
            num_labels=2,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            image_size=self.image_size,
            patch_size=self.patch_size,
            tubelet_size=self.tubelet_size,
            num_frames=self.num_frames,
            use_mean_pooling=self.use_mean_pooling,
        )


def clip_indices(num_frames: int, window: int) -> torch.Tensor:
    """idx[t, k] = max(0, t - window + 1 + k): the frames of the clip that ends at frame t.

    Clips that would start before the first frame repeat the first frame (WMPO scores only full
    windows; padding lets every frame get a probability)."""
    t = torch.arange(num_frames)[:, None]
    k = torch.arange(window)[None, :]
    return (t - window + 1 + k).clamp(min=0)


class VideoMAERewardModel(nn.Module):
    """Success probability of the clip ending at each frame of a video."""

    kind = "videomae"

    def __init__(self, config: VideoMAERewConfig | None = None) -> None:
        super().__init__()
        from transformers import VideoMAEForVideoClassification

        self.config = config or VideoMAERewConfig()
        self.model = VideoMAEForVideoClassification(self.config.to_hf())
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN)[:, None, None], persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD)[:, None, None], persistent=False)

    @property
    def threshold(self) -> float | None:
        return self.config.threshold

    @property
    def clip_length(self) -> int:
        """Frames per clip: the imagined env keeps this many - 1 frames of history to score
        the first frames of a chunk."""
        return self.config.num_frames

    def logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """pixel_values [N, num_frames, 3, S, S] (normalized) -> logits [N, 2]."""
        return self.model(pixel_values=pixel_values).logits

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """pixel_values [N, num_frames, 3, S, S] -> probability that the clip shows success [N]."""
        logits = self.logits(pixel_values)
        if self.config.score == "sigmoid":
            return torch.sigmoid(logits[:, 1])
        return torch.softmax(logits, dim=-1)[:, 1]

    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [N,H,W,3] -> [N,3,S,S]: to [0,1], shorter side to S, center crop, ImageNet
        normalization (VideoMAEImageProcessor's steps)."""
        x = resize_square(to_unit_range(frames), self.config.image_size)
        return (x - self.mean) / self.std

    @torch.no_grad()
    def predict(
        self,
        frames: np.ndarray | torch.Tensor,
        task_ids: np.ndarray | torch.Tensor | None = None,
        batch_size: int = 16,
    ) -> torch.Tensor:
        """frames uint8 [B,T,H,W,3] -> [B,T]: entry (b, t) is the success probability of the
        `num_frames`-frame clip of video b that ends at frame t (see `clip_indices`). Task ids
        are accepted for the common interface and ignored (WMPO trains one model per task)."""
        video = as_frames(frames)
        b, t = video.shape[:2]
        device = module_device(self)
        window = self.config.num_frames
        idx = clip_indices(t, window).to(device)  # [T, W]
        out = []
        with eval_mode(self):
            for i in range(b):
                # one video's frames are normalized once and shared by its overlapping clips;
                # clips are scored `batch_size` at a time (a whole rollout at 224x224 would not
                # fit in memory).
                pixels = self.preprocess(video[i].to(device))  # [T,3,S,S]
                for start in range(0, t, batch_size):
                    out.append(self(pixels[idx[start : start + batch_size]]).float())
        return torch.cat(out).reshape(b, t)
