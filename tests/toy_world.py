"""A toy world model for the controllability metrics: the image brightness is the state."""

from __future__ import annotations

import torch

from wmrl_cli.world_models.interface import WorldModel

SIZE = 8


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
