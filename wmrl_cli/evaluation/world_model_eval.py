"""World-model reliability: open-loop autoregressive rollouts against the recorded truth.

From each held-out episode's first frame, the world model is fed the recorded actions chunk by
chunk (never the true frames again) for `horizon` steps. Every predicted frame is compared with
the recorded one (PSNR, SSIM), next to the copy-the-last-context-frame baseline, which predicts
that nothing moves. Metrics per horizon step average over the episodes that last that long.

With `action_check`, every episode is rolled out a second time from the same first frame and
with the same sampling noise, but driven by another episode's actions. A world model that
listens to its actions is clearly closer to the truth with the recorded actions than with the
other ones; a gap near zero means the pixels are right for reasons the actions do not control
(the scene and the average motion), and so will be the outcome: RL in such a model gets no
signal from what the policy does.
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
    other_actions_psnr: list[float] | None = None  # the same rollouts driven by other actions

    def action_gap(self, step: int) -> float | None:
        """PSNR with the recorded actions minus PSNR with another episode's actions (dB)."""
        if self.other_actions_psnr is None:
            return None
        return self.psnr[step - 1] - self.other_actions_psnr[step - 1]

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
            gap = self.action_gap(step)
            if gap is not None:
                out[f"action_gap@{step}"] = gap
        return out


@torch.no_grad()
def open_loop_eval(
    world_model: WorldModel,
    episodes: list[Episode],
    horizon: int = 32,
    batch_size: int = 8,
    seed: int = 0,
    keep_videos: int = 4,
    action_check: bool = False,
) -> OpenLoopReport:
    c = episodes[0].chunk_size
    n_chunks = -(-horizon // c)
    steps = n_chunks * c
    names = ["psnr", "ssim", "copy_psnr", "copy_ssim"]
    check = action_check and len(episodes) > 1
    if check:
        names.append("other_actions_psnr")
    sums = {name: np.zeros(horizon) for name in names}
    counts = np.zeros(horizon)
    videos = []
    for start in range(0, len(episodes), batch_size):
        batch = episodes[start : start + batch_size]
        a_dim = batch[0].actions.shape[1]
        first = np.stack([e.frames[0] for e in batch])
        actions = np.stack([_padded(e.actions, steps, a_dim) for e in batch])
        preds = _rollout(world_model, first, actions, c, horizon, seed + start)
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
        if check:
            # Episode j is driven by episode j+1's actions (cyclically over the whole list).
            others = [episodes[(start + j + 1) % len(episodes)] for j in range(len(batch))]
            other_actions = np.stack([_padded(e.actions, steps, a_dim) for e in others])
            other = _rollout(world_model, first, other_actions, c, horizon, seed + start)
            sums["other_actions_psnr"] += (psnr(other, truth).numpy() * valid).sum(0)
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


def _rollout(
    world_model: WorldModel,
    first: np.ndarray,
    actions: np.ndarray,
    chunk: int,
    horizon: int,
    seed: int,
) -> torch.Tensor:
    """Frames [B, horizon, H, W, 3] predicted from `first` [B,H,W,3] under `actions`
    [B, steps, A], `chunk` steps at a time; the same seed gives the same sampling noise."""
    k = world_model.num_context_frames
    world_model.reset_context(
        first,
        np.repeat(first[:, None], k, axis=1),
        np.tile(rest_action(actions.shape[2]), (len(first), k, 1)),
    )
    gen = torch.Generator().manual_seed(seed)
    chunks = [
        world_model.predict(torch.from_numpy(actions[:, i : i + chunk]), gen).cpu()
        for i in range(0, actions.shape[1], chunk)
    ]
    return torch.cat(chunks, dim=1)[:, :horizon]


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
