"""A world model's checkpoints (or other world models) scored side by side on the same held-out
episodes, each paired episode by episode with the last one named (the full budget): does the
model still improve, at the horizon and in the action gap, between two points of its training?

    python experiments/world-model-budget/score_checkpoints.py --run WM_RUN --preset STAGE \
        --data STORE [-n 4] [--step 1200 --step 2400 ...] [--model NAME=PATH[@gW] ...] \
        [--against NAME] [--horizon 32] [--out DIR]

WM_RUN: a train-wm run trained with `world_model.keep_checkpoints=0` (co-evolve's world model:
`RUN/wm_base`); each `--step` its `checkpoints/step_N`, with the EMA weights the run validates
and saves (not the raw ones); `final`: the saved model. `--model`: another saved world model (a
train-wm run or model folder, such as a distilled student), sampled at action guidance W with
`@gW` (the preset's otherwise), scored after the steps; `--against`: the entry the others are
paired with (the last by default). STAGE: the config imagination runs the models with (their
sampling steps and action guidance: co-evolve's `RUN/stage1/config.yaml`).
STORE: episodes the world model never trained on (co-evolve's `RUN/data/reward_real`, the
base policy's own real rollouts), the first `-n` of each task. Every checkpoint rolls each
episode open loop from its first frame with the recorded actions and with another episode's of
the same task (`--alternatives`: also shuffled or uniform random actions), with the same noise
(`open_loop_eval`); PSNR and the action gaps at steps 8, 16 and 32 are compared with the last
entry's, paired by episode (bootstrap 95%).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.config.loading import resolve_config
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.intervals import paired_difference
from wmrl_cli.evaluation.world_model_eval import open_loop_eval
from wmrl_cli.files import atomic_write_text
from wmrl_cli.rewards.loading import safe_torch_load
from wmrl_cli.world_models.factory import MODEL_DIR
from wmrl_cli.world_models.interface import WorldModel
from wmrl_cli.world_models.loading import load_imagining_world_model

STEPS = (8, 16, 32)
ALTERNATIVE_NAMES = {"other": "action_gap", "shuffled": "action_gap_shuffled",
                     "random": "action_gap_random"}  # fmt: skip


def keys(alternatives: tuple[str, ...]) -> tuple[str, ...]:
    """The table's columns: PSNR and each alternative's action gap, at each step."""
    names = ("psnr", *(ALTERNATIVE_NAMES[a] for a in alternatives))
    return tuple(f"{name}@{s}" for s in STEPS for name in names)


def load_ema(model: WorldModel, checkpoint: Path) -> None:
    """The EMA weights of a train-wm checkpoint (the training state whose keys are the
    denoiser's parameters) into `model`'s denoiser: the weights its validation scored."""
    params = dict(model.transformer.named_parameters())
    # the trainer saves the EMA after the optimizer and scheduler: read it first, not the
    # optimizer's state (twice the weights) only to find it is not the EMA
    for path in sorted((checkpoint / "training_state").glob("state_*.pt"), reverse=True):
        state = safe_torch_load(path)
        if isinstance(state, dict) and set(state) == set(params):
            with torch.no_grad():
                for name, value in state.items():
                    params[name].copy_(value.to(params[name].dtype))
            return
    raise WmrlError(f"{checkpoint}: no EMA weights in its training state (a sharded run's?)")


def checkpoint_model(run: Path, step: str, cfg: RunConfig, size: tuple[int, int]) -> WorldModel:
    if step == "final":
        return load_imagining_world_model(run / MODEL_DIR, *size, cfg, "cpu")
    checkpoint = run / "checkpoints" / f"step_{int(step):06d}"
    if not checkpoint.is_dir():
        raise WmrlError(f"{checkpoint}: no such checkpoint (train with keep_checkpoints=0)")
    model = load_imagining_world_model(checkpoint / "model", *size, cfg, "cpu")
    load_ema(model, checkpoint)
    return model


def named_model(spec: str, cfg: RunConfig) -> tuple[str, Path, RunConfig]:
    """`NAME=PATH[@gW]`: (name, a saved world model, the config it samples with: at action
    guidance W if given), checked before any model is scored."""
    name, sep, rest = spec.partition("=")
    path, _, guidance = rest.partition("@g")
    if not sep or not name or not path:
        raise WmrlError(f"--model {spec}: expected NAME=PATH or NAME=PATH@gW")
    if guidance:
        cfg = cfg.model_copy(deep=True)
        try:
            cfg.world_model.action_guidance = float(guidance)
        except ValueError:
            raise WmrlError(f"--model {spec}: @g takes a number, got {guidance!r}") from None
    if not Path(path).exists():
        raise WmrlError(f"--model {spec}: no such world model {path}")
    return name, Path(path), cfg


def _finite_pairs(a: list[float], b: list[float]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, float), np.asarray(b, float)
    keep = np.isfinite(x) & np.isfinite(y)  # episodes that lasted to the step
    return x[keep], y[keep]


def table(scores: dict[str, dict], columns: tuple[str, ...], against: str | None = None) -> str:
    names = list(scores)
    against = against or names[-1]
    last = scores[against]["per_episode"]
    lines = [
        f"Each against {against}, paired by episode (bootstrap 95%).",
        "",
        "| model | episodes | " + " | ".join(columns) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for name in names:
        own = scores[name]["per_episode"]
        cells = []
        for key in columns:
            x, y = _finite_pairs(last[key], own[key])
            cell = f"{np.mean(y):.2f}"
            if name != against:
                d = paired_difference(x, y)
                cell += f" ({d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}])"
            cells.append(cell)
        lines.append(f"| {name} | {scores[name]['episodes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a train-wm run folder (for --step)")
    parser.add_argument("--preset", required=True, help="the config imagination runs it with")
    parser.add_argument("--data", type=Path, required=True, help="held-out episodes")
    parser.add_argument("-n", type=int, default=4, help="episodes per task")
    parser.add_argument("--step", action="append", default=[], help="N or final")
    parser.add_argument("--model", action="append", default=[], help="NAME=PATH[@gW]")
    parser.add_argument("--against", help="the entry the others are paired with (the last)")
    parser.add_argument("--horizon", type=int, default=max(STEPS))
    parser.add_argument(
        "--alternatives",
        default="other",
        type=lambda text: tuple(text.split(",")),
        help="the actions each gap is against: other (another episode's of the same task), "
        "shuffled, random; comma-separated",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write scores.json and scores.md here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        if args.horizon < max(STEPS) or args.n < 2:
            raise WmrlError(f"--horizon must be at least {max(STEPS)} and -n at least 2")
        if not set(args.alternatives) <= set(ALTERNATIVE_NAMES):
            raise WmrlError(f"--alternatives {args.alternatives}: expected of {ALTERNATIVE_NAMES}")
        if not args.step and not args.model:
            raise WmrlError("nothing to score: give --run with --step, or --model")
        if args.step and args.run is None:
            raise WmrlError("--step needs --run (the train-wm run whose checkpoints they are)")
        bad = [step for step in args.step if step != "final" and not step.isdigit()]
        if bad:
            raise WmrlError(f"--step {bad[0]}: expected a checkpoint's step number or final")
        cfg = resolve_config(args.preset)
        store = EpisodeStore.open(args.data)
        episodes = [store.load(i) for i in store.first_per_task(args.n)]
        size = episodes[0].frames.shape[1:3]
        entries = [(step, lambda s=step: checkpoint_model(args.run, s, cfg, size))
                   for step in args.step]  # fmt: skip
        for name, path, own in (named_model(spec, cfg) for spec in args.model):
            entries.append(
                (name, lambda p=path, c=own: load_imagining_world_model(p, *size, c, "cpu"))
            )
        names = [name for name, _ in entries]
        if len(set(names)) != len(names) or (args.against and args.against not in names):
            raise WmrlError(f"entries {names}: names must differ and --against be one of them")
        scores = {}
        for name, load in entries:
            report = open_loop_eval(
                load(), episodes, args.horizon, seed=0, keep_videos=0,
                alternatives=args.alternatives,
            )  # fmt: skip
            scores[name] = {"episodes": len(episodes), "per_episode": report.per_episode(STEPS)}
            print(f"{name}: scored on {len(episodes)} episodes", flush=True)
    except WmrlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = table(scores, keys(args.alternatives), args.against)
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "scores.json", json.dumps(scores, indent=1) + "\n")
        atomic_write_text(args.out / "scores.md", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
