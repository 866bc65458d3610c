"""Where arms of an RL comparison differ, task by task, at one RL step: each run's held-out
successes per task (its `eval/step_N.json`) beside the base's, and the task sampler's decayed
trials and paid successes (`varied_outcome`'s state in `checkpoints/step_N/training_state`),
which say how often RL drew each task and was paid there (docs/results.md, "A recall floor").

    python experiments/real-steps-to-gain/task_split.py --base runs/ce-long-verified-s0/eval/base \\
        --arm verified=runs/ce-long-verified-s0/stage1 --arm exact=runs/exact-long-s0 \\
        --arm floor25=runs/floor25-s0 --step 20 --out runs/task-split

writes OUT/task_split.json and OUT/task_split.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[2]))  # the checkout's wmrl_cli

from wmrl_cli.files import atomic_write_text  # noqa: E402


def held_out(path: Path) -> dict[str, int]:
    """Successes per task of an evaluation file (success rate x trials per task)."""
    report = json.loads(path.read_text())
    trials = report["trials_per_task"]
    return {task: round(rate * trials) for task, rate in report["per_task"].items()}


def sampler_counts(run: Path, step: int) -> dict[str, list[float]] | None:
    """The sampler's decayed trials and paid successes per task at `step` (None: no
    varied_outcome state in that checkpoint)."""
    state = run / "checkpoints" / f"step_{step:06d}" / "training_state" / "state.json"
    if not state.is_file():
        return None
    sampler = json.loads(state.read_text()).get("extra", {}).get("sampler", {})
    if "trials" not in sampler:
        return None
    return {"trials": sampler["trials"], "successes": sampler["successes"]}


def task_split(base: Path, arms: dict[str, Path], step: int) -> dict:
    tasks = held_out(base / "report.json")
    out: dict = {"step": step, "tasks": list(tasks), "held_out": {"base": list(tasks.values())}}
    out["sampler"] = {}
    for name, run in arms.items():
        out["held_out"][name] = list(held_out(run / "eval" / f"step_{step:06d}.json").values())
        counts = sampler_counts(run, step)
        if counts is not None:
            out["sampler"][name] = counts
    return out


def markdown(result: dict) -> str:
    names = list(result["held_out"])
    lines = [
        f"Held-out successes per task at RL step {result['step']}",
        "",
        "| task | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for i, task in enumerate(result["tasks"]):
        lines.append(
            f"| {task} | " + " | ".join(str(result["held_out"][n][i]) for n in names) + " |"
        )
    if result["sampler"]:
        samplers = list(result["sampler"])
        lines += [
            "",
            "The task sampler's decayed trials / paid successes",
            "",
            "| task | " + " | ".join(samplers) + " |",
            "|---|" + "---|" * len(samplers),
        ]
        for i, task in enumerate(result["tasks"]):
            counts = [result["sampler"][n] for n in samplers]
            cells = [f"{c['trials'][i]:.1f} / {c['successes'][i]:.1f}" for c in counts]
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the base policy's eval dir")
    parser.add_argument("--arm", action="append", required=True, help="NAME=RUN")
    parser.add_argument("--step", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    arms = {}
    for value in args.arm:
        name, sep, run = value.partition("=")
        if not sep or not name or not run:
            parser.error(f"--arm {value!r}: expected NAME=RUN")
        arms[name] = Path(run)
    try:
        result = task_split(args.base, arms, args.step)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "task_split.json", json.dumps(result, indent=1))
    atomic_write_text(args.out / "task_split.md", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
