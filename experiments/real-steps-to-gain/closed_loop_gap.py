"""Does the policy act in the world model as it acts in the world, task by task?

    python experiments/real-steps-to-gain/closed_loop_gap.py --store RUN/data/labelled_base \\
        --real EVAL_DIR[,EVAL_DIR...] --out DIR

A policy acting in the world model sees imagined frames, so its actions can differ from those it
takes on real frames from the same start. Replayed in the simulator, those actions succeed or
not: that is the real success RL in imagination can pay at best, whatever its verdict (the
exact verdict included). This script sets it beside the same policy's success acting on real
frames, start by start, per task.

`--store`: imagined episodes of the policy labelled by replay (co-evolve's `labelled_base` stage,
`jobs/imagine_policy.py`: RL's starts, each episode's `seed` the start's). `--real`: `wmrl eval`
reports of the same policy from the same starts, matched by the start's seed (for a co-evolve
run of seed S, `wmrl eval --seed 1000000+S -n 10` runs the 10 demonstration starts per task,
`sft.demo_seed_offset`, and `--seed 2000000+S -n 5` the 5 base-rollout starts). A start
imagined several times is paired with its one real episode each time. Per task and overall:
both success rates, their paired difference with a percentile-bootstrap interval over episodes,
and how many real successes the imagined loop kept. Writes DIR/closed_loop_gap.json, .md and .png.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.intervals import paired_difference
from wmrl_cli.files import atomic_write_text


def real_outcomes(reports: list[Path]) -> dict[tuple[str, int], bool]:
    """(task, start seed) -> success, from `wmrl eval` reports (a dir or its report.json)."""
    out: dict[tuple[str, int], bool] = {}
    for path in reports:
        report = path / "report.json" if path.is_dir() else path
        try:
            for episode in json.loads(report.read_text())["episodes"]:
                out[(episode["task"], int(episode["seed"]))] = bool(episode["success"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise WmrlError(f"--real {path}: not an evaluation report ({exc})") from None
    return out


def imagined_outcomes(store: Path) -> list[tuple[str, int, bool]]:
    """(task, start seed, real success of the imagined actions) per episode of a labelled store."""
    try:
        episodes = json.loads((store / "index.json").read_text())["episodes"]
    except (OSError, ValueError, KeyError) as exc:
        raise WmrlError(f"--store {store}: not an episode store ({exc})") from None
    try:
        return [(e["task_name"], int(e["seed"]), bool(e["success"])) for e in episodes]
    except (KeyError, TypeError, ValueError) as exc:
        message = f"--store {store}: an episode without task, seed or success ({exc})"
        raise WmrlError(message) from None


def closed_loop_gap(
    imagined: list[tuple[str, int, bool]], real: dict[tuple[str, int], bool], resamples: int
) -> dict:
    """Per task (in the store's order) and overall: the paired outcomes' rates, the difference
    imagined - real with its interval, and the real successes the imagined loop kept."""
    if not imagined:
        raise WmrlError("the store holds no episode")
    pairs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    missing = sorted({(t, s) for t, s, _ in imagined if (t, s) not in real})
    if missing:
        task, seed = missing[0]
        raise WmrlError(
            f"{len(missing)} imagined start(s) have no real episode, e.g. {task} seed {seed}: "
            "evaluate the policy from the store's starts (--seed as the docstring says)"
        )
    for task, seed, success in imagined:
        pairs[task].append((float(real[(task, seed)]), float(success)))
    pairs["all"] = [p for task in list(pairs) for p in pairs[task]]
    rows = {}
    for task, outcomes in pairs.items():
        on_real, on_imagined = (list(x) for x in zip(*outcomes, strict=True))
        d = paired_difference(on_real, on_imagined, resamples=resamples)
        kept = sum(1 for r, i in outcomes if r and i)
        rows[task] = {
            "episodes": len(outcomes),
            "real_frames": float(np.mean(on_real)),
            "imagined_frames": float(np.mean(on_imagined)),
            "difference": d.difference,
            "low": d.low,
            "high": d.high,
            "real_successes": int(sum(on_real)),
            "kept": kept,
        }
    return rows


def markdown(rows: dict) -> str:
    lines = [
        "| task | episodes | acting on real frames | acting in the world model (replayed) | "
        "difference (95% CI) | real successes kept |",
        "|---|---|---|---|---|---|",
    ]
    for task, r in rows.items():
        lines.append(
            f"| {task} | {r['episodes']} | {100 * r['real_frames']:.0f}% | "
            f"{100 * r['imagined_frames']:.0f}% | {100 * r['difference']:+.1f} "
            f"[{100 * r['low']:+.1f}, {100 * r['high']:+.1f}] | "
            f"{r['kept']} of {r['real_successes']} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t, r in rows.items() if t != "all" and r["real_frames"] + r["imagined_frames"]]
    x = np.arange(len(tasks))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    real = [100 * rows[t]["real_frames"] for t in tasks]
    imagined = [100 * rows[t]["imagined_frames"] for t in tasks]
    ax.bar(x - 0.2, real, 0.4, label="acting on real frames")
    ax.bar(x + 0.2, imagined, 0.4, label="acting in the world model (replayed)")
    ax.set_xticks(x, tasks, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("real success (%)")
    ax.set_title("The same policy from the same starts (tasks where either succeeds)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a labelled imagined store")
    parser.add_argument("--real", required=True, help="eval dirs from the same starts: A[,B]")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args(argv)
    try:
        real = real_outcomes([Path(p) for p in args.real.split(",")])
        rows = closed_loop_gap(imagined_outcomes(args.store), real, args.resamples)
    except WmrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "closed_loop_gap.json", json.dumps(rows, indent=2) + "\n")
    atomic_write_text(args.out / "closed_loop_gap.md", markdown(rows))
    plot(rows, args.out / "closed_loop_gap.png")
    print(markdown(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
