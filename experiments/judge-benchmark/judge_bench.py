"""The judge benchmark: a verdict's precision, recall and F1 per task, on a fixed set of policies'
imagined episodes labelled by the simulator, the base policy's and the RL policies' apart.

Verdicts are compared here, in minutes, before any RL run spends hours on one. The set is
what RL in imagination judges: each policy rolled closed-loop in the world model from the reset
set's starts, every chunk of its actions executed in the simulator from the same stored state
(`wmrl rollout --world-model WM --policy P --reset-set STORE`, docs/cli.md). Build it once,
seeded, so that it is rebuilt identically from a clone:

    python experiments/judge-benchmark/judge_bench.py build --world-model WM --reset-set STORE \\
        --policy base=RUN/sft/policy --policy rl05=EXACT/checkpoints/step_000005/model \\
        [--policy ...] --out SET [-n 16] [--seed 0] [--preset PRESET]

A policy labelled `base` is the base group; every other label is an RL policy. SET/manifest.json
records the commands, the build time and the set's size; a build run again goes on with the
policies it has not rolled yet (one whose rollout was cut short is rolled again). Builds of
different labels into one set may run side by side (each merges the manifest it finds on disk
when it records a policy), where cores are to spare: on 2 cores, the base's rollouts beside RL
in the simulator made each 3.3 times slower than alone. Then score
any number of verdicts:

    python experiments/judge-benchmark/judge_bench.py score --set SET --judge today=RM \\
        [--judge strict=RM@0.95:k4 ...] [--preset PRESET] [--out RESULT.json]

A verdict `NAME=RM[@THRESHOLD][:kFRAMES]` is a reward model that calls an episode's success at
the first imagined frame ending FRAMES consecutive frames at THRESHOLD (the imagined env's rule,
rewards/calibration.py: held_success); the defaults are what RL would use, from `--preset`'s
`reward_model.success_threshold` / `success_frames` (the threshold: else the model's own).
`--only rl10,rl20` scores those policies' episodes alone: a judge refined on the others'
replays (what RL has paid for by then) is scored on policies it never saw. Each row also
gives the ranking AUC of the judge's held score against the real outcome: at 0.5 no
threshold can call the task's successes.
`@task`: a threshold per task at its best F1, each episode judged out of sample (the base group
by 2-fold cross-validation, the RL group at the thresholds fitted on the base group). A
call is true when the simulator's success held by the end of the called chunk (where RL's
episode ends on the call). Per task and group:
- precision: true calls / calls;
- recall: real successes (episodes whose replay succeeds anywhere) with a true call / real
  successes: what verified imagination pays, since a false call ends the episode unpaid;
- F1 with a percentile-bootstrap interval over episodes, P and R with Wilson intervals.
The target (docs/results.md, "The judge benchmark"): on the RL policies' episodes, precision
>= 0.8 and recall >= 0.7 on every task with at least 10 real successes, and on at least 6 tasks.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text

TARGET_PRECISION, TARGET_RECALL, TARGET_MIN_SUCCESSES, TARGET_TASKS = 0.8, 0.7, 10, 6
BASE = "base"
_SPEC = re.compile(r"^(?P<name>[\w.-]+)=(?P<path>[^@]+?)(@(?P<thr>[0-9.]+|task))?(:k(?P<k>\d+))?$")
PER_TASK = -1.0  # `@task`: a threshold per task, fitted out of sample (task_thresholds_judged)


# -- what a verdict reads and how it is scored: pure functions ------------------------------------


@dataclass(frozen=True)
class Judged:
    """One episode under one verdict: its task, group, whether the replay succeeded anywhere,
    whether the verdict called success, and whether that call was true."""

    task: str
    group: str
    real: bool
    called: bool
    true_call: bool


def chunk_end(step: int, chunk: int, length: int) -> int:
    """The last step (1-based) of the chunk holding `step`, within an episode of `length`:
    where a call at `step` ends its episode, and how far its replay runs."""
    return min(-(-step // chunk) * chunk, length)


def judge_episode(calls: np.ndarray, success: np.ndarray, chunk: int) -> tuple[bool, bool]:
    """(called, true call) for one episode: `calls` [T] the verdict's per-frame calls on
    imagined frames 1..T, `success` [T] the simulator's flag after each step, `chunk` the
    actions per chunk. The call is the first called frame; frame t shows the state after step
    t, and the episode ends at the end of its chunk, so the call is true when the simulator's
    success held by then."""
    if not calls.any():
        return False, False
    end = chunk_end(int(np.argmax(calls)) + 1, chunk, len(success))
    return True, bool(success[:end].any())


def rates(judged: list[Judged]) -> dict[str, float | int | None]:
    """Counts and rates of a list of judged episodes (None where undefined)."""
    calls = sum(j.called for j in judged)
    true_calls = sum(j.true_call for j in judged)
    real = sum(j.real for j in judged)
    found = sum(j.real and j.true_call for j in judged)
    precision = true_calls / calls if calls else None
    recall = found / real if real else None
    return {
        "episodes": len(judged),
        "real_successes": real,
        "calls": calls,
        "true_calls": true_calls,
        "found": found,
        "precision": precision,
        "recall": recall,
        "f1": f1_score(true_calls, calls, found, real),
    }


def f1_score(true_calls: int, calls: int, found: int, real: int) -> float | None:
    """2PR / (P + R); None where neither is defined, 0 where one is 0 or undefined."""
    if not calls and not real:
        return None
    precision = true_calls / calls if calls else 0.0
    recall = found / real if real else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def f1_interval(judged: list[Judged], draws: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap 95% interval of F1 over episodes (nan where undefined)."""
    if not judged:
        return float("nan"), float("nan")
    arr = np.array([(j.called, j.true_call, j.real, j.real and j.true_call) for j in judged])
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(judged), size=(draws, len(judged)))
    sums = arr[picks].sum(axis=1)  # [draws, 4]: calls, true calls, real, found
    values = [f1_score(int(t), int(c), int(f), int(r)) for c, t, r, f in sums]
    values = [v for v in values if v is not None]
    if not values:
        return float("nan"), float("nan")
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def table(judged: list[Judged]) -> dict[str, dict[str, dict]]:
    """{group: {task (and 'all'): rates with intervals}}, groups 'base' and 'rl'."""
    from wmrl_cli.evaluation.intervals import wilson_interval

    out: dict[str, dict[str, dict]] = {}
    for group in sorted({j.group for j in judged}):
        rows = [j for j in judged if j.group == group]
        out[group] = {}
        for task in [*sorted({j.task for j in rows}), "all"]:
            picked = [j for j in rows if task in ("all", j.task)]
            row = rates(picked)
            row["precision_ci"] = wilson_interval(row["true_calls"], row["calls"])
            row["recall_ci"] = wilson_interval(row["found"], row["real_successes"])
            row["f1_ci"] = f1_interval(picked)
            out[group][task] = row
    return out


