"""A toy world for the controllability metrics: the image brightness is the state, moved by
40 x action[0] per step; toy world models and episodes recorded in it."""

from __future__ import annotations

import numpy as np
import torch

from wmrl_cli.data.episodes import Episode
from wmrl_cli.world_models.interface import WorldModel

SIZE, CHUNK = 8, 4


class ToyWorldModel(WorldModel):
    """What every toy model shares: one unused parameter, no training, no loading."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, batch, generator=None) -> torch.Tensor:
        return self.weight.sum()

    def _to_vae_input(self, frames: torch.Tensor) -> torch.Tensor:
        return frames.float()

    @classmethod
    def from_state_dict(cls, state_dict, config):
        raise NotImplementedError


class ShiftModel(ToyWorldModel):
    """Brightness moves by `gain` x 40 x action[0] per step: gain 1 reacts as the toy worlds of
    the tests do, 0 ignores its actions, 0.5 reacts half as much."""

    action_dim, num_context_frames, height, width = 2, 1, SIZE, SIZE

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.gain = gain
        self.level = torch.zeros(0)

    def reset_context(self, reference_frames, context_frames, context_actions, ref=None) -> None:
        self.level = torch.as_tensor(context_frames)[:, -1, 0, 0, 0].float()

    def predict(self, actions, generator=None) -> torch.Tensor:
        steps = self.gain * 40.0 * torch.as_tensor(actions)[..., 0]
        levels = self.level[:, None] + steps.cumsum(1)
        self.level = levels[:, -1]
        frames = levels.clamp(0, 255).round().to(torch.uint8)
        return frames[:, :, None, None, None].expand(-1, -1, SIZE, SIZE, 3).contiguous()


def toy_frames(start: float, actions: np.ndarray) -> np.ndarray:
    levels = np.clip(start + 40 * np.concatenate([[0.0], np.cumsum(actions[:, 0])]), 0, 255)
    return np.broadcast_to(
        np.round(levels).astype(np.uint8)[:, None, None, None], (len(levels), SIZE, SIZE, 3)
    ).copy()


def toy_episode(actions: np.ndarray, seed: int, task_id: int = 0) -> Episode:
    return Episode(
        task_id=task_id,
        task_name=f"toy{task_id}",
        instruction="toy",
        seed=seed,
        init_id=seed,
        frames=toy_frames(120.0, actions),
        actions=actions.astype(np.float32),
        rewards=np.zeros(len(actions), dtype=np.float32),
        success=np.zeros(len(actions), dtype=bool),
        chunk_size=CHUNK,
    )


def toy_replay(episodes: list[Episode], actions: np.ndarray) -> np.ndarray:
    return np.stack([toy_frames(120.0, a) for a in actions])


def toy_episodes() -> list[Episode]:
    # small actions so the brightness never clips: the response is linear in the gain
    rng = np.random.default_rng(0)
    return [toy_episode(rng.uniform(-0.4, 0.4, (8, 2)), seed=i) for i in range(12)]
