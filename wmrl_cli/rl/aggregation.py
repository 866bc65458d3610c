"""How per-token losses become one scalar, and how minibatches add up to it.

Three rules (x: per-token values [B, ...], m: the loss mask, B trajectories):

    token_mean          sum m x / sum m                                    (DAPO)
    trajectory_mean     1/N sum_i mean_{valid of i} x                      (WoVR eq. 11)
    masked_mean_ratio   s * 1/B sum_i mean_{valid of i} x,  s = M / R      (RLinf's embodied actor)

N counts the trajectories with at least one valid token, or all B when `count_masked` is set
(trajectories masked out entirely, e.g. by the group filter, then count as zeros). RLinf's
`masked_mean_ratio` always counts them, and carries the scale s = max_episode_steps / rollout
length (env steps a rollout epoch runs): 1 when the rollout is exactly one episode long.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.reductions import expand_mask, masked_mean

Aggregation = Literal["token_mean", "trajectory_mean", "masked_mean_ratio"]
AGGREGATIONS: tuple[str, ...] = ("token_mean", "trajectory_mean", "masked_mean_ratio")


def token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L = sum_{i,t,k} m_itk x_itk / sum_{i,t,k} m_itk: every valid token weighs the same, so
    long trajectories dominate (DAPO's token-level loss, arXiv:2503.14476 Sec. 3.3)."""
    return masked_mean(x, mask)


def _per_trajectory(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean of each trajectory over its valid tokens [B], number of valid tokens [B])."""
    # [B, ...] -> [B, steps*tokens]; a 1-d x is one step per trajectory
    m = expand_mask(mask, x).reshape(x.shape[0], -1)
    counts = m.sum(dim=1)
    per_traj = (x.reshape(x.shape[0], -1) * m).sum(dim=1) / counts.clamp(min=1.0)
    return per_traj, counts


def trajectory_mean(
    x: torch.Tensor, mask: torch.Tensor, count_masked: bool = False
) -> torch.Tensor:
    """Trajectory-length normalization, masked GRPO (WoVR eq. 11):

        L = 1/N sum_i [ 1/|valid_i| sum_{(t,k) valid in i} x_itk ]

    Each trajectory (dimension 0) is first averaged over its own valid tokens, then the
    trajectories are averaged, so an episode that succeeds early weighs as much as one that runs
    to the time limit. N counts only trajectories with at least one valid token (a trajectory
    masked out entirely, e.g. its group was filtered, is dropped from the average), or every
    trajectory when `count_masked` (it then counts as a zero, as in RLinf).
    """
    per_traj, counts = _per_trajectory(x, mask)
    present = (counts > 0).to(x.dtype)
    n = torch.tensor(float(x.shape[0])) if count_masked else present.sum().clamp(min=1.0)
    return (per_traj * present).sum() / n


def masked_mean_ratio(x: torch.Tensor, mask: torch.Tensor, loss_scale: float = 1.0) -> torch.Tensor:
    """RLinf's embodied policy loss aggregation. RLinf writes it per token,

        L = mean over all B*R*K entries of  x_itk * m_itk / (T_i / M)

    with T_i the valid env steps of trajectory i (counted before the group filter), M
    max_episode_steps, R the rollout length in env steps and K tokens per env step. Trajectory i
    contributes T_i*K valid entries of mean x_i, each weighted M / T_i, so

        L = (M / R) * 1/B sum_i mean_{valid of i} x

    which is `trajectory_mean(count_masked=True)` times loss_scale = M / R.
    """
    return loss_scale * trajectory_mean(x, mask, count_masked=True)


def loss_scale(max_episode_steps: int, chunk_size: int) -> float:
    """M / R for a rollout of ceil(M / C) chunk steps of C actions: RLinf's masked_mean_ratio
    divides by every entry of the rollout, valid or not, and weighs a step by M / T_i."""
    chunks = -(-max_episode_steps // chunk_size)
    return max_episode_steps / (chunks * chunk_size)


def aggregate(
    x: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation,
    count_masked: bool = False,
    scale: float = 1.0,
) -> torch.Tensor:
    """Dispatch to `token_mean`, `trajectory_mean` or `masked_mean_ratio` (which always counts
    masked trajectories and multiplies by `scale`)."""
    if mode == "token_mean":
        return token_mean(x, mask)
    if mode == "trajectory_mean":
        return trajectory_mean(x, mask, count_masked)
    if mode == "masked_mean_ratio":
        return masked_mean_ratio(x, mask, scale)
    raise ConfigError(f"unknown loss aggregation {mode!r}; use one of {', '.join(AGGREGATIONS)}")


def minibatch_share(
    mb_mask: torch.Tensor, batch_mask: torch.Tensor, mode: Aggregation, count_masked: bool = False
) -> float:
    """The weight of a minibatch's aggregate in the aggregate of the whole batch it was cut
    from (trajectories along dimension 0), so that sum_mb share_mb * aggregate(mb) equals
    aggregate(batch) exactly:

        token_mean                          valid tokens of mb / valid tokens of the batch
        trajectory_mean                     trajectories with a valid step, mb / batch
        trajectory_mean (count_masked),
        masked_mean_ratio                   trajectories, mb / batch

    A share of 0 (nothing valid in the minibatch or the batch) leaves a zero-weight backward.
    """

    def units(mask: torch.Tensor) -> float:
        if mode == "token_mean":
            return float(mask.float().sum())
        if mode == "trajectory_mean" and not count_masked:
            return float((mask.reshape(mask.shape[0], -1) != 0).any(dim=1).sum())
        return float(mask.shape[0])

    total = units(batch_mask)
    return units(mb_mask) / total if total > 0 else 0.0


@dataclass(frozen=True)
class LossAggregation:
    """One aggregation rule with its settings, callable as `rule(x, mask)`."""

    mode: Aggregation = "token_mean"
    count_masked: bool = False
    scale: float = 1.0

    def __call__(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return aggregate(x, mask, self.mode, self.count_masked, self.scale)

    def share(self, mb_mask: torch.Tensor, batch_mask: torch.Tensor) -> float:
        return minibatch_share(mb_mask, batch_mask, self.mode, self.count_masked)


def as_rule(aggregation: Aggregation | LossAggregation) -> LossAggregation:
    """A mode name or a rule -> a rule (a bare name keeps the defaults)."""
    if isinstance(aggregation, LossAggregation):
        return aggregation
    return LossAggregation(aggregation)
