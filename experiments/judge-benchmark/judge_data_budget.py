"""How much data does the judge need when every call it makes is replayed? Judges trained on
nested fractions of a co-evolve run's judge data, scored on episodes none of them saw.

The long profile's method spends 57,600 of its 64,000 real steps beyond the base policy on the
judge's data: real rollouts collected for it (`reward_real`) and the base policy's imagined
episodes labelled by replay (`labelled_base`, also an hour of the world model on a CPU). Under the
verified verdict that goes on after a refuted call (`reward_model.refuted_calls=continue`)
every paid call is confirmed by the simulator, so precision is 1 whatever the judge; the judge
sets only what the replays find (recall) and what they cost. Hypothesis: a judge trained on a
small share of that data (or on none beyond the world model's own data, `base_merged`) recalls
nearly as much at nearly the same cost. This script refutes it or not, offline, in about half
an hour on 2 cores:

    python experiments/judge-benchmark/judge_data_budget.py --run RUN --out OUT \\
        [--test-per-task 10] [--seed 0] [--judge NAME=REAL,LABELLED ...] [--reference full]

1. Split: `--test-per-task` of each task's labelled episodes (seeded) are held out; the judges
   draw nested fractions (per task, seeded) of the rest and of the real rollouts; each subset is
   an episode store in OUT/data (files hard-linked), its real steps recorded in OUT/split.json.
2. Train: one `wmrl train-reward` per judge with the run's stage-1 configuration (its kind,
   steps, width; the threshold its own, set as the stage's was), on the world model's data plus
   its subsets; resumable (a finished judge is kept).
3. Score, on the held-out episodes, with judge_bench.py's and call_timing.py's rules: ranking
   AUC, the ending rule's precision and recall, and recall and real-steps cost (against the
   exact verdict) of going on; per task and overall, with percentile-bootstrap intervals over
   episodes, and each judge paired with `--reference` on the same episodes. OUT/budget.json,
   OUT/budget.md and OUT/budget.png (recall and cost against the judge's data).

The held-out episodes are the base policy's, as RL's first steps see; RL's later policies differ
(the judge benchmark's RL set). A judge's cost is its replays' alone: the data it was trained on
is its `judge data` column.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from call_timing import Timed, summarize, time_episode, timed
from judge_bench import Scored, episode_calls, judge_episode, ranking_auc, scored_episodes

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text

# name: (share of the real rollouts, share of the labelled episodes left after the held-out);
# in the order they are trained: the two ends first.
JUDGES = {
    "full": (1.0, 1.0),
    "none": (0.0, 0.0),
    "quarter": (0.25, 0.25),
    "labelled-only": (0.0, 1.0),
    "real-only": (1.0, 0.0),
    "half": (0.5, 0.5),
}
HELDOUT = "heldout"


# -- the split: pure functions ---------------------------------------------------------------------


def per_task_order(index: list[dict], seed: int) -> dict[str, list[int]]:
    """Each task's episode positions in `index`, in a seeded random order (one draw per task,
    so that a task's order does not depend on the others')."""
    tasks = sorted({m["task_name"] for m in index})
    order = {}
    for i, task in enumerate(tasks):
        ids = [k for k, m in enumerate(index) if m["task_name"] == task]
        order[task] = [ids[j] for j in np.random.default_rng([seed, i]).permutation(len(ids))]
    return order


def nested_share(order: dict[str, list[int]], share: float) -> list[int]:
    """The first `share` of each task's ordered episodes (rounded to the nearest), so that a
    smaller share is a subset of a larger one."""
    if not 0.0 <= share <= 1.0:
        raise WmrlError(f"a share of {share}: expected 0 to 1")
    return sorted(k for ids in order.values() for k in ids[: int(round(share * len(ids)))])


def parse_judge(spec: str) -> tuple[str, tuple[float, float]]:
    name, sep, shares = spec.partition("=")
    try:
        real, labelled = (float(x) for x in shares.split(","))
    except ValueError:
        real = labelled = -1.0
    if not sep or not name or not (0 <= real <= 1 and 0 <= labelled <= 1):
        raise WmrlError(f"bad --judge '{spec}': expected NAME=REAL,LABELLED (shares, 0 to 1)")
    return name, (real, labelled)


def write_subset(source: Path, positions: list[int], out: Path) -> int:
    """An episode store at `out` holding the episodes at `positions` of `source` (files
    hard-linked, else copied; ids renumbered); returns their real steps (lengths). Written whole
    or not at all."""
    index = json.loads((source / "index.json").read_text())
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "episodes").mkdir(parents=True)
    entries = []
    for new, k in enumerate(positions):
        meta = dict(index["episodes"][k])
        name = f"episodes/ep_{new:06d}.npz"
        try:
            os.link(source / meta["file"], tmp / name)
        except OSError:
            shutil.copy2(source / meta["file"], tmp / name)
        entries.append({**meta, "id": new, "file": name})
    body = {**index, "episodes": entries}
    atomic_write_text(tmp / "index.json", json.dumps(body, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return sum(int(m["length"]) for m in entries)


def split(run: Path, out: Path, judges: dict, test_per_task: int, seed: int) -> dict:
    """The held-out store and every judge's subsets; the record of what each holds."""
    labelled, real = run / "data" / "labelled_base", run / "data" / "reward_real"
    for store in (labelled, real, run / "data" / "base_merged"):
        if not (store / "index.json").is_file():
            raise WmrlError(f"--run {run}: no {store.relative_to(run)} (a co-evolve run's data)")
    lab_order = per_task_order(json.loads((labelled / "index.json").read_text())["episodes"], seed)
    short = [t for t, ids in lab_order.items() if len(ids) <= test_per_task]
    if short:
        raise WmrlError(f"--test-per-task {test_per_task}: task {short[0]} has too few episodes")
    test = sorted(k for ids in lab_order.values() for k in ids[:test_per_task])
    pool = {t: ids[test_per_task:] for t, ids in lab_order.items()}
    real_order = per_task_order(json.loads((real / "index.json").read_text())["episodes"], seed + 1)
    record: dict = {"run": str(run), "seed": seed, "test_per_task": test_per_task, "judges": {}}
    record["heldout_steps"] = write_subset(labelled, test, out / HELDOUT / HELDOUT)
    for name, (real_share, lab_share) in judges.items():
        stores, steps = [], {}
        for kind, source, order, share in (
            ("real", real, real_order, real_share),
            ("labelled", labelled, pool, lab_share),
        ):
            chosen = nested_share(order, share)
            steps[kind] = 0
            if chosen:
                path = out / "data" / f"{kind}-{share:g}"
                steps[kind] = write_subset(source, chosen, path)
                stores.append(str(path))
        record["judges"][name] = {
            "shares": {"real": real_share, "labelled": lab_share},
            "stores": stores,
            "real_steps": steps,
            "judge_data_steps": steps["real"] + steps["labelled"],
        }
    return record


