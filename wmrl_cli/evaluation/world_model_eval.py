"""World-model reliability: open-loop autoregressive rollouts against the recorded truth.

From each held-out episode's first frame, the world model is fed the recorded actions chunk by
chunk (never the true frames again) for `horizon` steps. Every predicted frame is compared with
the recorded one (PSNR, SSIM), next to the copy-the-last-context-frame baseline, which predicts
that nothing moves. Metrics per horizon step average over the episodes that last that long.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from wmrl_cli.data.episodes import Episode
from wmrl_cli.data.reset_set import rest_action
from wmrl_cli.evaluation.video_metrics import psnr, ssim
from wmrl_cli.world_models.interface import WorldModel


@dataclass
class OpenLoopReport:
    horizon: int
    psnr: list[float]  # per step 1..horizon
    ssim: list[float]
    copy_psnr: list[float]
    copy_ssim: list[float]
    episodes: int
    videos: np.ndarray | None = field(default=None, repr=False)  # [N, T, H, 2W, 3]: truth | model

    def at(self, step: int) -> dict[str, float]:
        i = step - 1
        return {
            "psnr": self.psnr[i],
            "ssim": self.ssim[i],
            "copy_psnr": self.copy_psnr[i],
            "copy_ssim": self.copy_ssim[i],
        }

    def beats_copy_baseline(self) -> bool:
        return all(m > c for m, c in zip(self.psnr, self.copy_psnr))

    def summary(self, steps: tuple[int, ...] = (8, 16, 24, 32)) -> dict[str, float]:
        out: dict[str, float] = {}
        for step in (s for s in steps if s <= self.horizon):
            for key, value in self.at(step).items():
                out[f"{key}@{step}"] = value
        return out


@torch.no_grad()
def open_loop_eval(
    world_model: WorldModel,
    episodes: list[Episode],
    horizon: int = 32,
    batch_size: int = 8,
    seed: int = 0,
    keep_videos: int = 4,
) -> OpenLoopReport:
    c = episodes[0].chunk_size
    k = world_model.num_context_frames
    n_chunks = -(-horizon // c)
    steps = n_chunks * c
    gen = torch.Generator().manual_seed(seed)
    sums = {name: np.zeros(horizon) for name in ("psnr", "ssim", "copy_psnr", "copy_ssim")}
    counts = np.zeros(horizon)
    videos = []
    for start in range(0, len(episodes), batch_size):
        batch = episodes[start : start + batch_size]
        a_dim = batch[0].actions.shape[1]
        first = np.stack([e.frames[0] for e in batch])
        world_model.reset_context(
            first,
            np.repeat(first[:, None], k, axis=1),
            np.tile(rest_action(a_dim), (len(batch), k, 1)),
        )
        actions = np.stack([_padded(e.actions, steps, a_dim) for e in batch])
        preds = torch.cat(
            [
                world_model.predict(torch.from_numpy(actions[:, i * c : (i + 1) * c]), gen).cpu()
                for i in range(n_chunks)
            ],
            dim=1,
        )[:, :horizon]
        truth = torch.from_numpy(np.stack([_padded_frames(e.frames, horizon) for e in batch]))
        copy = torch.from_numpy(first)[:, None].expand_as(truth)
        valid = np.array([[t < e.length for t in range(horizon)] for e in batch], dtype=float)
        for name, value in (
            ("psnr", psnr(preds, truth)),
            ("ssim", ssim(preds, truth)),
            ("copy_psnr", psnr(copy, truth)),
            ("copy_ssim", ssim(copy, truth)),
        ):
            sums[name] += (value.numpy() * valid).sum(0)
        counts += valid.sum(0)
        if len(videos) < keep_videos:
            videos.extend(torch.cat([truth, preds], dim=3).numpy()[: keep_videos - len(videos)])
    means = {
        name: list(np.where(counts > 0, s / np.maximum(counts, 1), np.nan))
        for name, s in sums.items()
    }
    return OpenLoopReport(
        horizon=horizon,
        episodes=len(episodes),
        videos=np.stack(videos) if videos else None,
        **means,
    )


def _padded(actions: np.ndarray, steps: int, a_dim: int) -> np.ndarray:
    """Recorded actions, then the rest action after the episode ends."""
    out = np.tile(rest_action(a_dim), (steps, 1))
    n = min(steps, len(actions))
    out[:n] = actions[:n]
    return out.astype(np.float32)


def _padded_frames(frames: np.ndarray, horizon: int) -> np.ndarray:
    """frames[1 .. horizon], holding the last frame after the episode ends (masked anyway)."""
    idx = np.minimum(np.arange(1, horizon + 1), len(frames) - 1)
    return frames[idx]