def meets_target(rows: dict[str, dict]) -> dict[str, object]:
    """The benchmark's target on one group's per-task rows: the tasks with enough real
    successes, those the verdict passes (precision and recall at the bar), and the verdict."""
    eligible = [
        task
        for task, row in rows.items()
        if task != "all" and row["real_successes"] >= TARGET_MIN_SUCCESSES
    ]
    passed = [
        task
        for task in eligible
        if (rows[task]["precision"] or 0.0) >= TARGET_PRECISION
        and (rows[task]["recall"] or 0.0) >= TARGET_RECALL
    ]
    met = len(eligible) >= TARGET_TASKS and len(passed) == len(eligible)
    return {"eligible": eligible, "passed": passed, "met": met}


def parse_judge(spec: str) -> tuple[str, Path, float | None, int | None]:
    """`NAME=RM[@THRESHOLD|@task][:kFRAMES]` -> (name, path, threshold, frames); `@task`:
    PER_TASK."""
    match = _SPEC.match(spec)
    if not match:
        raise WmrlError(f"bad --judge '{spec}': expected NAME=RM[@THRESHOLD|@task][:kFRAMES]")
    thr = match["thr"]
    threshold = None if not thr else PER_TASK if thr == "task" else float(thr)
    frames = int(match["k"]) if match["k"] else None
    if frames is not None and frames < 1:
        raise WmrlError(f"bad --judge '{spec}': kFRAMES must be at least 1")
    return match["name"], Path(match["path"]), threshold, frames


# -- the set --------------------------------------------------------------------------------------