# -- scoring: pure functions -----------------------------------------------------------------------


def episode_rows(episodes: list[Scored], threshold: float, frames: int) -> list[dict]:
    """Per held-out episode, what each rule makes of the judge's calls at `threshold`."""
    rows = []
    for ep in episodes:
        calls = episode_calls(ep, threshold, frames)
        outcome, found_on, lead, ends, on, exact = time_episode(calls, ep.success, ep.chunk)
        real = bool(ep.success.any())
        called, true_call = judge_episode(calls, ep.success, ep.chunk)
        timing = Timed(ep.task, real, outcome, found_on, lead, ends, on, exact)
        rows.append({"timed": timing, "called": called, "true_call": true_call})
    return rows


def figures(rows: list[dict]) -> dict:
    """Recall and cost of going on, the ending rule's precision and recall, of `rows`."""
    summary = summarize([r["timed"] for r in rows])
    calls = sum(r["called"] for r in rows)
    true_calls = sum(r["true_call"] for r in rows)
    return {
        "episodes": summary["episodes"],
        "real_successes": summary["real_successes"],
        "recall_goes_on": summary["recall_goes_on"],
        "cost_goes_on": summary["cost_goes_on"],
        "recall_ends": summary["recall_ends"],
        "precision_ends": true_calls / calls if calls else None,
        "calls": calls,
    }


def bootstrap(
    rows: list[dict],
    keys: tuple[str, ...],
    draws: int,
    seed: int,
    against: list[dict] | None = None,
) -> dict[str, list[float] | None]:
    """Percentile-bootstrap 95% intervals over episodes of `keys` of `figures`; with `against`
    (the same episodes under another judge), of the paired differences."""
    rng = np.random.default_rng(seed)
    values: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(draws):
        pick = rng.integers(0, len(rows), len(rows))
        mine = figures([rows[i] for i in pick])
        theirs = figures([against[i] for i in pick]) if against is not None else None
        for k in keys:
            if mine[k] is None or (theirs is not None and theirs[k] is None):
                continue
            values[k].append(mine[k] - (theirs[k] if theirs is not None else 0.0))
    return {
        k: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if v else None
        for k, v in values.items()
    }


