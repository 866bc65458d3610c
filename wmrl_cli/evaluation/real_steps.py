"""Real steps to gain: an RL run's real success at its evaluation steps against the real
environment steps it had spent by then.

What a world model is for is the same gain for fewer real interactions, so every arm (RL in
the simulator, in imagination with the learned, verified or exact verdict) is read on one axis:
cumulative real steps, counting everything the arm spends (the simulator's own steps; for
imagination the world and reward models' data plus the verdict's replays, which a run's
`env/real_steps` starts from and adds to), evaluation episodes apart. Each point is the run's
real success on the held-out evaluation episodes at that RL step (`RUN/eval/step_N.json`,
written with `algorithm.eval_every`), paired by episode with the base policy's evaluation.

    curve = learning_curve(run_dir, base_report)          # one seed
    arm = mean_over_seeds([(run_s0, 0), (run_s1, 0)], base_report)  # the arm's mean over seeds
    arm = mean_over_seeds([(run_s0, 0), (run_s1, 0)], [base_s0, base_s1])  # a base per seed
    plot_real_steps({"simulator": arm_sim, "verified": arm_ver}, "gain.png", base_rate)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_bytes
from wmrl_cli.logging import read_metric_rows


@dataclass(frozen=True)
class CurvePoint:
    """One evaluation of an arm: at RL `step`, after `real_steps` real environment steps, real
    success `success` and its paired difference from the base with a 95% bootstrap interval
    (fractions); `seeds` runs averaged."""

    step: int
    real_steps: float
    success: float
    difference: float
    low: float
    high: float
    seeds: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _outcomes(report: dict[str, Any]) -> dict[tuple[int, int], bool]:
    """An evaluation report's outcome per held-out episode, keyed by (init id, seed)."""
    return {(int(e["init_id"]), int(e["seed"])): bool(e["success"]) for e in report["episodes"]}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WmrlError(f"{path}: unreadable ({exc})") from None


def _real_steps_at(run_dir: Path) -> dict[int, float]:
    """`env/real_steps` at each logged step of a run (metrics.jsonl)."""
    return {
        int(row["step"]): float(row["env/real_steps"])
        for row in read_metric_rows(run_dir)
        if "env/real_steps" in row
    }


VERIFY_COLUMNS = ("verify/calls", "verify/call_rate", "verify/confirmed_fraction",
                  "verify/real_steps", "env/real_steps")  # fmt: skip


