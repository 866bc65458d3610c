"""World-model training windows cut from stored episodes.

A window starting at step s of an episode (frames[t] is the observation before action t):

    reference        frames[0]                          the episode's first frame
    context frames   frames[s-K+1 .. s]                 frames before 0 repeat frames[0]
    context actions  the actions that produced them     actions[t-1]; the rest action for t <= 0
    target frames    frames[s+1 .. s+C]
    target actions   actions[s .. s+C-1]                the action that produced each target

This is the action convention of `world_models/interface.py` and of the RLinf reset layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.data.reset_set import rest_action


@dataclass
class WindowSet:
    """All windows of some episodes, stored once per episode and cut on demand."""

    episodes: list[Episode]
    starts: np.ndarray  # [N, 2] (episode index, start step)
    context: int
    chunk: int

    def __len__(self) -> int:
        return len(self.starts)

    def window(self, i: int) -> dict[str, np.ndarray]:
        e, s = (int(v) for v in self.starts[i])
        return cut_window(self.episodes[e], s, self.context, self.chunk)

    def batch(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        windows = [self.window(int(i)) for i in indices]
        return {key: np.stack([w[key] for w in windows]) for key in windows[0]}

    def frame_steps(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode index [B], frame steps [B, K+C]) of the context and target frames of each
        window: the frames `batch` cuts, as positions in their episode."""
        episode, start = self.starts[indices].T
        context = start[:, None] + np.arange(1 - self.context, 1)[None]
        target = start[:, None] + np.arange(1, self.chunk + 1)[None]
        return episode, np.concatenate([np.maximum(context, 0), target], axis=1)


def cut_window(episode: Episode, start: int, context: int, chunk: int) -> dict[str, np.ndarray]:
    a_dim = episode.actions.shape[1]
    ctx_steps = np.arange(start - context + 1, start + 1)
    rest = rest_action(a_dim)
    ctx_actions = np.stack([episode.actions[t - 1] if t > 0 else rest for t in ctx_steps])
    return {
        "reference_frames": episode.frames[0],
        "context_frames": episode.frames[np.maximum(ctx_steps, 0)],
        "context_actions": ctx_actions.astype(np.float32),
        "target_frames": episode.frames[start + 1 : start + chunk + 1],
        "target_actions": episode.actions[start : start + chunk].astype(np.float32),
    }


def build_windows(
    store: EpisodeStore, episode_ids: list[int], context: int, chunk: int, stride: int = 1
) -> WindowSet:
    """Every window whose C targets lie inside the episode, starting every `stride` steps."""
    episodes = [store.load(i) for i in episode_ids]
    starts = [
        (e, s)
        for e, episode in enumerate(episodes)
        for s in range(0, episode.length - chunk + 1, stride)
    ]
    return WindowSet(episodes, np.asarray(starts, dtype=np.int64).reshape(-1, 2), context, chunk)