KEYS = ("recall_goes_on", "cost_goes_on")
TARGET = 0.8  # the recall a judge's cheapest threshold is asked for (`cost_for_recall`)


@dataclass(frozen=True)
class Sweep:
    """Going on at a grid of one threshold for every task (ascending, the last above every
    score: no call): per threshold and episode whether a real success was paid (`found` [K, E])
    and the replays' real steps (`steps` [K, E]); per episode the exact verdict's steps
    (`exact` [E]) and the real outcome (`real` [E])."""

    thresholds: np.ndarray
    found: np.ndarray
    steps: np.ndarray
    exact: np.ndarray
    real: np.ndarray


def sweep(episodes: list[Scored], frames: int, grid: int = 60) -> Sweep:
    values = np.concatenate([ep.scores for ep in episodes])
    thresholds = np.append(np.unique(np.quantile(values, np.linspace(0.0, 1.0, grid))), np.inf)
    tasks = {ep.task for ep in episodes}
    found = np.zeros((len(thresholds), len(episodes)), bool)
    steps = np.zeros((len(thresholds), len(episodes)))
    for k, threshold in enumerate(thresholds):
        rows = timed(episodes, dict.fromkeys(tasks, float(threshold)), frames)
        found[k] = [r.found_on and r.real for r in rows]
        steps[k] = [r.steps_on for r in rows]
    rows = timed(episodes, dict.fromkeys(tasks, np.inf), frames)
    exact = np.array([r.steps_exact for r in rows], float)
    return Sweep(thresholds, found, steps, exact, np.array([r.real for r in rows]))


