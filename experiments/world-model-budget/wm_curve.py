"""A world model's learning curve from its validation: train-wm's open-loop evaluation on the
held-out episodes (`world_model.val_every`, `val_episodes`, `val_horizon`), read from each run's
metrics.jsonl, as a table and a plot, so that the question "is it still improving at the end of
its budget?" is answered from the run itself:

    python experiments/world-model-budget/wm_curve.py NAME=RUN [NAME=RUN ...] \
        [--metric action_gap@32 ...] [--out DIR]

RUN: a train-wm run folder, or a co-evolve run's world model (`RUN/wm_base`). Each metric is
`eval/wm/<metric>` (docs/formats.md): PSNR with the recorded actions, the action gap (PSNR with
the recorded actions minus with another episode's) and the response ratio, at a horizon step.
Writes DIR/curve.md and DIR/curve.png, and prints the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl_cli.files import atomic_write_text
from wmrl_cli.logging import read_metric_rows

PREFIX = "eval/wm/"
METRICS = ("psnr@8", "psnr@32", "moving_psnr@32", "action_gap@8", "action_gap@32")


def curve(run: Path, metrics: tuple[str, ...]) -> list[dict[str, float]]:
    """The validation rows of one run: the step and each metric it logged, in step order (a
    resumed run's repeated step: its last row)."""
    rows = {}
    for row in read_metric_rows(run):
        if any(key.startswith(PREFIX) for key in row):
            values = {m: row[PREFIX + m] for m in metrics if PREFIX + m in row}
            rows[int(row["step"])] = {"step": int(row["step"]), **values}
    return [rows[step] for step in sorted(rows)]


def table(curves: dict[str, list[dict[str, float]]], metrics: tuple[str, ...]) -> str:
    lines = [
        "| run | step | " + " | ".join(metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for name, rows in curves.items():
        for row in rows:
            cells = [f"{row[m]:.2f}" if m in row else "-" for m in metrics]
            lines.append(f"| {name} | {row['step']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(curves: dict[str, list[dict[str, float]]], metrics: tuple[str, ...], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics), 3.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for name, rows in curves.items():
            points = [(r["step"], r[metric]) for r in rows if metric in r]
            if points:
                ax.plot(*zip(*points, strict=True), "o-", label=name)
        ax.set(title=metric, xlabel="denoiser step")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="NAME=RUN (a train-wm run folder)")
    parser.add_argument("--metric", action="append", help=f"default: {', '.join(METRICS)}")
    parser.add_argument("--out", type=Path, help="write curve.md and curve.png here")
    args = parser.parse_args(argv)
    metrics = tuple(args.metric or METRICS)
    curves = {}
    for spec in args.runs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            print(f"error: {spec!r}: expected NAME=RUN", file=sys.stderr)
            return 2
        rows = curve(Path(path), metrics)
        if not rows:
            print(f"error: {path}: no validation in its metrics.jsonl (a train-wm run with "
                  "world_model.val_episodes)", file=sys.stderr)  # fmt: skip
            return 2
        curves[name] = rows
    text = table(curves, metrics)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "curve.md", text)
        plot(curves, metrics, args.out / "curve.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
