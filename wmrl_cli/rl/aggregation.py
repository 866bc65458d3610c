"""How per-token losses become one scalar: token mean or trajectory-length normalization."""

from __future__ import annotations

from typing import Literal

import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.stats import expand_mask, masked_mean

Aggregation = Literal["token_mean", "trajectory_mean"]


def token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L = sum_{i,t,k} m_itk x_itk / sum_{i,t,k} m_itk: every valid token weighs the same, so
    long trajectories dominate (DAPO's token-level loss, arXiv:2503.14476 Sec. 3.3)."""
    return masked_mean(x, mask)


def trajectory_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Trajectory-length normalization, masked GRPO (WoVR eq. 11):

        L = 1/N sum_i [ 1/|valid_i| sum_{(t,k) valid in i} x_itk ]

    Each trajectory (dimension 0) is first averaged over its own valid tokens, then the
    trajectories are averaged, so an episode that succeeds early weighs as much as one that runs
    to the time limit. This equals RLinf's `masked_mean_ratio` with
    loss_mask_ratio = valid steps / max steps. N counts only trajectories with at least one
    valid token: a trajectory masked out entirely (e.g. its group was filtered) is dropped from
    the average rather than counted as a zero.
    """
    # [B, ...] -> [B, steps*tokens]; a 1-d x is one step per trajectory
    m = expand_mask(mask, x).reshape(x.shape[0], -1)
    flat = x.reshape(x.shape[0], -1)
    counts = m.sum(dim=1)
    per_traj = (flat * m).sum(dim=1) / counts.clamp(min=1.0)
    present = (counts > 0).to(x.dtype)
    return (per_traj * present).sum() / present.sum().clamp(min=1.0)


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: Aggregation) -> torch.Tensor:
    """Dispatch to `token_mean` or `trajectory_mean`."""
    if mode == "token_mean":
        return token_mean(x, mask)
    if mode == "trajectory_mean":
        return trajectory_mean(x, mask)
    raise ConfigError(f"unknown loss aggregation {mode!r}; use 'token_mean' or 'trajectory_mean'")
