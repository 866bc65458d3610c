"""Advantage estimators: GAE for PPO, group-relative advantages for GRPO.

Shapes follow the rollout buffer: B trajectories (environments) by T chunk steps. dones[b,t]
means the episode ended with the action of step t (success or truncation).
"""

from __future__ import annotations

import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.masks import valid_step_mask
from wmrl_cli.rl.reductions import append_dims


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438, eq. 16).

        delta_t = r_t + gamma * (1 - d_t) * V_{t+1} - V_t,     V_T = next_value
        A_t     = delta_t + gamma * lam * (1 - d_t) * A_{t+1},  A_T = 0
        R_t     = A_t + V_t                                     (the critic's target)

    rewards, values, dones: [B,T]; next_value: [B], the critic's value of the state after the
    last step (the bootstrap). A done stops both the bootstrap and the advantage recursion.
    Returns (advantages, returns), both [B,T], without normalization.
    """
    rewards = rewards.float()
    values = values.float()
    not_done = 1.0 - dones.float()
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(next_value, dtype=rewards.dtype)
    value_next = next_value.float()
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * not_done[:, t] * value_next - values[:, t]
        running = delta + gamma * lam * not_done[:, t] * running
        advantages[:, t] = running
        value_next = values[:, t]
    return advantages, advantages + values


def normalize_advantages(
    advantages: torch.Tensor, mask: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """A' = (A - mean) / (std + eps), mean and std over the valid entries (std Bessel-corrected,
    torch's default), applied to every entry; unchanged when no entry is valid. RLinf normalizes
    its GAE advantages so by default (`compute_gae_advantages_and_returns`, `safe_normalize`).

    advantages: [B,T]; mask: [B,T] (bool or {0,1}).
    """
    valid = advantages[mask.bool()]
    if valid.numel() == 0:
        return advantages
    std = valid.std() if valid.numel() > 1 else torch.zeros((), dtype=valid.dtype)
    return (advantages - valid.mean()) / (std + eps)


def trajectory_returns(rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
    """R_i = sum of the rewards of trajectory i up to and including its first done.

    rewards: [B,T] or [B,T,C] (per-action rewards of each chunk step, summed); dones: [B,T].
    Returns [B]. Matches RLinf's `calculate_scores` (rewards after the first done are ignored).
    """
    valid = valid_step_mask(dones).to(rewards.dtype)
    per_step = rewards.reshape(rewards.shape[0], rewards.shape[1], -1).sum(dim=-1)
    return (per_step * valid).sum(dim=1)


def grpo_advantages(
    returns: torch.Tensor,
    group_size: int,
    eps: float = 1e-6,
    normalize_std: bool = True,
) -> torch.Tensor:
    """Group-relative advantages (GRPO, Shao et al. 2024, arXiv:2402.03300, Sec. 4.1.2).

    Trajectories [g*G, (g+1)*G) share one initial state (the reset sampler repeats each state
    G times, consecutively). For trajectory i of group g:

        A_i = (R_i - mean_g(R)) / (std_g(R) + eps)    (normalize_std=True, RLinf)
        A_i =  R_i - mean_g(R)                        (normalize_std=False, WoVR's formula)

    std_g is the *sample* standard deviation (Bessel-corrected, divisor G - 1), as RLinf's
    `compute_grpo_advantages` computes it with torch's default `Tensor.std`. A group whose
    returns are all equal gets std 0 and therefore A = 0 for all its members.

    returns: [B] with B a multiple of group_size. Returns [B].
    """
    if group_size < 1 or returns.shape[0] % group_size != 0:
        raise ConfigError(
            f"group_size {group_size} must be >= 1 and divide the number of trajectories "
            f"{returns.shape[0]}"
        )
    if normalize_std and group_size < 2:
        raise ConfigError("GRPO with std normalization needs group_size >= 2")
    grouped = returns.float().reshape(-1, group_size)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_std:
        centered = centered / (grouped.std(dim=1, keepdim=True, correction=1) + eps)
    return centered.reshape(-1)


def broadcast_advantages(advantages: torch.Tensor, step_mask: torch.Tensor) -> torch.Tensor:
    """Per-trajectory advantages [B] -> per-step advantages [B,T]: A_i on every valid step of
    trajectory i, 0 on masked steps."""
    return append_dims(advantages, step_mask.dim()) * step_mask.to(advantages.dtype)


def grpo_step_advantages(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    group_size: int,
    eps: float = 1e-6,
    normalize_std: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole GRPO advantage pipeline: trajectory returns -> group advantages -> broadcast to
    the valid steps.

    rewards: [B,T] or [B,T,C]; dones: [B,T]. Returns (step advantages [B,T], returns [B]).
    """
    returns = trajectory_returns(rewards, dones)
    adv = grpo_advantages(returns, group_size, eps=eps, normalize_std=normalize_std)
    return broadcast_advantages(adv, valid_step_mask(dones)), returns
