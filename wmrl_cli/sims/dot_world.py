"""A synthetic video world in which only the actions decide the motion: the controllability test.

A white dot moves by `speed` pixels x action per step (actions i.i.d. uniform in [-1, 1]^2,
clipped at the border), over a black background or, with `distractors`, over a static scene of
coloured rectangles drawn per episode. Since the actions are independent of everything before
them, the context frames carry no hint of the next move: a world model that predicts the dot
must read its actions, and one that ignores them can do no better than the average motion.

Everything needed to score a model is analytic: `positions` replays any action sequence from a
start position (the "simulator" for the response ratio), `render` draws it, `dot_centroid`
finds the dot in a predicted frame. Used by `experiments/controllability/wm_control.py` and the
slow test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wmrl_cli.data.episodes import Episode

DOT_COLOR = 255  # the dot is pure white; scene colours stay below SCENE_MAX in every channel
SCENE_MAX = 150


@dataclass(frozen=True)
class DotWorld:
    size: int = 64
    radius: float = 3.0
    speed: float = 2.0
    distractors: bool = False

    @property
    def margin(self) -> float:
        return self.radius + 1.0

    def scene(self, rng: np.random.Generator) -> np.ndarray:
        """The static background [H,W,3]: black, or a few dim rectangles (distractors)."""
        image = np.zeros((self.size, self.size, 3), dtype=np.uint8)
        if self.distractors:
            for _ in range(6):
                x0, y0 = rng.integers(0, self.size - 8, 2)
                w, h = rng.integers(6, self.size // 3, 2)
                image[y0 : y0 + h, x0 : x0 + w] = rng.integers(30, SCENE_MAX, 3)
        return image

    def positions(self, start: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Dot centres [T+1,2] (x, y) from `start` [2] under actions [T,>=2] (only the first two
        dimensions move the dot)."""
        low, high = self.margin, self.size - 1 - self.margin
        out = [np.asarray(start, dtype=np.float64)]
        for action in actions:
            out.append(np.clip(out[-1] + self.speed * np.clip(action[:2], -1, 1), low, high))
        return np.stack(out)

    def render(self, background: np.ndarray, centres: np.ndarray) -> np.ndarray:
        """Frames [T,H,W,3] uint8 of the dot at each centre [T,2], anti-aliased over one pixel."""
        ys, xs = np.mgrid[0 : self.size, 0 : self.size].astype(np.float64)
        frames = []
        for cx, cy in centres:
            distance = np.hypot(xs - cx, ys - cy)
            cover = np.clip(self.radius + 0.5 - distance, 0.0, 1.0)[..., None]
            frames.append(background * (1 - cover) + DOT_COLOR * cover)
        return np.round(np.stack(frames)).astype(np.uint8)

    def episode(self, seed: int, length: int, chunk_size: int, action_dim: int = 2) -> Episode:
        """One episode of `length` i.i.d. random actions (extra action dimensions are noise the
        dot ignores); its sim_states hold the dot's centre at every chunk boundary."""
        rng = np.random.default_rng(seed)
        background = self.scene(rng)
        start = rng.uniform(self.margin + 8, self.size - 1 - self.margin - 8, 2)
        actions = rng.uniform(-1, 1, (length, action_dim)).astype(np.float32)
        centres = self.positions(start, actions)
        frames = self.render(background, centres)
        return Episode(
            task_id=0,
            task_name="dot" + ("-distractors" if self.distractors else ""),
            instruction="move the dot",
            seed=seed,
            init_id=seed,
            frames=frames,
            actions=actions,
            rewards=np.zeros(length, dtype=np.float32),
            success=np.zeros(length, dtype=bool),
            chunk_size=chunk_size,
            sim_states={t: centres[t] for t in range(0, length + 1, chunk_size)},
            policy="random",
            suite="dot",
        )

    def replay_one(self, episode: Episode, actions: np.ndarray) -> np.ndarray:
        """The frames [T+1,H,W,3] the world shows from `episode`'s start under other actions."""
        background = self.scene(np.random.default_rng(episode.seed))
        return self.render(background, self.positions(episode.sim_states[0], actions))

    def replay(self, episodes: Sequence[Episode], actions: np.ndarray) -> np.ndarray:
        """`replay_one` for a batch: frames [B,T+1,H,W,3] (the `open_loop_eval` replay)."""
        return np.stack([self.replay_one(e, a) for e, a in zip(episodes, actions)])


def dot_centroid(frame: np.ndarray) -> np.ndarray:
    """The dot's centre (x, y) in a frame [H,W,3]: the centroid of its whiteness, the amount by
    which the darkest channel exceeds the scene's brightest (a blurred or faint dot still counts
    in proportion). A frame with no dot at all gives the image centre."""
    frame = frame.astype(np.float64)
    weight = np.clip(frame.min(axis=-1) - SCENE_MAX, 0, None)
    total = weight.sum()
    size_y, size_x = frame.shape[:2]
    if total <= 0:
        return np.array([(size_x - 1) / 2, (size_y - 1) / 2])
    ys, xs = np.mgrid[0:size_y, 0:size_x]
    return np.array([(weight * xs).sum() / total, (weight * ys).sum() / total])
