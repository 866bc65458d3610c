"""What one global step trains on, and in how many optimizer steps.

RLinf's global step collects `rollout_epoch` rollouts of all envs (each epoch draws fresh
initial states), then shuffles the collected data and cuts it into global batches of
`global_batch_size`, one optimizer step each (its Wan recipe: 16 epochs x 64 envs = 1024
trajectories, 32 chunk steps each, 32768 samples / 8192 = 4 optimizer steps). wmrl keeps
whole trajectories together: the rollouts are concatenated and the shuffled trajectories cut
into `optimizer_steps` batches.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.buffer import Rollout


def check_world_size(num_envs: int, group_size: int, world: int) -> None:
    """Each rank owns whole GRPO groups: num_envs must split into `world` shards of groups."""
    if world < 1:
        raise ConfigError(f"--num-processes must be at least 1, got {world}")
    if num_envs % (world * group_size):
        raise ConfigError(
            f"invalid value for 'algorithm.num_envs': {num_envs} must be a multiple "
            f"of group_size x processes ({group_size} x {world})"
        )


# Per-step fields [B,T,...] and what a padded (never executed) step holds: it is done, masked.
_PAD = {"images": 0, "tokens": 0, "logprobs": 0.0, "values": 0.0, "rewards": 0.0, "dones": 1.0}


def _pad_steps(x: np.ndarray | torch.Tensor, steps: int, value: float | bool):
    """Pad dimension 1 of x to `steps` with `value`."""
    missing = steps - x.shape[1]
    if missing <= 0:
        return x
    shape = (x.shape[0], missing, *x.shape[2:])
    if isinstance(x, np.ndarray):
        return np.concatenate([x, np.full(shape, value, dtype=x.dtype)], axis=1)
    return torch.cat([x, torch.full(shape, value, dtype=x.dtype)], dim=1)


def concat_rollouts(rollouts: list[Rollout]) -> Rollout:
    """Rollouts of B_k trajectories each -> one of sum B_k, in order (groups stay whole).

    A rollout that stopped early (every env done) is padded to the longest with steps that are
    done, masked and zero, so they take no part in returns, advantages or losses.
    """
    if not rollouts:
        raise ValueError("no rollouts to concatenate")
    if len(rollouts) == 1:
        return rollouts[0]
    steps = max(r.step_mask.shape[1] for r in rollouts)
    parts: dict[str, object] = {}
    for f in fields(Rollout):
        values = [getattr(r, f.name) for r in rollouts]
        if f.name == "instructions":
            parts[f.name] = [text for v in values for text in v]
            continue
        if values[0] is None:  # an optional field no rollout of this env has
            parts[f.name] = None
            continue
        if f.name in _PAD or f.name == "step_mask":
            pad = False if f.name == "step_mask" else _PAD[f.name]
            values = [_pad_steps(v, steps, pad) for v in values]
        if isinstance(values[0], np.ndarray):
            parts[f.name] = np.concatenate(values, axis=0)
        else:
            parts[f.name] = torch.cat(values, dim=0)
    return Rollout(**parts)  # type: ignore[arg-type]


def optimizer_batches(order: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """Cut a shuffled order of trajectories into `steps` consecutive batches of (nearly) equal
    size, one optimizer step each; every batch holds at least one trajectory."""
    if steps < 1 or steps > len(order):
        raise ConfigError(
            f"invalid value for 'algorithm.optimizer_steps': {steps} must lie in "
            f"[1, {len(order)}] (the trajectories of one step on this rank)"
        )
    return [part for part in torch.tensor_split(order, steps)]
