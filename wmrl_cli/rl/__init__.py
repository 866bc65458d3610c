"""RL math as small pure functions (CleanRL style): advantages, masks, losses, grouping."""

from wmrl_cli.rl.advantages import (
    broadcast_advantages,
    gae,
    grpo_advantages,
    grpo_step_advantages,
    normalize_advantages,
    trajectory_returns,
)
from wmrl_cli.rl.aggregation import (
    LossAggregation,
    aggregate,
    loss_scale,
    masked_mean_ratio,
    token_mean,
    trajectory_mean,
)
from wmrl_cli.rl.grouping import (
    DynamicSample,
    band_filter,
    concat_groups,
    dynamic_sample,
    expand_group_mask,
    split_groups,
    varied_outcome_groups,
)
from wmrl_cli.rl.losses import entropy_loss, huber, kl_k3, kl_loss, policy_loss, value_loss
from wmrl_cli.rl.masks import chunk_dones, done_flags, token_mask, valid_lengths, valid_step_mask
from wmrl_cli.rl.reductions import explained_variance, masked_mean, masked_stats, masked_sum

__all__ = [
    "DynamicSample",
    "LossAggregation",
    "aggregate",
    "band_filter",
    "broadcast_advantages",
    "chunk_dones",
    "concat_groups",
    "done_flags",
    "dynamic_sample",
    "entropy_loss",
    "expand_group_mask",
    "explained_variance",
    "gae",
    "grpo_advantages",
    "grpo_step_advantages",
    "huber",
    "kl_k3",
    "kl_loss",
    "loss_scale",
    "masked_mean",
    "masked_mean_ratio",
    "masked_stats",
    "masked_sum",
    "normalize_advantages",
    "policy_loss",
    "split_groups",
    "token_mask",
    "token_mean",
    "trajectory_mean",
    "trajectory_returns",
    "valid_lengths",
    "valid_step_mask",
    "value_loss",
    "varied_outcome_groups",
]
