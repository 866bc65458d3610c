"""Call timing on the judge benchmark: when a verdict misses a real success, did it call too
early or not at all; and what a verified verdict that lets a refuted call go on would recall,
at what cost in real steps against the exact verdict.

    python experiments/judge-benchmark/call_timing.py --set SET --judge NAME=RM[@THR|@task][:kK] \\
        [--judge ...] [--preset PRESET] [--only rl10,rl20] [--out T.json] [--markdown T.md] \\
        [--plot T.png]

Three verdicts, each on the same imagined episodes (the set's, labelled by replay):
- **ends** (verified imagination today, wmrl_cli/envs/verified.py): the first call is replayed in
  the simulator up to the end of its chunk; a refuted call ends the episode unpaid. A real
  success it misses was called *early* (refuted, the success still to come) or not at all.
- **goes on**: a refuted call does not end the episode; the next chunk the judge calls is
  replayed too, the simulator resumed where the last replay left it, and the first confirmed
  call pays. Its recall is the share of real successes the judge calls at or after the
  success; it spends at most the exact verdict's steps on any episode.
- **exact** (`reward_model.source=simulator`): the simulator steps beside every episode until
  its success (or the episode's end).
A replay stops at the simulator's first success. Real steps are per episode; `cost` is a
verdict's steps over the exact verdict's, on the same episodes (the replays' steps alone: the
method's data and the world model's are shared by all three). The thresholds are those of
judge_bench.py's verdicts (`@task`: fitted per task on the base policy's episodes, at the best
F1 of the ending rule); the RL policies' episodes are reported. `--plot` draws, per task with
enough real successes, recall against cost over a sweep of one threshold for the task, both
rules, each judge: where a verdict would meet the RL target of the issue (recall >= 0.7 at
half the exact verdict's steps).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from judge_bench import (
    BASE,
    PER_TASK,
    TARGET_MIN_SUCCESSES,
    TARGET_RECALL,
    Scored,
    chunk_end,
    episode_calls,
    task_thresholds_judged,
    verdicts,
)

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text

COST_TARGET = 0.5  # the RL target: at most half the exact verdict's real steps


@dataclass(frozen=True)
class Timed:
    """One episode under the three verdicts. `outcome`: the ending rule's, one of found (a
    true first call), early (a refuted first call on a real success), uncalled (a real success
    never called), false (a refuted call on a failure), quiet (a failure never called). `lead`:
    for an early call, the steps from the call to the first success."""

    task: str
    real: bool
    outcome: str
    found_on: bool
    lead: int | None
    steps_ends: int
    steps_on: int
    steps_exact: int


def call_chunk_ends(calls: np.ndarray, chunk: int) -> list[int]:
    """The ends (steps, 1-based) of the chunks holding a called frame, in order: frame t shows
    the state after step t, and a call is replayed to the end of its chunk."""
    return sorted({chunk_end(int(s), chunk, len(calls)) for s in np.flatnonzero(calls) + 1})


def time_episode(calls: np.ndarray, success: np.ndarray, chunk: int) -> tuple:
    """(outcome, found by going on, lead, steps ending, steps going on, steps exact) of one
    episode: `calls` [T] the verdict's per-frame calls on imagined frames 1..T, `success` [T]
    the simulator's flag after each step, `chunk` the actions per chunk."""
    length = len(success)
    first = int(np.argmax(success)) + 1 if success.any() else None
    exact = first or length

    def replay(end: int) -> int:  # the simulator stops at its success
        return min(end, first) if first is not None else end

    ends = call_chunk_ends(calls, chunk)
    if not ends:
        return ("uncalled" if first else "quiet"), False, None, 0, 0, exact
    confirmed = [e for e in ends if first is not None and first <= e]
    if first is None:
        outcome, lead = "false", None
    elif first <= ends[0]:
        outcome, lead = "found", None
    else:
        outcome, lead = "early", first - (int(np.argmax(calls)) + 1)
    steps_on = replay(confirmed[0]) if confirmed else ends[-1]
    return outcome, bool(confirmed), lead, replay(ends[0]), steps_on, exact


def timed(episodes: list[Scored], thresholds: dict[str, float], frames: int) -> list[Timed]:
    out = []
    for ep in episodes:
        calls = episode_calls(ep, thresholds[ep.task], frames)
        outcome, found_on, lead, ends, on, exact = time_episode(calls, ep.success, ep.chunk)
        out.append(Timed(ep.task, bool(ep.success.any()), outcome, found_on, lead, ends, on, exact))
    return out


def summarize(rows: list[Timed]) -> dict:
    """Counts, both rules' recall and their cost against the exact verdict."""
    real = sum(r.real for r in rows)
    count = {k: sum(r.outcome == k for r in rows) for k in ("found", "early", "uncalled")}
    found_on = sum(r.found_on and r.real for r in rows)
    exact = sum(r.steps_exact for r in rows)
    leads = [r.lead for r in rows if r.lead is not None]
    return {
        "episodes": len(rows),
        "real_successes": real,
        **count,
        "found_going_on": found_on,
        "recall_ends": count["found"] / real if real else None,
        "recall_goes_on": found_on / real if real else None,
        "early_lead_median": float(np.median(leads)) if leads else None,
        "steps_exact": exact,
        "cost_ends": sum(r.steps_ends for r in rows) / exact if exact else None,
        "cost_goes_on": sum(r.steps_on for r in rows) / exact if exact else None,
    }


