"""The encoded training windows of a world model, computed once before denoiser training.

A per-frame (2D) autoencoder's latent of a frame does not depend on its neighbours, so each
episode's frames are encoded once and every window gathers its K+C latents from them: a
stride-1 window set holds every frame K+C times (12 with the embedded K=4, C=8), so this
encodes that many times fewer frames and keeps that many times less memory. A causal video
autoencoder's latent depends on the frames before it, so each window is encoded in the layout
rollouts encode it in.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from wmrl_cli.data.windows import WindowSet
from wmrl_cli.world_models.interface import WorldModel

ENCODE_BATCH = 32  # windows per encoder call; per-frame encoding uses as many frames per call


class WindowLatents:
    """Latents [B,c,K+C,h,w] of training windows, served by window index.

    Either `windows_latents` [N,c,K+C,h,w] (one entry per window), or `frame_latents`
    [F,c,h,w] (every frame of every episode, episode e starting at `episode_offsets[e]`) with
    the window set that maps a window to its frames.
    """

    def __init__(
        self,
        windows: WindowSet,
        window_latents: torch.Tensor | None = None,
        frame_latents: torch.Tensor | None = None,
        episode_offsets: np.ndarray | None = None,
    ) -> None:
        if (window_latents is None) == (frame_latents is None):
            raise ValueError("give exactly one of window_latents and frame_latents")
        self.windows = windows
        self.window_latents = window_latents
        self.frame_latents = frame_latents
        self.episode_offsets = episode_offsets

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, indices: np.ndarray) -> torch.Tensor:
        if self.window_latents is not None:
            return self.window_latents[torch.as_tensor(indices)]
        episode, steps = self.windows.frame_steps(np.asarray(indices))
        rows = torch.as_tensor(self.episode_offsets[episode][:, None] + steps)
        return self.frame_latents[rows].transpose(1, 2)  # [B,K+C,c,h,w] -> [B,c,K+C,h,w]

    @classmethod
    @torch.no_grad()
    def encode(
        cls,
        model: WorldModel,
        windows: WindowSet,
        advance: Callable[[int], None] = lambda n: None,
    ) -> WindowLatents:
        """Encode the windows with `model`'s autoencoder; `advance(n)` reports n windows done."""
        if model.frame_wise_latents:
            return cls._encode_frames(model, windows, advance)
        batches = []
        for start in range(0, len(windows), ENCODE_BATCH):
            idx = np.arange(start, min(start + ENCODE_BATCH, len(windows)))
            batches.append(model.encode_window(windows.batch(idx)).cpu())
            advance(len(idx))
        return cls(windows, window_latents=torch.cat(batches))

    @classmethod
    def _encode_frames(
        cls, model: WorldModel, windows: WindowSet, advance: Callable[[int], None]
    ) -> WindowLatents:
        per_call = ENCODE_BATCH * (windows.context + windows.chunk)
        latents, offsets, total = [], [], 0
        per_episode = np.bincount(windows.starts[:, 0], minlength=len(windows.episodes))
        for episode, n_windows in zip(windows.episodes, per_episode, strict=True):
            offsets.append(total)
            frames = torch.as_tensor(episode.frames)
            for start in range(0, len(frames), per_call):
                clip = frames[None, start : start + per_call]
                latents.append(model.encode_frames(clip)[0].transpose(0, 1).cpu())
            total += len(frames)
            advance(int(n_windows))
        return cls(
            windows,
            frame_latents=torch.cat(latents),
            episode_offsets=np.asarray(offsets, dtype=np.int64),
        )

    def state_dict(self) -> dict[str, torch.Tensor]:
        if self.window_latents is not None:
            return {"window_latents": self.window_latents}
        return {
            "frame_latents": self.frame_latents,
            "episode_offsets": torch.as_tensor(self.episode_offsets),
        }

    @classmethod
    def from_state_dict(cls, windows: WindowSet, state: dict[str, torch.Tensor]) -> WindowLatents:
        if "window_latents" in state:
            return cls(windows, window_latents=state["window_latents"])
        return cls(
            windows,
            frame_latents=state["frame_latents"],
            episode_offsets=state["episode_offsets"].numpy(),
        )
