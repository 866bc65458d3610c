"""What every reward model offers the imagined env, and the frame conversions they share."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from wmrl_cli.errors import WmrlError


class RewardModel(Protocol):
    """frames uint8 [B,T,H,W,3] (+ task ids [B]) -> success probability [B,T] (ARCHITECTURE.md).

    `kind` names the architecture ("resnet", "taskemb_resnet", "videomae"); `threshold` is the
    calibrated success threshold saved with the model (None when it was never calibrated).
    """

    @property
    def kind(self) -> str: ...

    @property
    def threshold(self) -> float | None: ...

    def predict(
        self, frames: np.ndarray | torch.Tensor, task_ids: np.ndarray | torch.Tensor | None = None
    ) -> torch.Tensor: ...


def as_frames(frames: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Check and convert a uint8 [B,T,H,W,3] video batch to a torch tensor (no copy when it
    already is one)."""
    x = torch.as_tensor(frames)
    if x.dim() != 5 or x.shape[-1] != 3 or x.dtype != torch.uint8:
        raise WmrlError(
            f"reward models take uint8 frames [B,T,H,W,3]; got {x.dtype} {tuple(x.shape)}"
        )
    return x


def to_unit_range(frames: torch.Tensor) -> torch.Tensor:
    """uint8 [..., H, W, 3] -> float32 [..., 3, H, W] in [0, 1], contiguous: a channels-last
    view sends small convolutions down a oneDNN path that corrupts the heap in backward
    (seen with torch 2.13 on CPU, ResNet width 4)."""
    return (frames.movedim(-1, -3).float() / 255.0).contiguous()


def resize_square(images: torch.Tensor, size: int) -> torch.Tensor:
    """[N,3,H,W] -> [N,3,size,size]: scale the shorter side to `size` (bilinear, antialiased,
    close to PIL's BILINEAR used by HF image processors), then center-crop."""
    h, w = images.shape[-2:]
    if (h, w) == (size, size):
        return images
    scale = size / min(h, w)
    new_h, new_w = max(size, round(h * scale)), max(size, round(w * scale))
    images = F.interpolate(
        images, size=(new_h, new_w), mode="bilinear", align_corners=False, antialias=True
    )
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return images[..., top : top + size, left : left + size]


def module_device(module: nn.Module) -> torch.device:
    """The device of the module's first parameter (CPU for a parameterless module)."""
    return next(module.parameters(), torch.empty(0)).device


@contextmanager
def eval_mode(module: nn.Module):
    """Run inference in eval mode (BatchNorm statistics, no dropout), restoring the previous
    mode afterwards so a training loop that scores frames is not switched silently."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


def round_scores(scores: np.ndarray) -> np.ndarray:
    """Success probabilities -> 0/1, as RLinf's reward models return them (torch.round of the
    sigmoid: halves round to even, so 0.5 -> 0 and the result is 1 exactly where p > 0.5)."""
    return (scores > 0.5).astype(scores.dtype)
