"""Hard negatives from verified imagination: fine-tuned on the calls the simulator refuted in
RL's first steps, does the judge stop making the false calls of the later steps, and keep the
true ones?

    python experiments/judge-hard-negatives/judge_hard_negatives.py --reward-model RM \
        --calls STAGE/verified_calls --split S --data STORE [STORE ...] [--steps 1000]
        [--config STAGE/config.yaml] --out DIR

STAGE/verified_calls/step_N holds the judge's calls of RL step N, each an imagined episode up
to its call labelled by its replay (`reward_model.source=verified`; docs/formats.md). The
calls of steps 1..S join the judge's own training data (`--data`: the stores it learned from)
and the judge is fine-tuned from RM on them for `--steps` (its threshold refitted as training
fits it); the calls of steps S+1.. are the test. On them both judges re-read the stored frames
with the stage's verdict (its threshold, `success_frames` and rounding, from the stage's
config.yaml): a re-read call falls at the first frame that completes the held run, and it is
true where the replay's success holds at that frame (an earlier call than the replay's success
would have been replayed to that step and refuted). Not reproduced offline: the second
world-model draw that confirms a call (`reward_model.confirm_draws`), whose frames are not
stored; both judges are read without it, like for like. Without RL: a judge that cannot
separate the calls here will not hold its precision under RL either. Writes
DIR/judge_hard_negatives.json; results: docs/results.md, "What the calls teach the judge".
Meta-World judges (a published LIBERO task-embedding judge would need its task-id mapping).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.config import resolve_config
from wmrl_cli.data.episodes import open_stores
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.intervals import wilson_interval
from wmrl_cli.rewards.base import TASK_CONDITIONED, round_scores
from wmrl_cli.rewards.calibration import held_success, judge_threshold
from wmrl_cli.rewards.loading import load_reward_model, reward_model_source
from wmrl_cli.training.init_sources import reward_model_to_fine_tune
from wmrl_cli.training.reward_trainer import train_reward_model


def call_stores(calls: Path) -> dict[int, list[Path]]:
    """The per-step call stores of a stage: RL step -> store."""
    steps = {}
    for path in sorted(calls.glob("step_*")):
        match = re.fullmatch(r"step_(\d+)(_rank\d+)?", path.name)
        if match and path.is_dir():
            steps.setdefault(int(match.group(1)), []).append(path)
    if not steps:
        raise WmrlError(f"{calls}: no step_N call stores (a verified stage writes them)")
    return steps


def reread(model, verdict: Any, threshold: float, stores: list[Path]) -> dict[str, Any]:
    """The judge's held verdict on stored calls (`verdict`: the stage's reward_model section):
    how many it calls again, how many of those are true at the frame it calls; None where a
    ratio has no denominator."""
    called = kept_true = confirmed = 0
    for episode in open_stores(stores):
        ids = [episode.task_id] if model.kind in TASK_CONDITIONED else None
        scores = model.predict(episode.frames[None], ids)[0].cpu().numpy()[1:]
        if verdict.round_scores:
            scores = round_scores(scores)
        start = np.zeros(1, np.int64)
        held = held_success(scores[None], threshold, verdict.success_frames, start)[0][0]
        confirmed += bool(episode.success.any())
        if held.any():
            called += 1
            kept_true += bool(episode.success[int(np.argmax(held))])
    low, high = wilson_interval(kept_true, called) if called else (None, None)
    return {
        "calls": called,
        "true_calls": kept_true,
        "precision": kept_true / called if called else None,
        "precision_interval": [low, high],
        "confirmed": confirmed,
        "recall_of_confirmed": kept_true / confirmed if confirmed else None,
    }


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward-model", required=True, help="the judge RL ran with")
    parser.add_argument("--calls", type=Path, required=True, help="STAGE/verified_calls")
    parser.add_argument("--split", type=int, required=True, help="last RL step trained on")
    parser.add_argument("--data", nargs="+", required=True, help="the judge's training stores")
    parser.add_argument("--steps", type=int, default=1000, help="fine-tuning steps")
    parser.add_argument(
        "--config", type=Path, default=None, help="the stage's config (default: beside --calls)"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    steps = call_stores(args.calls)
    train = [p for s, paths in steps.items() if s <= args.split for p in paths]
    test = [p for s, paths in steps.items() if s > args.split for p in paths]
    if not train or not test:
        raise WmrlError(f"--split {args.split} leaves no calls on one side (steps {sorted(steps)})")
    config = args.config or args.calls.parent / "config.yaml"
    if not config.is_file():
        raise WmrlError(f"{config}: no stage config (pass --config STAGE/config.yaml)")
    cfg = resolve_config(
        str(config),
        overrides=[
            f"reward_model.steps={args.steps}",
            "logging.tensorboard=false",
            "logging.progress=false",
        ],
    )
    verdict = cfg.reward_model.model_copy()  # as the stage judged, before the fine-tuning's
    source = reward_model_source(Path(args.reward_model))
    base = load_reward_model(source)
    base_threshold = judge_threshold(verdict.success_threshold, base, source)[0]

    store = open_stores([*args.data, *train])
    _, tuned = reward_model_to_fine_tune(source, store, None, cfg.reward_model)
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir, fitted = train_reward_model(cfg, args.out, store, init=tuned)
    tuned = load_reward_model(model_dir)

    train_calls = open_stores(train)
    result = {
        "reward_model": str(source),
        "split": args.split,
        "train_steps": sorted(s for s in steps if s <= args.split),
        "test_steps": sorted(s for s in steps if s > args.split),
        "train_calls": len(train_calls),
        "train_false_calls": sum(not m["success"] for m in train_calls.index),
        "fine_tune_steps": args.steps,
        "success_frames": verdict.success_frames,
        "base": {"threshold": base_threshold, **reread(base, verdict, base_threshold, test)},
        "fine_tuned": {
            "threshold": fitted.threshold,
            **reread(tuned, verdict, fitted.threshold, test),
        },
        "fine_tuned_at_base_threshold": reread(tuned, verdict, base_threshold, test),
    }
    (args.out / "judge_hard_negatives.json").write_text(json.dumps(result, indent=1))
    for name in ("base", "fine_tuned", "fine_tuned_at_base_threshold"):
        row = result[name]
        low, high = row["precision_interval"]
        print(
            f"{name:30s} calls {row['calls']:4d}  precision {_fmt(row['precision'])} "
            f"[{_fmt(low)}, {_fmt(high)}]  recall of the confirmed "
            f"{_fmt(row['recall_of_confirmed'])}"
        )


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path or model: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
