"""Group filtering and dynamic sampling for GRPO.

A group is G consecutive trajectories started from the same initial state. A group whose
members all share one outcome has zero advantage everywhere and only dilutes the batch, so
RLinf masks groups whose mean return leaves [rewards_lower_bound, rewards_upper_bound] and WMPO
drops groups whose success rate leaves [0.1, 0.9], resampling until the batch is full
("dynamic sampling", DAPO, arXiv:2503.14476 Sec. 3.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from wmrl_cli.errors import ConfigError

G = TypeVar("G")


def group_view(values: torch.Tensor, group_size: int) -> torch.Tensor:
    """[B, ...] -> [B / G, G, ...] (trajectory i belongs to group i // G)."""
    if group_size < 1 or values.shape[0] % group_size != 0:
        raise ConfigError(
            f"group_size {group_size} must be >= 1 and divide the number of trajectories "
            f"{values.shape[0]}"
        )
    return values.reshape(values.shape[0] // group_size, group_size, *values.shape[1:])


def varied_outcome_groups(outcomes: torch.Tensor, group_size: int) -> torch.Tensor:
    """keep[g] = not all outcomes of group g are equal.

    outcomes: [B] (success flags or returns). Returns bool [B / G]. Groups that all succeed
    or all fail are dropped.
    """
    grouped = group_view(outcomes, group_size)
    return (grouped != grouped[:, :1]).any(dim=1)


def band_filter(values: torch.Tensor, group_size: int, low: float, high: float) -> torch.Tensor:
    """keep[g] = low <= mean_{i in g} values_i <= high (inclusive, as RLinf's filter).

    values: [B]. With success flags this is WMPO's accuracy band ([0.1, 0.9]); with returns it
    is RLinf's reward band ([0.5, 4.5] at reward_coef 5). Returns bool [B / G].
    """
    if low > high:
        raise ConfigError(f"filter band is empty: low {low} > high {high}")
    means = group_view(values.float(), group_size).mean(dim=1)
    return (means >= low) & (means <= high)


def expand_group_mask(keep: torch.Tensor, group_size: int) -> torch.Tensor:
    """Per-group mask [B / G] -> per-trajectory mask [B] (each group flag repeated G times)."""
    return keep.repeat_interleave(group_size)


@dataclass
class DynamicSample(Generic[G]):
    """What `dynamic_sample` gathered: the kept groups (at most `target`), the number of calls
    made to the sampler, and whether the target was reached."""

    groups: list[G]
    tries: int
    enough: bool


def dynamic_sample(
    sample_groups: Callable[[], Sequence[G]],
    keep: Callable[[G], bool],
    target: int,
    max_tries: int,
) -> DynamicSample[G]:
    """Call `sample_groups` (one rollout of a batch of groups) until `target` groups that pass
    `keep` are gathered or `max_tries` calls were made, whichever comes first.

    Kept groups are accumulated in sampling order and the surplus of the last call is dropped,
    so the batch size is stable (DAPO). When the cap is hit the groups gathered so far are
    returned with enough=False; the caller decides whether to train on a short batch.
    """
    if target < 1 or max_tries < 1:
        raise ConfigError(
            f"dynamic sampling needs target >= 1 and max_tries >= 1 (got {target}, {max_tries})"
        )
    kept: list[G] = []
    tries = 0
    while len(kept) < target and tries < max_tries:
        tries += 1
        kept.extend(group for group in sample_groups() if keep(group))
    return DynamicSample(groups=kept[:target], tries=tries, enough=len(kept) >= target)


def split_groups(batch: dict[str, torch.Tensor], group_size: int) -> list[dict[str, torch.Tensor]]:
    """A rollout batch (every tensor with leading dimension B) -> B / G per-group batches."""
    sizes = {v.shape[0] for v in batch.values()}
    if len(sizes) != 1:
        raise ValueError(f"batch tensors disagree on the leading dimension: {sorted(sizes)}")
    (b,) = sizes
    group_view(torch.empty(b), group_size)  # validates divisibility
    return [
        {k: v[g * group_size : (g + 1) * group_size] for k, v in batch.items()}
        for g in range(b // group_size)
    ]


def concat_groups(groups: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per-group batches -> one batch (inverse of `split_groups`)."""
    if not groups:
        raise ValueError("no groups to concatenate")
    return {k: torch.cat([g[k] for g in groups], dim=0) for k in groups[0]}