def verification_table(runs: dict[str, Path]) -> str | None:
    """Verified imagination's tally per RL step of each named run (calls, calls per episode,
    the fraction the simulator confirmed: the judge's precision under RL; the replays' real
    steps and the cumulative count), a markdown table; None where no run verified."""
    lines = []
    for name, run_dir in runs.items():
        for row in read_metric_rows(Path(run_dir)):
            if "verify/calls" in row:
                calls, rate, confirmed, replayed, total = (row.get(k) for k in VERIFY_COLUMNS)
                lines.append(
                    f"| {name} | {row['step']} | {calls:.0f} | {rate:.2f} | {confirmed:.2f} | "
                    f"{replayed:,.0f} | {total:,.0f} |"
                )
    if not lines:
        return None
    head = [
        "| run | RL step | calls | calls per episode | confirmed | replay steps | real steps |",
        "|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + lines) + "\n"


def paired_outcomes(base: dict[str, Any], report: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The base's and the run's outcomes on the episodes both evaluated, in one order."""
    before, after = _outcomes(base), _outcomes(report)
    shared = sorted(set(before) & set(after))
    if not shared:
        raise WmrlError("the evaluations share no held-out episode: evaluate on the same seeds")
    return (
        np.array([before[k] for k in shared], dtype=np.float64),
        np.array([after[k] for k in shared], dtype=np.float64),
    )


def learning_curve(
    run_dir: str | Path,
    base: dict[str, Any],
    offset_real_steps: float = 0.0,
    resamples: int = 10_000,
) -> list[CurvePoint]:
    """One run's evaluations (`eval/step_N.json`) against its real steps at each step, paired
    with the base evaluation `base`. `offset_real_steps`: real steps spent before the run that
    its `env/real_steps` does not hold (data collected apart for a train-policy run)."""
    return mean_over_seeds([(run_dir, offset_real_steps)], base, resamples)


def _point(
    step: int,
    real_steps: float,
    pairs: list[tuple[np.ndarray, np.ndarray]],
    resamples: int,
    seed: int = 0,
) -> CurvePoint:
    """The mean over seeds of the paired difference, its interval from a bootstrap that
    resamples episodes within each seed (a stratified percentile bootstrap)."""
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for a, b in pairs:
        idx = rng.integers(0, a.size, size=(resamples, a.size))
        means += (b[idx] - a[idx]).mean(axis=1)
    means /= len(pairs)
    low, high = np.percentile(means, [2.5, 97.5])
    return CurvePoint(
        step=step,
        real_steps=real_steps,
        success=float(np.mean([b.mean() for _, b in pairs])),
        difference=float(np.mean([b.mean() - a.mean() for a, b in pairs])),
        low=float(low),
        high=float(high),
        seeds=len(pairs),
    )


def mean_over_seeds(
    runs: list[tuple[str | Path, float]],
    base: dict[str, Any] | list[dict[str, Any]],
    resamples: int = 10_000,
) -> list[CurvePoint]:
    """An arm's curve over seeds: at each step every run evaluated, the mean real steps and
    success and the mean paired difference with its stratified interval. `runs`: (run
    directory, real steps spent before it) per seed. `base`: the base policy's evaluation, one
    for every run (RL seeds from one base), or one per run in the same order (seeds of a whole
    pipeline, each with its own base policy)."""
    bases = base if isinstance(base, list) else [base] * len(runs)
    if len(bases) != len(runs):
        raise WmrlError(f"{len(runs)} run(s) but {len(bases)} base evaluations: one per run")
    per_run = []
    for run_dir, offset in runs:
        run_dir = Path(run_dir)
        steps = _real_steps_at(run_dir)
        evals = {
            int(p.stem.removeprefix("step_")): p for p in (run_dir / "eval").glob("step_*.json")
        }
        per_run.append({s: (steps[s] + offset, evals[s]) for s in evals if s in steps})
    shared = sorted(set.intersection(*(set(r) for r in per_run))) if per_run else []
    if not shared:
        raise WmrlError(
            f"{', '.join(str(r) for r, _ in runs)}: no evaluation at a step all of them logged "
            "(train with algorithm.eval_every and algorithm.eval_trials)"
        )
    points = []
    for step in shared:
        pairs = [
            paired_outcomes(own, _read_json(run[step][1]))
            for own, run in zip(bases, per_run, strict=True)
        ]
        real = float(np.mean([run[step][0] for run in per_run]))
        points.append(_point(step, real, pairs, resamples))
    return points


def plot_real_steps(
    arms: dict[str, list[CurvePoint]], path: str | Path, base_rate: float | None = None
) -> Path:
    """Real success against cumulative real steps (log x), one line per arm, 95% intervals of
    the paired difference drawn around each point; the base policy's rate as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for name, points in arms.items():
        x = [max(p.real_steps, 1.0) for p in points]
        y = [100 * p.success for p in points]
        below = [100 * (p.difference - p.low) for p in points]
        above = [100 * (p.high - p.difference) for p in points]
        seeds = points[0].seeds if points else 1
        label = f"{name} ({seeds} seed{'s' if seeds > 1 else ''})"
        ax.errorbar(x, y, yerr=[below, above], marker="o", capsize=3, label=label)
        for xi, yi, p in zip(x, y, points):
            ax.annotate(str(p.step), (xi, yi), textcoords="offset points", xytext=(4, 4),
                        fontsize=6)  # fmt: skip
    if base_rate is not None:
        ax.axhline(100 * base_rate, color="grey", linestyle="--", linewidth=1, label="base policy")
    ax.set_xscale("log")
    ax.set_xlabel("real environment steps spent (log; evaluation apart)")
    ax.set_ylabel("real success_once (%)")
    ax.set_title("Real success against real steps (labels: RL step; bars: paired 95% CI)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    atomic_write_bytes(path, lambda handle: fig.savefig(handle, format="png"))
    plt.close(fig)
    return Path(path)


def curve_table(arms: dict[str, list[CurvePoint]]) -> str:
    """A markdown table of every arm's points."""
    lines = [
        "| arm | RL step | real steps | real success | against the base (95% CI) | seeds |",
        "|---|---|---|---|---|---|",
    ]
    for name, points in arms.items():
        lines += [
            f"| {name} | {p.step} | {p.real_steps:,.0f} | {100 * p.success:.1f}% | "
            f"{100 * p.difference:+.1f} [{100 * p.low:+.1f}, {100 * p.high:+.1f}] | {p.seeds} |"
            for p in points
        ]
    return "\n".join(lines) + "\n"