def build(args: argparse.Namespace) -> None:
    """One labelled imagined store per policy, with the command that made it."""
    out = Path(args.out)
    policies = [label_and_path(text) for text in args.policy]
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"seed": args.seed, "per_task": args.n, "policies": {}, "seconds": 0.0}
    if (out / "manifest.json").is_file():  # a build run again goes on where it stopped
        manifest = json.loads((out / "manifest.json").read_text())
        if (manifest["seed"], manifest["per_task"]) != (args.seed, args.n):
            raise WmrlError(f"--out {out} holds a set of another --seed or -n; choose another")
    started = time.monotonic() - manifest["seconds"]
    for label, policy in policies:
        if label in manifest["policies"]:
            continue
        if (out / label).exists():  # a build cut short while rolling it: not in the manifest
            print(f"{label}: rolled again (a build cut short left {out / label} unfinished)")
            shutil.rmtree(out / label)
        command = [
            "rollout", "--world-model", str(args.world_model), "--policy", str(policy),
            "--reset-set", str(args.reset_set), "-n", str(args.n), "--seed", str(args.seed),
            "--out", str(out / label),
            *(["--preset", str(args.preset)] if args.preset else []),
            *(arg for text in args.set or [] for arg in ("--set", text)),
        ]  # fmt: skip
        began = time.monotonic()
        ended = subprocess.run([sys.executable, "-m", "wmrl_cli", *command], check=False)
        typed = " ".join(["wmrl", *command])
        if ended.returncode != 0:
            raise WmrlError(f"building {label} failed (exit {ended.returncode}): {typed}")
        rolled = {
            "path": str(policy),
            "group": group_of(label),
            "command": typed,
            "seconds": round(time.monotonic() - began, 1),
        }
        manifest = _merged(out, manifest, label, rolled)
        manifest["seconds"] = round(time.monotonic() - started, 1)
        atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    manifest = _merged(out, manifest)
    manifest["seconds"] = round(time.monotonic() - started, 1)
    manifest["bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    print(f"set: {out} ({manifest['bytes'] / 2**20:.1f} MiB, {manifest['seconds']:.0f} s)")


def _merged(out: Path, manifest: dict, label: str = "", rolled: dict | None = None) -> dict:
    """The manifest with what another build of other labels into the same set wrote since."""
    if (out / "manifest.json").is_file():
        on_disk = json.loads((out / "manifest.json").read_text())["policies"]
        manifest["policies"] = {**on_disk, **manifest["policies"]}
    if rolled is not None:
        manifest["policies"][label] = rolled
    return manifest


def label_and_path(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not re.fullmatch(r"[\w.-]+", label) or not path:
        raise WmrlError(f"bad --policy '{text}': expected LABEL=PATH (LABEL: base, rl05, ...)")
    return label, Path(path)


def _labels(set_dir: str) -> list[tuple[str, str]]:
    """(label, group) of every policy of a set."""
    return [(path.name, group) for group, path in stores(Path(set_dir))]


def group_of(label: str) -> str:
    return BASE if label == BASE else "rl"


def stores(set_dir: Path) -> list[tuple[str, Path]]:
    """(group, store) per policy of a set: from its manifest, else its folders."""
    manifest = set_dir / "manifest.json"
    if manifest.is_file():
        policies = json.loads(manifest.read_text())["policies"]
        return [(info["group"], set_dir / label) for label, info in sorted(policies.items())]
    found = [
        (group_of(p.name), p) for p in sorted(set_dir.iterdir()) if (p / "index.json").is_file()
    ]
    if not found:
        raise WmrlError(f"--set {set_dir}: no manifest.json and no episode store in it")
    return found


# -- scoring --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scored:
    """One episode of the set as a judge reads it: the scores of imagined frames 1..T, the
    simulator's success flags [T], the chunk size."""

    task: str
    group: str
    scores: np.ndarray
    success: np.ndarray
    chunk: int
    label: str = BASE


def scored_episodes(set_dir: Path, model, labels: set[str] | None = None) -> list[Scored]:
    """Every episode of the set (of the policies in `labels`, if given) scored once by a reward
    model (the start frame, real, left out as the imagined env leaves it)."""
    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.rewards.base import TASK_CONDITIONED

    out = []
    for group, path in stores(set_dir):
        if labels is not None and path.name not in labels:
            continue
        for episode in EpisodeStore.open(path):
            ids = [episode.task_id] if model.kind in TASK_CONDITIONED else None
            scores = model.predict(episode.frames[None], ids)[0].float().cpu().numpy()[1:]
            success = np.asarray(episode.success, bool)
            chunk = episode.chunk_size
            out.append(Scored(episode.task_name, group, scores, success, chunk, path.name))
    return out


def ranking_auc(episodes: list[Scored], frames: int) -> float | None:
    """How well the judge's held score (the highest it keeps for `frames` frames: what a
    threshold is compared with) ranks the real successes above the failures: the probability
    that a random real success outscores a random failure (ties count half); None without
    both. Whatever the threshold, a judge ranking at 0.5 has nothing to call with."""
    from wmrl_cli.rewards.calibration import held_score

    held = np.array([held_score(ep.scores, frames) for ep in episodes], dtype=float)
    real = np.array([ep.success.any() for ep in episodes])
    if real.all() or not real.any():
        return None
    wins = held[real][:, None] - held[~real][None, :]
    return float(((wins > 0) + 0.5 * (wins == 0)).mean())


def episode_calls(ep: Scored, threshold: float, frames: int) -> np.ndarray:
    """[T] the held verdict's calls on an episode's frames at `threshold` (rewards/calibration.py:
    held_success, the imagined env's rule)."""
    from wmrl_cli.rewards.calibration import held_success

    return held_success(ep.scores[None], threshold, frames, np.zeros(1, np.int64))[0][0]


def judge(episodes: list[Scored], thresholds: dict[str, float], frames: int) -> list[Judged]:
    """The episodes under the held verdict at each task's threshold."""
    judged = []
    for ep in episodes:
        calls = episode_calls(ep, thresholds[ep.task], frames)
        called, true_call = judge_episode(calls, ep.success, ep.chunk)
        judged.append(Judged(ep.task, ep.group, bool(ep.success.any()), called, true_call))
    return judged


def best_threshold(episodes: list[Scored], frames: int, default: float, grid: int = 64) -> float:
    """The threshold of the best episode F1 (`rates`) on `episodes`, over a grid of their
    scores' quantiles; the highest among ties (fewer false calls); `default` where they hold
    no real success."""
    if not any(ep.success.any() for ep in episodes):
        return default
    task = episodes[0].task
    values = np.concatenate([ep.scores for ep in episodes])
    candidates = np.unique(np.quantile(values, np.linspace(0.0, 1.0, grid)))[::-1]
    best, best_f1 = default, -1.0
    for threshold in candidates:
        f1 = rates(judge(episodes, {task: float(threshold)}, frames))["f1"] or 0.0
        if f1 > best_f1:
            best, best_f1 = float(threshold), f1
    return best


def task_thresholds_judged(
    episodes: list[Scored], frames: int, default: float, folds: int = 2, seed: int = 0
) -> tuple[list[Judged], dict[str, float]]:
    """A per-task threshold, each episode judged out of sample: the base group by
    cross-validation over `folds` folds of its episodes (each fold at the thresholds fitted on
    the others), the RL group at the thresholds fitted on every base episode, as a judge
    refined on what the base data paid for would be. Returns the judged episodes and the
    thresholds fitted on all base episodes."""
    tasks = sorted({ep.task for ep in episodes})
    base = [ep for ep in episodes if ep.group == BASE]

    def fitted(on: list[Scored]) -> dict[str, float]:
        return {
            t: best_threshold([ep for ep in on if ep.task == t], frames, default)
            if any(ep.task == t for ep in on)
            else default
            for t in tasks
        }

    fold_of = np.random.default_rng(seed).integers(0, folds, size=len(base))
    judged = []
    for k in range(folds):
        train = [ep for ep, f in zip(base, fold_of, strict=True) if f != k]
        test = [ep for ep, f in zip(base, fold_of, strict=True) if f == k]
        judged += judge(test, fitted(train), frames)
    on_base = fitted(base)
    judged += judge([ep for ep in episodes if ep.group != BASE], on_base, frames)
    return judged, on_base


def verdicts(args: argparse.Namespace) -> Iterator[tuple]:
    """Per `--judge` of `args` (with `--set`, `--preset`, `--only`): (name, the reward model's
    folder, the spec's threshold, the frames held, the model's own threshold, the set's episodes
    scored by it: those of `--only` and the base, which per-task thresholds are fitted on). A
    model's scores are shared by its verdicts."""
    import torch

    from wmrl_cli.config import resolve_config
    from wmrl_cli.rewards.calibration import judge_threshold
    from wmrl_cli.rewards.loading import load_reward_model

    cfg = resolve_config(args.preset) if args.preset else resolve_config()
    scored: dict[Path, list[Scored]] = {}
    for spec in args.judge:
        name, path, threshold, frames = parse_judge(spec)
        directory = path / "reward_model" if (path / "reward_model").is_dir() else path
        model = load_reward_model(directory)
        own = judge_threshold(cfg.reward_model.success_threshold, model, directory)[0]
        if directory not in scored:
            with torch.no_grad():
                needed = None if not args.only else {*args.only, BASE}
                scored[directory] = scored_episodes(Path(args.set), model, needed)
        frames = frames or cfg.reward_model.success_frames
        yield name, directory, threshold, frames, own, scored[directory]


def score(args: argparse.Namespace) -> None:
    import torch

    unknown = (args.only or set()) - {label for label, _ in _labels(args.set)}
    if unknown:
        raise WmrlError(f"--only: {','.join(sorted(unknown))} not among the set's policies")
    if BASE not in {label for label, _ in _labels(args.set)}:
        raise WmrlError(f"--set {args.set}: no '{BASE}' policy; build it with --policy {BASE}=PATH")
    torch.set_num_threads(args.threads)
    results = {}
    for name, directory, threshold, frames, own, episodes in verdicts(args):
        tasks = {ep.task for ep in episodes}
        if threshold == PER_TASK:
            judged, thresholds = task_thresholds_judged(episodes, frames, own)
        else:
            thresholds = dict.fromkeys(tasks, own if threshold is None else threshold)
            judged = judge(episodes, thresholds, frames)
        if args.only:  # the policies this judge was not refined on
            kept = [ep.label in args.only for ep in episodes]
            judged = [j for j, keep in zip(judged, kept, strict=True) if keep]
            episodes = [ep for ep, keep in zip(episodes, kept, strict=True) if keep]
        rows = table(judged)
        for group, by_task in rows.items():
            for task, row in by_task.items():
                row["auc"] = ranking_auc(
                    [e for e in episodes if e.group == group and task in ("all", e.task)], frames
                )
        results[name] = {
            "model": str(directory),
            "threshold": "per task"
            if threshold == PER_TASK
            else (own if threshold is None else threshold),
            "task_thresholds": thresholds if threshold == PER_TASK else None,
            "frames": frames,
            "groups": rows,
            "target_rl": meets_target(rows["rl"]) if "rl" in rows else None,
        }
        print(markdown(name, results[name]))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=float) + "\n")


