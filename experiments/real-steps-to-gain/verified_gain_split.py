"""Where verified imagination's paid success comes from: real success of the imagined actions,
or the judge calling more of them?

    python experiments/real-steps-to-gain/verified_gain_split.py --run RUN \
        --policy NAME=POLICY [...] [--store NAME=STORE ...] --out DIR

Verified imagination (`reward_model.source=verified`) pays an imagined episode when the judge
calls a success and the real simulator, replaying the episode's actions from its stored start,
succeeds by the call. So its paid success is the product of two things RL can raise: how often
the policy's imagined actions succeed in the real simulator, and how often the judge calls
those that do (its recall on them). Only the first is real progress.

For each policy (a co-evolve run's base, its stage-1 checkpoints), this imagines
`coevolve.reward_policy_rollouts_per_task` episodes per task in RUN's first world model from
RL's starts (RUN/data/base_merged), seeded as the run's `labelled_base` stage (the same starts
in the same order), labelled step by step by the simulator (`jobs/imagine_policy.py`, what
co-evolve's `labelled_base` stage runs; `--store NAME=STORE` reuses such a store, the run's own
`data/labelled_base` for its base policy). On each episode it reads stage 1's judge as stage 1
did (its threshold, `success_frames` and rounding) and reports: the imagined actions' real
success, the calls, the paid episodes (a call with the simulator's success by the call), and the
judge's recall and precision on them. Not reproduced offline: the second world-model draw that
must repeat a call (`reward_model.confirm_draws`), and RL's task sampling (here every task
alike). Writes DIR/verified_gain_split.json and .md; results: docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.coevolve.stages import imagine_policy
from wmrl_cli.config import resolve_config
from wmrl_cli.config.loading import validate_config
from wmrl_cli.data.episodes import open_stores
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.intervals import wilson_interval
from wmrl_cli.files import atomic_write_text
from wmrl_cli.rewards.base import TASK_CONDITIONED, round_scores
from wmrl_cli.rewards.calibration import held_success, judge_threshold
from wmrl_cli.rewards.loading import load_reward_model, reward_model_source


def split(store: Path, model, verdict: Any, threshold: float) -> dict[str, Any]:
    """The imagined episodes of `store` read by the judge `model` with the stage's `verdict`."""
    episodes = succeeded = called = paid = 0
    for episode in open_stores([store]):
        ids = [episode.task_id] if model.kind in TASK_CONDITIONED else None
        scores = model.predict(episode.frames[None], ids)[0].cpu().numpy()[1:]
        if verdict.round_scores:
            scores = round_scores(scores)
        held = held_success(scores[None], threshold, verdict.success_frames, np.zeros(1))[0][0]
        real = episode.success.astype(bool)
        episodes += 1
        succeeded += bool(real.any())
        if held.any():
            call = int(np.argmax(held))
            called += 1
            paid += bool(real[: call + 1].any())  # the replay succeeds by the call
    return {
        "episodes": episodes,
        "real_success": succeeded / episodes,
        "real_success_interval": list(wilson_interval(succeeded, episodes)),
        "calls": called,
        "paid": paid,
        "paid_success": paid / episodes,
        "paid_success_interval": list(wilson_interval(paid, episodes)),
        "recall": paid / succeeded if succeeded else None,
        "precision": paid / called if called else None,
    }


def _named(values: list[str], flag: str) -> dict[str, Path]:
    named = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise WmrlError(f"{flag} {value!r}: expected NAME=PATH")
        named[name] = Path(path)
    return named


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def markdown(rows: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| policy | imagined episodes | real success of the imagined actions | judge's calls "
        "| paid (called, real by the call) | recall | precision |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        low, high = r["real_success_interval"]
        plow, phigh = r["paid_success_interval"]
        lines.append(
            f"| {name} | {r['episodes']} | {_pct(r['real_success'])} [{100 * low:.1f}, "
            f"{100 * high:.1f}] | {r['calls']} | {_pct(r['paid_success'])} [{100 * plow:.1f}, "
            f"{100 * phigh:.1f}] | {_pct(r['recall'])} | {_pct(r['precision'])} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a co-evolve run directory")
    parser.add_argument("--policy", action="append", default=[], help="NAME=POLICY to imagine")
    parser.add_argument("--store", action="append", default=[], help="NAME=an imagined store")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    run, stage = args.run, args.run / "stage1"
    for needed in (run / "run.json", stage / "config.yaml", run / "wm_base", run / "data"):
        if not needed.exists():
            raise WmrlError(f"{needed}: not found (--run takes a co-evolve run with its stage 1)")
    cfg = validate_config(json.loads((run / "run.json").read_text())["config"])
    verdict = resolve_config(str(stage / "config.yaml")).reward_model
    source = reward_model_source(Path(verdict.path))
    judge = load_reward_model(source)
    threshold = judge_threshold(verdict.success_threshold, judge, source)[0]

    stores = _named(args.store, "--store")
    args.out.mkdir(parents=True, exist_ok=True)
    for name, policy in _named(args.policy, "--policy").items():
        stores[name] = Path(
            imagine_policy(
                cfg,
                str(policy),
                str(run / "wm_base" / "world_model"),
                str(run / "data" / "base_merged"),
                args.out / name,
                cfg.simulator.seed + 3_000_000,  # the labelled_base stage's seed: its starts
            )
        )
    rows = {name: split(store, judge, verdict, threshold) for name, store in stores.items()}
    result = {"run": str(run), "threshold": threshold, "policies": rows}
    atomic_write_text(args.out / "verified_gain_split.json", json.dumps(result, indent=1))
    atomic_write_text(args.out / "verified_gain_split.md", markdown(rows))
    print(markdown(rows), end="")


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path or model: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
