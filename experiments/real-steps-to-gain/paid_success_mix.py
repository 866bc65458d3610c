"""Is verified imagination's rising paid success the policy, or the tasks RL draws?

    python experiments/real-steps-to-gain/paid_success_mix.py --stage RUN/stage1 --out DIR

`env/success_once` in a verified run (`reward_model.source=verified`) is the fraction of the
step's imagined episodes that the judge called and the simulator confirmed. It is taken over the
episodes RL drew, and `varied_outcome` reset sampling draws more starts from tasks whose groups
had mixed outcomes. So a rising figure can be a policy that succeeds more, or a draw that leans
to the tasks it already succeeds at. This splits the two with the run's own records:

- the starts each step drew (`ranks/rank_R.json`'s `init_ids`, one list per step of the
  process's last start, from its `first_step`), each mapped to its task through the reset set;
- the confirmed calls of each step (`verified_calls/step_N`, each with its task).

Per task t over the recorded steps: draws n_t, confirmed calls c_t, paid rate r_t = c_t / n_t.
The logged figure is sum(c_t) / sum(n_t), the draw-weighted mean of the r_t; at equal draws it
would be mean_t(r_t). Their difference is the mix. Per step the same split is reported with the
pooled r_t, for the logged curve. Writes DIR/paid_success_mix.json and .md; results:
docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text


def mix_split(drawn: list[list[int]], confirmed: list[list[int]], num_tasks: int) -> dict[str, Any]:
    """`drawn[s]`, `confirmed[s]`: the tasks of step s's drawn episodes and of its confirmed
    calls. Returns per task its draws, confirmed calls and paid rate, the logged (draw-weighted)
    paid success, the equal-draws one, and per step the logged figure beside the figure the
    step's draws would give at the pooled per-task rates."""
    draws = np.zeros(num_tasks)
    paid = np.zeros(num_tasks)
    for tasks in drawn:
        draws += np.bincount(tasks, minlength=num_tasks)
    for tasks in confirmed:
        paid += np.bincount(tasks, minlength=num_tasks)
    seen = draws > 0
    rate = np.divide(paid, draws, out=np.zeros(num_tasks), where=seen)
    steps = []
    for tasks, calls in zip(drawn, confirmed, strict=True):
        n = np.bincount(tasks, minlength=num_tasks)
        steps.append(
            {
                "logged": len(calls) / len(tasks),
                "at_pooled_rates": float(n @ rate / n.sum()),
                "draw_share": (n / n.sum()).tolist(),
            }
        )
    return {
        "draws": draws.astype(int).tolist(),
        "confirmed": paid.astype(int).tolist(),
        "rate": rate.tolist(),
        "logged": float(paid.sum() / draws.sum()),
        "equal_draws": float(rate[seen].mean()),
        "steps": steps,
    }


def _calls(stage: Path, step: int) -> list[dict[str, Any]]:
    """Every call of `step` (all ranks' folders), as its store's index lists them."""
    calls = []
    for folder in sorted((stage / "verified_calls").glob(f"step_{step:06d}*")):
        calls += json.loads((folder / "index.json").read_text())["episodes"]
    return calls


def _first_step(stage: Path, summaries: list[dict[str, Any]]) -> int:
    """The step of the rank summaries' first `init_ids` list: recorded (`first_step`), or, in a
    summary written before it was, the one step from which every call's start is among its
    step's draws (a step without calls leaves no folder, so folder names cannot say it)."""
    if "first_step" in summaries[0]:
        return int(summaries[0]["first_step"])
    steps = sorted(int(p.name.split("_")[1]) for p in (stage / "verified_calls").glob("step_*"))
    recorded = len(summaries[0]["init_ids"])
    fits = []
    for first in range(1, (steps[-1] if steps else 0) + 1):
        draws = [{e for s in summaries for e in s["init_ids"][i]} for i in range(recorded)]
        calls = [_calls(stage, first + i) for i in range(recorded)]
        if sum(map(len, calls)) and all(
            m["imagined"]["reset_entry"] in draws[i] for i, c in enumerate(calls) for m in c
        ):
            fits.append(first)
    if len(fits) != 1:
        raise WmrlError(
            f"{stage}: cannot tell which steps the rank summaries recorded "
            f"({len(fits)} candidates); rerun the stage with this version of wmrl"
        )
    return fits[0]


def read_stage(stage: Path) -> tuple[list[list[int]], list[list[int]], list[str], int]:
    """(drawn tasks per step, confirmed-call tasks per step, task names, first step) of a
    verified RL run folder, for the steps its rank summaries recorded (the last start's)."""
    from wmrl_cli.config import resolve_config
    from wmrl_cli.jobs.inputs import load_reset_set, resolve_inputs

    cfg = resolve_config(str(stage / "config.yaml"))
    entries, names = load_reset_set(cfg, resolve_inputs(cfg).reset_set)
    entry_task = [e.task_id for e in entries]
    if not (stage / "verified_calls").is_dir():
        raise WmrlError(f"{stage}: no verified_calls/ (a run with reward_model.source=verified)")
    summaries = [json.loads(p.read_text()) for p in sorted((stage / "ranks").glob("rank_*.json"))]
    if not summaries:
        raise WmrlError(f"{stage}: no ranks/rank_*.json (the run's rank summaries)")
    first = _first_step(stage, summaries)
    recorded = len(summaries[0]["init_ids"])

    # a rank file of an earlier start on more ranks holds other steps: left out
    def same_start(summary: dict[str, Any]) -> bool:
        return len(summary["init_ids"]) == recorded and summary.get("first_step", first) == first

    summaries = [s for s in summaries if same_start(s)]
    drawn, confirmed = [], []
    for i in range(recorded):
        drawn.append([entry_task[e] for s in summaries for e in s["init_ids"][i]])
        calls = _calls(stage, first + i)
        confirmed.append([m["task_id"] for m in calls if m["imagined"]["call"] == "confirmed"])
    return drawn, confirmed, names, first


def markdown(result: dict[str, Any], names: list[str], first: int) -> str:
    lines = [
        f"Steps {first}-{first + len(result['steps']) - 1}: paid success as logged "
        f"{result['logged']:.1%}, at equal draws per task {result['equal_draws']:.1%}.",
        "",
        "| task | draws | share | confirmed calls | paid rate |",
        "|---|---|---|---|---|",
    ]
    total = sum(result["draws"])
    for t, name in enumerate(names):
        n = result["draws"][t]
        lines.append(
            f"| {name} | {n} | {n / total:.1%} | {result['confirmed'][t]} | "
            f"{result['rate'][t]:.1%} |"
        )
    lines += ["", "| step | logged | the step's draws at the pooled rates |", "|---|---|---|"]
    for i, step in enumerate(result["steps"]):
        lines.append(f"| {first + i} | {step['logged']:.1%} | {step['at_pooled_rates']:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", type=Path, required=True, help="a verified RL run folder")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        drawn, confirmed, names, first = read_stage(args.stage)
    except (WmrlError, OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = mix_split(drawn, confirmed, len(names))
    args.out.mkdir(parents=True, exist_ok=True)
    body = {"stage": str(args.stage), "first_step": first, "tasks": names, **result}
    atomic_write_text(args.out / "paid_success_mix.json", json.dumps(body, indent=1))
    text = markdown(result, names, first)
    atomic_write_text(args.out / "paid_success_mix.md", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