def _threshold(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.3g}"


def _rate(value: float | None, interval: tuple[float, float]) -> str:
    if value is None:
        return "-"
    low, high = interval
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def markdown(name: str, result: dict) -> str:
    """One verdict's table: a row per group and task."""
    lines = [
        f"### {name}: threshold {_threshold(result['threshold'])}, {result['frames']} frame(s)",
        "",
        "| group | task | episodes | real successes | calls | precision | recall | F1 | AUC |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for group, rows in result["groups"].items():
        for task, row in rows.items():
            auc = "-" if row.get("auc") is None else f"{row['auc']:.2f}"
            lines.append(
                f"| {group} | {task} | {row['episodes']} | {row['real_successes']} | "
                f"{row['calls']} | {_rate(row['precision'], row['precision_ci'])} | "
                f"{_rate(row['recall'], row['recall_ci'])} | {_rate(row['f1'], row['f1_ci'])} | "
                f"{auc} |"
            )
    target = result.get("target_rl")
    if target is not None:
        verdict = "met" if target["met"] else "not met"
        lines += [
            "",
            f"Target on the RL policies' episodes: {verdict} (tasks with >= "
            f"{TARGET_MIN_SUCCESSES} real successes: {len(target['eligible'])}, at precision >= "
            f"{TARGET_PRECISION} and recall >= {TARGET_RECALL}: {len(target['passed'])}).",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("build", help="roll and label the set")
    made.add_argument("--world-model", required=True)
    made.add_argument("--reset-set", required=True)
    made.add_argument("--policy", action="append", required=True, help="LABEL=PATH, repeated")
    made.add_argument("--out", required=True)
    made.add_argument("-n", type=int, default=16, help="starts per task and policy")
    made.add_argument("--seed", type=int, default=0)
    made.add_argument("--preset", default=None, help="the RL run's config (its simulator)")
    made.add_argument("--set", action="append", help="section.key=value, as wmrl takes it")
    scored = commands.add_parser("score", help="score verdicts on a set")
    scored.add_argument("--set", required=True)
    scored.add_argument("--judge", action="append", required=True, help="NAME=RM[@T][:kN]")
    scored.add_argument("--preset", default=None, help="the RL run's config (its verdict)")
    scored.add_argument("--out", default=None, help="results as JSON")
    scored.add_argument("--threads", type=int, default=2)
    scored.add_argument(
        "--only",
        type=lambda text: set(text.split(",")),
        default=None,
        help="LABEL,...: score these policies' episodes only (those a refined judge never saw)",
    )
    args = parser.parse_args(argv)
    (build if args.command == "build" else score)(args)


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path, spec or model: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
