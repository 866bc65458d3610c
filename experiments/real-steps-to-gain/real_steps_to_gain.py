"""Real steps to gain: the arms of an RL comparison on one axis, real success against the real
environment steps each spent (docs/results.md#real-steps-to-gain).

Each arm is one or more runs (seeds) of `wmrl train-policy` (or co-evolve's RL stage folders)
trained with `algorithm.eval_every` and `algorithm.eval_trials`, each paired episode by episode
with its base policy's held-out evaluation (`wmrl eval --out BASE`): one `--base` for RL seeds
from one base; or one per seed, comma-separated in the arms' order, for seeds of a whole
co-evolve pipeline (each its own SFT policy, world model and judge).
A run's `env/real_steps` counts its own real steps (the simulator's; verified imagination's
replays); `--offset NAME=STEPS` adds what an arm spent before its runs (the world and reward
models' data, for imagination outside co-evolve, whose stages start from it already).

    python experiments/real-steps-to-gain/real_steps_to_gain.py --base runs/eval-base \\
        --arm simulator=runs/sim-s0,runs/sim-s1,runs/sim-s2 \\
        --arm verified=runs/co-evolve-long-s0/stage1,runs/co-evolve-long-s1/stage1 \\
        --offset verified=0 --out runs/real-steps-to-gain
    python experiments/real-steps-to-gain/real_steps_to_gain.py \\
        --base runs/ce-s1/eval/base,runs/ce-s2/eval/base \\
        --arm continue=runs/ce-s1/stage1,runs/ce-s2/stage1 \\
        --arm simulator=runs/ce-s1/simulator_control,runs/ce-s2/simulator_control --out runs/seeds

writes OUT/curves.json, OUT/curves.md (one row per arm and evaluated step: real steps, real
success, the paired difference from the base with its 95% interval, seeds),
OUT/real_steps_to_gain.png (log x axis) and, where a run verified its judge's calls,
OUT/verification.md (per RL step: calls, the fraction confirmed, the replays' real steps).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.real_steps import (
    curve_table,
    mean_over_seeds,
    plot_real_steps,
    verification_table,
)
from wmrl_cli.files import atomic_write_text


def _named(values: list[str], flag: str) -> dict[str, str]:
    out = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name or not rest:
            raise SystemExit(f"error: {flag} {value}: expected NAME=VALUE")
        out[name] = rest
    return out


def _base_report(path: Path) -> dict:
    report = path / "report.json" if path.is_dir() else path
    try:
        return json.loads(report.read_text())
    except (OSError, ValueError) as exc:
        raise WmrlError(f"--base {path}: not an evaluation report ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base", required=True, help="the base policy's eval dir, or one per seed: B0,B1,..."
    )
    parser.add_argument("--arm", action="append", required=True, help="NAME=RUN[,RUN...]")
    parser.add_argument("--offset", action="append", default=[], help="NAME=REAL_STEPS")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args(argv)
    try:
        bases = [_base_report(Path(path)) for path in args.base.split(",")]
        offsets = {k: float(v) for k, v in _named(args.offset, "--offset").items()}
        arm_runs = {name: runs.split(",") for name, runs in _named(args.arm, "--arm").items()}
        for name, runs in arm_runs.items():
            if len(bases) > 1 and len(runs) != len(bases):
                raise WmrlError(
                    f"--arm {name}: {len(runs)} run(s) for {len(bases)} --base evaluations "
                    "(one base for all, or one per seed)"
                )
        base = bases[0] if len(bases) == 1 else bases
        arms = {
            name: mean_over_seeds(
                [(run, offsets.get(name, 0.0)) for run in runs], base, args.resamples
            )
            for name, runs in arm_runs.items()
        }
        args.out.mkdir(parents=True, exist_ok=True)
        body = {name: [p.to_dict() for p in points] for name, points in arms.items()}
        atomic_write_text(args.out / "curves.json", json.dumps(body, indent=1))
        atomic_write_text(args.out / "curves.md", curve_table(arms))
        base_rate = sum(b["overall"] for b in bases) / len(bases)
        plot_real_steps(arms, args.out / "real_steps_to_gain.png", base_rate)
        named_runs = {
            f"{name} {i}": Path(run)
            for name, runs in arm_runs.items()
            for i, run in enumerate(runs)
        }
        verification = verification_table(named_runs)
        if verification is not None:
            atomic_write_text(args.out / "verification.md", verification)
    except WmrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(curve_table(arms), end="")
    if verification is not None:
        print("\n" + verification, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
