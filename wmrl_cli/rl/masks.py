"""Loss masks: which steps of a rollout take part in the loss.

A rollout of T chunk steps keeps running (without auto-reset) after its episode ends, so the
steps after the first done carry no signal. As in RLinf's `compute_loss_mask`, a step is valid
while no done happened strictly before it: the step that ends the episode (success or
truncation) is itself valid, because its action caused the outcome.
"""

from __future__ import annotations

import torch


def done_flags(terminated: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """done = terminated OR truncated (success and the time limit both end an episode)."""
    return terminated.bool() | truncated.bool()


def chunk_dones(dones: torch.Tensor) -> torch.Tensor:
    """Per-action dones [B,T,C] -> per-chunk-step dones [B,T]: a chunk step is done if any of its
    C actions ended the episode."""
    return dones.bool().any(dim=-1)


def valid_step_mask(dones: torch.Tensor) -> torch.Tensor:
    """valid[b,t] = (number of dones in steps 0..t-1 of trajectory b) == 0.

    dones: [B,T] bool or {0,1}. Returns a bool [B,T] that is True up to and including the first
    done and False after it; a trajectory without any done is valid everywhere. Later dones
    (an env that reports done again) change nothing.
    """
    d = dones.to(torch.int64)
    dones_before = torch.cumsum(d, dim=1) - d
    return dones_before == 0


def token_mask(step_mask: torch.Tensor, chunk_size: int, action_dim: int) -> torch.Tensor:
    """Chunk-level mask [B,T] -> token-level mask [B,T,C,A] (every action token of a valid chunk
    step is valid)."""
    b, t = step_mask.shape
    return step_mask[:, :, None, None].expand(b, t, chunk_size, action_dim)


def valid_lengths(step_mask: torch.Tensor) -> torch.Tensor:
    """T_i^valid: the number of valid steps of each trajectory, [B,T] -> [B] (int64)."""
    return step_mask.to(torch.int64).sum(dim=1)
