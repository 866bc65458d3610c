"""Uncertainty of success rates: Wilson score intervals for one rate, a paired bootstrap for the
difference of two policies evaluated on the same episodes (same init ids, so the start states
are shared and only the policies differ)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


def format_rate(value: float | None, interval: Sequence[float] | None = None) -> str:
    """A rate to two decimals with its interval, "-" where there is none (tables)."""
    if value is None:
        return "-"
    return f"{value:.2f}" + ("" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]")


def format_difference(d: dict) -> str:
    """A paired difference (`PairedDifference.to_dict()`) in percentage points with its interval,
    as reports show it: "+4.0 [-0.5, +8.5]"."""
    return f"{100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate (95% for z = 1.96), as fractions in [0, 1].
    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n
    successes. (0, 1) for no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class PairedDifference:
    """B minus A on the episodes both evaluated: the rates, the difference and its bootstrap
    interval (fractions)."""

    episodes: int
    rate_a: float
    rate_b: float
    difference: float
    low: float
    high: float
    resamples: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def paired_difference(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedDifference:
    """Percentile bootstrap of mean(b) - mean(a) over paired episodes (their outcomes, or any
    per-episode value such as an error in pixels): each resample draws
    episodes with replacement and keeps both outcomes of an episode together, so the shared
    difficulty of a start state cancels out of the interval."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"need two equally long, non-empty outcome lists (got {x.size}, {y.size})")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    diffs = (y[idx] - x[idx]).mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return PairedDifference(
        episodes=int(x.size),
        rate_a=float(x.mean()),
        rate_b=float(y.mean()),
        difference=float(y.mean() - x.mean()),
        low=float(low),
        high=float(high),
        resamples=resamples,
    )


def pair_by_init_id(
    a: Sequence[tuple[int, bool]], b: Sequence[tuple[int, bool]]
) -> tuple[list[bool], list[bool]]:
    """The outcomes of the init ids both evaluations ran, in init-id order."""
    left, right = dict(a), dict(b)
    shared = sorted(set(left) & set(right))
    return [left[i] for i in shared], [right[i] for i in shared]
