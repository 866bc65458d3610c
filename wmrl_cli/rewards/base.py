"""What every reward model offers the imagined env, and the frame conversions they share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from wmrl_cli.errors import WmrlError


class RewardModel(Protocol):
    """frames uint8 [B,T,H,W,3] (+ task ids [B]) -> success probability [B,T] (ARCHITECTURE.md).

    `kind` names the architecture ("resnet", "taskemb_resnet", "videomae", "latent");
    `threshold` is the calibrated success threshold saved with the model (None when it was never
    calibrated). The kinds in TASK_CONDITIONED need the task ids; the others ignore them.
    """

    @property
    def kind(self) -> str: ...

    @property
    def threshold(self) -> float | None: ...

    def predict(
        self, frames: np.ndarray | torch.Tensor, task_ids: np.ndarray | torch.Tensor | None = None
    ) -> torch.Tensor: ...


# The kinds whose score depends on the task: their callers pass the task id of every video.
TASK_CONDITIONED = ("taskemb_resnet", "latent")


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


def check_task_ids(task_ids: torch.Tensor | None, num_tasks: int) -> torch.Tensor:
    """The task ids of a task-conditioned model's frames, each checked to lie in [0, num_tasks)."""
    if task_ids is None:
        raise WmrlError("this reward model embeds the task: it needs the task id of every frame")
    if task_ids.numel() and (int(task_ids.min()) < 0 or int(task_ids.max()) >= num_tasks):
        raise WmrlError(
            f"task ids must lie in [0, {num_tasks}) for this reward model; got "
            f"{int(task_ids.min())}..{int(task_ids.max())}"
        )
    return task_ids


class FrameRewardModel(nn.Module, ABC):
    """A success classifier that scores every frame on its own: `preprocess` turns uint8 frames
    into the network's input, `logits` scores it; the trainer calls both (rewards/resnet.py,
    rewards/latent.py)."""

    config: Any  # a dataclass with `kind` and `threshold`

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def threshold(self) -> float | None:
        return self.config.threshold

    @abstractmethod
    def preprocess(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [N,H,W,3] -> the network's input [N,3,H',W'] (float)."""

    @abstractmethod
    def logits(self, images: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        """preprocessed images [N,3,H',W'] (+ task ids [N]) -> success logit [N]."""

    def forward(self, images: torch.Tensor, task_ids: torch.Tensor | None = None) -> torch.Tensor:
        """preprocessed images [N,3,H',W'] (+ task ids [N]) -> success probability [N]."""
        return torch.sigmoid(self.logits(images, task_ids))

    @torch.no_grad()
    def predict(
        self,
        frames: np.ndarray | torch.Tensor,
        task_ids: np.ndarray | torch.Tensor | None = None,
        batch_size: int = 64,
    ) -> torch.Tensor:
        """frames uint8 [B,T,H,W,3] (+ task ids [B]) -> success probability [B,T] (float32, on
        the model's device). Every frame is scored on its own, `batch_size` frames at a time."""
        video = as_frames(frames)
        b, t = video.shape[:2]
        flat = video.reshape(b * t, *video.shape[2:])
        ids = None
        if task_ids is not None:
            ids = torch.as_tensor(task_ids, dtype=torch.long).reshape(-1)
            if ids.numel() != b:
                raise WmrlError(f"need one task id per video: {ids.numel()} ids for {b} videos")
            ids = ids[:, None].expand(b, t).reshape(-1)
        device = module_device(self)
        out = []
        with eval_mode(self):
            for start in range(0, b * t, batch_size):
                images = self.preprocess(flat[start : start + batch_size].to(device))
                part_ids = None if ids is None else ids[start : start + batch_size].to(device)
                out.append(self(images, part_ids).float())
        return torch.cat(out).reshape(b, t)