def _curve(s: Sweep, pick: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(recall, cost) of going on at each threshold, on the episodes `pick` draws (all)."""
    pick = np.arange(len(s.real)) if pick is None else pick
    if not s.real[pick].any():
        return None
    return s.found[:, pick].sum(1) / s.real[pick].sum(), s.steps[:, pick].sum(1) / s.exact[
        pick
    ].sum()


def recall_at_cost(s: Sweep, cap: float, pick: np.ndarray | None = None) -> float | None:
    """The highest recall of going on at a threshold whose replays cost at most `cap` of the
    exact verdict's steps (the last threshold, no call, always qualifies)."""
    curve = _curve(s, pick)
    if curve is None:
        return None
    recall, cost = curve
    return float(recall[cost <= cap + 1e-12].max())


def cost_for_recall(s: Sweep, target: float, pick: np.ndarray | None = None) -> float | None:
    """The lowest cost at which going on recalls at least `target`; None if no threshold
    does."""
    curve = _curve(s, pick)
    if curve is None:
        return None
    recall, cost = curve
    reached = recall >= target - 1e-12
    return float(cost[reached].min()) if reached.any() else None


def matched(s: Sweep, cap: float, draws: int, reference: Sweep | None) -> dict:
    """Recall at cost <= `cap` with a percentile-bootstrap interval over episodes, and paired
    with `reference` (the same episodes, in the same order) where given. The threshold is the
    best on these episodes for each judge alike: a comparison of the judges' rankings, an
    optimistic figure for any one."""
    rng = np.random.default_rng(0)
    mine, diff = [], []
    for _ in range(draws):
        pick = rng.integers(0, len(s.real), len(s.real))
        value = recall_at_cost(s, cap, pick)
        if value is None:
            continue
        mine.append(value)
        if reference is not None:
            diff.append(value - recall_at_cost(reference, cap, pick))
    out = {
        "cap": cap,
        "recall": recall_at_cost(s, cap),
        "recall_interval95": [float(np.percentile(mine, q)) for q in (2.5, 97.5)],
        "cost_for_recall": cost_for_recall(s, TARGET),
        "target_recall": TARGET,
    }
    if reference is not None:
        out["minus_reference"] = out["recall"] - recall_at_cost(reference, cap)
        out["minus_reference_interval95"] = [float(np.percentile(diff, q)) for q in (2.5, 97.5)]
    return out


def score_judge(
    episodes: list[Scored], threshold: float, frames: int, draws: int, reference: list[dict] | None
) -> tuple[dict, list[dict]]:
    rows = episode_rows(episodes, threshold, frames)
    tasks = sorted({ep.task for ep in episodes})
    result = {"threshold": threshold, "all": figures(rows), "auc": ranking_auc(episodes, frames)}
    result["interval95"] = bootstrap(rows, KEYS, draws, 0)
    if reference is not None:
        paired = figures(rows)
        ref = figures(reference)
        result["minus_reference"] = {
            k: (paired[k] - ref[k]) if paired[k] is not None and ref[k] is not None else None
            for k in KEYS
        }
        result["minus_reference_interval95"] = bootstrap(rows, KEYS, draws, 0, reference)
    result["tasks"] = {}
    for task in tasks:
        mine = [r for r, ep in zip(rows, episodes, strict=True) if ep.task == task]
        eps = [ep for ep in episodes if ep.task == task]
        result["tasks"][task] = {**figures(mine), "auc": ranking_auc(eps, frames)}
    return result, rows


# -- the job ---------------------------------------------------------------------------------------


def train(out: Path, run: Path, name: str, stores: list[str], seed: int, wmrl: str) -> Path:
    """One judge by `wmrl train-reward`, unless it is already whole."""
    directory = out / "judges" / name
    if (directory / "reward_model").is_dir():
        print(f"judge {name}: trained, kept", flush=True)
        return directory / "reward_model"
    command = [
        wmrl,
        "train-reward",
        "--preset",
        str(run / "stage1" / "config.yaml"),
        "--data",
        str(run / "data" / "base_merged"),
        "--seed",
        str(seed),
        "--out",
        str(directory),
        "--overwrite",
    ]
    for store in stores:
        command += ["--data", store]
    print("$ " + " ".join(command), flush=True)
    if subprocess.run(command).returncode != 0:
        raise WmrlError(
            f"judge {name}: wmrl train-reward failed (its output above); rerun to resume"
        )
    return directory / "reward_model"


def markdown(record: dict, results: dict, reference: str) -> str:
    def cell(v, d=2):
        return "-" if v is None else f"{v:.{d}f}"

    def interval(v):
        return "" if v is None else f" [{v[0]:+.2f}, {v[1]:+.2f}]"

    def difference(value, bounds):  # a paired difference with its interval, or "-"
        return "-" if value is None else f"{value:+.2f}{interval(bounds)}"

    cap = results[reference]["matched"]["cap"]
    lines = [
        f"Held out: {record['test_per_task']} labelled episodes per task of {record['run']} "
        f"(seed {record['seed']}), {next(iter(results.values()))['all']['real_successes']} "
        "real successes. Cost: the replays' real steps over the exact verdict's. Matched: "
        f"the best recall at a cost at most {reference}'s own ({cap:.2f}), the threshold "
        "chosen on these episodes for every judge alike; for "
        f"recall {TARGET}: the lowest cost that reaches it.",
        "",
        f"| judge | judge data (real steps) | AUC | matched: recall | recall - {reference} | "
        f"cost for recall {TARGET} |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        m, d = r["matched"], record["judges"][name]["judge_data_steps"]
        lines.append(
            f"| {name} | {d:,} | {cell(r['auc'])} | {cell(m['recall'])}"
            f"{interval(m['recall_interval95'])} | "
            f"{difference(m.get('minus_reference'), m.get('minus_reference_interval95'))} | "
            f"{cell(m['cost_for_recall'])} |"
        )
    lines += [
        "",
        "At each judge's own threshold (set as the stage's was: the best episode F1 on its "
        "held-out labelled episodes, else on frames):",
        "",
        f"| judge | judge data (real steps) | threshold | AUC | ends: P / R | goes on: recall | "
        f"goes on: cost | recall - {reference} | cost - {reference} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        a, d = r["all"], record["judges"][name]["judge_data_steps"]
        diff = r.get("minus_reference") or {}
        ivs = r.get("minus_reference_interval95") or {}
        lines.append(
            f"| {name} | {d:,} | {r['threshold']:.3f} | {cell(r['auc'])} | "
            f"{cell(a['precision_ends'])} / {cell(a['recall_ends'])} | "
            f"{cell(a['recall_goes_on'])}{interval(r['interval95']['recall_goes_on'])} | "
            f"{cell(a['cost_goes_on'])}{interval(r['interval95']['cost_goes_on'])} | "
            + " | ".join(difference(diff.get(k), ivs.get(k)) for k in KEYS)
            + " |"
        )
    tasks = [t for t, row in next(iter(results.values()))["tasks"].items() if row["real_successes"]]
    lines += [
        "",
        "Per task, going on (recall / cost / AUC):",
        "",
        "| judge | "
        + " | ".join(f"{t} ({results[reference]['tasks'][t]['real_successes']})" for t in tasks)
        + " |",
        "|---|" + "---|" * len(tasks),
    ]
    for name, r in results.items():
        cells = [
            f"{cell(r['tasks'][t]['recall_goes_on'])} / {cell(r['tasks'][t]['cost_goes_on'])} / "
            f"{cell(r['tasks'][t]['auc'])}"
            for t in tasks
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(record: dict, results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, (name, r) in enumerate(results.items()):
        steps = record["judges"][name]["judge_data_steps"]
        label = f"{name} ({steps / 1000:.1f}k)"
        order = np.argsort(r["curve"]["cost"])
        cost, recall = np.array(r["curve"]["cost"])[order], np.array(r["curve"]["recall"])[order]
        axes[0].step(cost, np.maximum.accumulate(recall), where="post", color=f"C{i}", label=label)
        axes[0].plot(r["all"]["cost_goes_on"], r["all"]["recall_goes_on"], "o", color=f"C{i}")
        m = r["matched"]
        lo, hi = m["recall_interval95"]
        yerr = [[m["recall"] - lo], [hi - m["recall"]]]
        axes[1].errorbar([steps / 1000], [m["recall"]], yerr=yerr, fmt="o", color=f"C{i}")
    cap = next(iter(results.values()))["matched"]["cap"]
    axes[0].axvline(cap, color="grey", lw=0.8)
    axes[0].set(
        xlabel="replays / exact verdict's real steps",
        ylabel="recall of real successes",
        xlim=(0, 1.02),
        ylim=(0, 1.02),
        title="going on, by threshold (o: its own)",
    )
    axes[0].legend(fontsize=8, title="judge (its data)", title_fontsize=8)
    axes[1].set(
        xlabel="judge data (thousand real steps)",
        ylim=(0, 1.02),
        ylabel=f"recall at cost <= {cap:.2f}",
        title="at the reference's cost",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--run", type=Path, required=True, help="a co-evolve run (its data, stage1)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--test-per-task", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="the split's and the judges' seed")
    parser.add_argument("--judge", action="append", default=[], help="NAME=REAL,LABELLED shares")
    parser.add_argument("--reference", default="full")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--wmrl", default=shutil.which("wmrl") or "wmrl")
    args = parser.parse_args(argv)
    try:
        judges = dict(parse_judge(s) for s in args.judge) if args.judge else dict(JUDGES)
        if args.reference not in judges:
            raise WmrlError(
                f"--reference {args.reference}: not among the judges ({', '.join(judges)})"
            )
        if args.test_per_task < 1 or args.draws < 1:
            raise WmrlError("--test-per-task and --draws: expected at least 1")
        if not (args.run / "stage1" / "config.yaml").is_file():
            raise WmrlError(f"--run {args.run}: no stage1/config.yaml (a co-evolve run's)")
        args.out.mkdir(parents=True, exist_ok=True)
        record_path = args.out / "split.json"
        record = split(args.run, args.out, judges, args.test_per_task, args.seed)
        atomic_write_text(record_path, json.dumps(record, indent=1) + "\n")
        models = {
            name: train(args.out, args.run, name, info["stores"], args.seed, args.wmrl)
            for name, info in record["judges"].items()
        }
        run(args, record, models)
    except WmrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run(args: argparse.Namespace, record: dict, models: dict[str, Path]) -> None:
    import torch

    from wmrl_cli.config import resolve_config
    from wmrl_cli.rewards.calibration import judge_threshold
    from wmrl_cli.rewards.loading import load_reward_model

    frames = resolve_config(str(args.run / "stage1" / "config.yaml")).reward_model.success_frames
    ordered = [args.reference, *[n for n in models if n != args.reference]]
    results, reference_rows, reference_sweep, cap = {}, None, None, 0.0
    for name in ordered:
        model = load_reward_model(models[name])
        threshold = judge_threshold(None, model, models[name])[0]  # the judge's own
        with torch.no_grad():
            episodes = scored_episodes(args.out / HELDOUT, model)
        results[name], rows = score_judge(episodes, threshold, frames, args.draws, reference_rows)
        swept = sweep(episodes, frames)
        if name == args.reference:  # the others matched at the reference's own cost
            reference_rows, reference_sweep = rows, swept
            cap = results[name]["all"]["cost_goes_on"]
        results[name]["matched"] = matched(swept, cap, args.draws, reference_sweep
                                           if name != args.reference else None)  # fmt: skip
        recall, cost = _curve(swept, None)
        results[name]["curve"] = {"recall": recall.tolist(), "cost": cost.tolist()}
        print(f"judge {name}: {json.dumps(results[name]['all'])}", flush=True)
    results = {name: results[name] for name in models}  # the judges' order
    atomic_write_text(
        args.out / "budget.json",
        json.dumps({"split": record, "results": results}, indent=1, default=float) + "\n",
    )
    atomic_write_text(args.out / "budget.md", markdown(record, results, args.reference))
    plot(record, results, args.out / "budget.png")
    print((args.out / "budget.md").read_text())


if __name__ == "__main__":
    main()
