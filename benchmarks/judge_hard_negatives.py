"""Hard negatives from verified imagination: fine-tuned on the calls the simulator refuted in
RL's first steps, does the judge stop making the false calls of the later steps, and keep the
true ones?

    python benchmarks/judge_hard_negatives.py --reward-model RM --calls STAGE/verified_calls \
        --split S --data STORE [STORE ...] [--steps 1000] [--preset mw-coevolve] --out DIR

STAGE/verified_calls/step_N holds the judge's calls of RL step N, each an imagined episode up
to its call labelled by its replay (`reward_model.source=verified`; docs/formats.md). The
calls of steps 1..S join the judge's own training data (`--data`: the stores it learned from)
and the judge is fine-tuned from RM on them for `--steps` (its threshold refitted as training
fits it); the calls of steps S+1.. are the test. On them both judges re-read the stored frames
with the held verdict (`reward_model.success_frames` frames at the threshold, as the imagined
env calls): the base judge re-calls nearly all of them (its precision there is the run's
`verify/confirmed_fraction`); the question is how many false calls the fine-tuned one drops
and how many true ones it keeps. Without RL: a judge that cannot separate them here will not
hold its precision under RL either. Writes DIR/judge_hard_negatives.json; results:
docs/results.md#the-learned-verdict-alone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from wmrl_cli.config import resolve_config
from wmrl_cli.data.episodes import open_stores
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.stats import wilson_interval
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


def reread(model, threshold: float, frames: int, stores: list[Path]) -> dict[str, float]:
    """The judge's held verdict on stored calls: how many it calls again, true and false."""
    called = kept_true = confirmed = 0
    for episode in open_stores(stores):
        ids = [episode.task_id] if model.kind == "taskemb_resnet" else None
        scores = model.predict(episode.frames[None], ids)[0].cpu().numpy()[1:]
        held = held_success(scores[None], threshold, frames, np.zeros(1, np.int64))[0][0]
        real = bool(episode.success.any())
        confirmed += real
        called += bool(held.any())
        kept_true += real and bool(held.any())
    low, high = wilson_interval(kept_true, called) if called else (float("nan"),) * 2
    return {
        "calls": called,
        "true_calls": kept_true,
        "precision": kept_true / called if called else float("nan"),
        "precision_interval": [low, high],
        "confirmed": confirmed,
        "recall_of_confirmed": kept_true / confirmed if confirmed else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward-model", required=True, help="the judge RL ran with")
    parser.add_argument("--calls", type=Path, required=True, help="STAGE/verified_calls")
    parser.add_argument("--split", type=int, required=True, help="last RL step trained on")
    parser.add_argument("--data", nargs="+", required=True, help="the judge's training stores")
    parser.add_argument("--steps", type=int, default=1000, help="fine-tuning steps")
    parser.add_argument("--preset", default="mw-coevolve", help="the run's reward_model section")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    steps = call_stores(args.calls)
    train = [p for s, paths in steps.items() if s <= args.split for p in paths]
    test = [p for s, paths in steps.items() if s > args.split for p in paths]
    if not train or not test:
        raise WmrlError(f"--split {args.split} leaves no calls on one side (steps {sorted(steps)})")
    cfg = resolve_config(
        args.preset,
        overrides=[
            f"reward_model.steps={args.steps}",
            "logging.tensorboard=false",
            "logging.progress=false",
        ],
    )
    frames = cfg.reward_model.success_frames
    source = reward_model_source(Path(args.reward_model))
    base = load_reward_model(source)
    base_threshold = judge_threshold(cfg.reward_model.success_threshold, base, source)[0]

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
        "success_frames": frames,
        "base": {"threshold": base_threshold, **reread(base, base_threshold, frames, test)},
        "fine_tuned": {
            "threshold": fitted.threshold,
            **reread(tuned, fitted.threshold, frames, test),
        },
        "fine_tuned_at_base_threshold": reread(tuned, base_threshold, frames, test),
    }
    (args.out / "judge_hard_negatives.json").write_text(json.dumps(result, indent=1))
    for name in ("base", "fine_tuned", "fine_tuned_at_base_threshold"):
        row = result[name]
        low, high = row["precision_interval"]
        print(
            f"{name:30s} calls {row['calls']:4d}  precision {row['precision']:.2f} "
            f"[{low:.2f}, {high:.2f}]  recall of the confirmed {row['recall_of_confirmed']:.2f}"
        )


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path or model: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