def by_task(rows: list[Timed]) -> dict[str, dict]:
    tasks = sorted({r.task for r in rows})
    return {t: summarize([r for r in rows if r.task == t]) for t in tasks} | {
        "all": summarize(rows)
    }


def sweep(episodes: list[Scored], frames: int, grid: int = 40) -> dict[str, list]:
    """Recall and cost of both rules over thresholds at the quantiles of the episodes' scores."""
    values = np.concatenate([ep.scores for ep in episodes])
    points: dict[str, list] = {"threshold": [], "recall_ends": [], "cost_ends": []}
    points |= {"recall_goes_on": [], "cost_goes_on": []}
    for threshold in np.unique(np.quantile(values, np.linspace(0.0, 1.0, grid))):
        row = summarize(
            timed(episodes, dict.fromkeys({ep.task for ep in episodes}, threshold), frames)
        )
        points["threshold"].append(float(threshold))
        for key in ("recall_ends", "cost_ends", "recall_goes_on", "cost_goes_on"):
            points[key].append(row[key])
    return points


def _cell(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown(results: dict) -> str:
    lines = []
    for name, result in results.items():
        lines += [
            f"### {name}: threshold {result['threshold']}, {result['frames']} frame(s); "
            "the RL policies' episodes",
            "",
            "| task | real successes | found | early | uncalled | median lead of early calls | "
            "recall, ends | recall, goes on | cost, ends | cost, goes on |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for task, row in result["tasks"].items():
            lines.append(
                f"| {task} | {row['real_successes']} | {row['found']} | {row['early']} | "
                f"{row['uncalled']} | {_cell(row['early_lead_median'], 0)} | "
                f"{_cell(row['recall_ends'])} | {_cell(row['recall_goes_on'])} | "
                f"{_cell(row['cost_ends'])} | {_cell(row['cost_goes_on'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({t for r in results.values() for t in r["sweeps"]})
    if not tasks:
        raise WmrlError(f"no task with {TARGET_MIN_SUCCESSES} real successes to plot")
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        for i, (name, result) in enumerate(results.items()):
            points = result["sweeps"].get(task)
            if points is None:
                continue
            color = f"C{i}"
            ax.plot(points["cost_ends"], points["recall_ends"], "--", color=color, alpha=0.6)
            ax.plot(points["cost_goes_on"], points["recall_goes_on"], "-", color=color, label=name)
            row = result["tasks"][task]
            ax.plot(row["cost_goes_on"], row["recall_goes_on"], "o", color=color)
        ax.axhline(TARGET_RECALL, color="grey", lw=0.8)
        ax.axvline(COST_TARGET, color="grey", lw=0.8)
        ax.set(title=task, xlabel="real steps / exact verdict's", xlim=(0, 1.05), ylim=(0, 1.02))
    axes[0][0].set_ylabel("recall of real successes")
    axes[0][0].legend(fontsize=8, title="solid: goes on, dashed: ends", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    results = {}
    for name, directory, threshold, frames, own, episodes in verdicts(args):
        tasks = sorted({ep.task for ep in episodes})
        if threshold == PER_TASK:
            thresholds = task_thresholds_judged(episodes, frames, own)[1]
        else:
            thresholds = dict.fromkeys(tasks, own if threshold is None else threshold)
        rl = [ep for ep in episodes if ep.group != BASE]
        if args.only:
            rl = [ep for ep in rl if ep.label in args.only]
        eligible = [
            t for t in tasks if sum(ep.success.any() for ep in rl if ep.task == t)
            >= TARGET_MIN_SUCCESSES
        ]  # fmt: skip
        results[name] = {
            "model": str(directory),
            "threshold": "per task" if threshold == PER_TASK else f"{thresholds[tasks[0]]:.3g}",
            "task_thresholds": thresholds,
            "frames": frames,
            "tasks": by_task(timed(rl, thresholds, frames)),
            "sweeps": {t: sweep([ep for ep in rl if ep.task == t], frames) for t in eligible},
        }
        print(markdown({name: results[name]}), flush=True)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", required=True, help="a set judge_bench.py build made")
    parser.add_argument("--judge", action="append", required=True, help="NAME=RM[@THR|@task][:kK]")
    parser.add_argument("--preset", help="the run's preset or config.yaml (thresholds, frames)")
    parser.add_argument("--only", type=lambda s: set(s.split(",")), help="RL policies to report")
    parser.add_argument("--out", type=Path, help="the result as JSON")
    parser.add_argument("--markdown", type=Path, help="the tables as markdown")
    parser.add_argument("--plot", type=Path, help="recall against cost per task, as PNG")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        if not Path(args.set).is_dir():
            raise WmrlError(f"--set {args.set}: no such set (expected judge_bench.py build's)")
        results = run(args)
        if args.out:
            atomic_write_text(args.out, json.dumps(results, indent=1, default=float) + "\n")
        if args.markdown:
            atomic_write_text(args.markdown, markdown(results))
        if args.plot:
            plot(results, args.plot)
    except WmrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
