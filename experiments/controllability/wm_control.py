"""The synthetic controllability test: can a world model track a dot that only its actions move?

    python experiments/controllability/wm_control.py --backend opensora --minutes 15 \
        --out runs/control/os-base [--distractors]
        [--set world_model.action_tokens=true --set world_model.train_shift=3]

Generates the dot world (`wmrl_cli/sims/dot_world.py`: a dot moves 2 px x action per step under
i.i.d. random actions, so nothing but the actions tells the next move), trains the configured
world model on it with the real `wmrl train-wm` code path (WorldModelTrainer, tiny config at
64x64) under a budget of the process's CPU time for the denoiser (the autoencoder and the
window encoding are a one-time cost, reported apart: `world_model.vae_init=RUN` reuses a
trained autoencoder and its cached latents across rows), and scores it on held-out episodes
every `--val-every` steps (the learning curve) and at the end:

* centroid error of the dot at h8 / h16 (px): with the true actions; with another episode's
  actions against the true position (a model that follows its actions puts the dot elsewhere:
  large); against the position those other actions lead to (tracking: small); copy baseline;
* the action gap (PSNR true minus other actions) and the response ratio against the world.

Target (issue #12): within 15 minutes, error at h8 <= 1 px with the true actions and >= 4 px
with other actions. Results: docs/benchmarks.md (section "Controllability").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.config.loading import resolve_config
from wmrl_cli.config.schema import RunConfig
from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.world_model_eval import (
    OpenLoopReport,
    alternative_actions,
    open_loop_eval,
    open_loop_rollout,
    padded_actions,
)
from wmrl_cli.runtime import configure_threads
from wmrl_cli.sims.dot_world import DotWorld, dot_centroid
from wmrl_cli.training.latent_cache import WindowLatents
from wmrl_cli.training.world_model_trainer import WorldModelTrainer
from wmrl_cli.world_models.interface import WorldModel
from wmrl_cli.world_models.loading import load_imagining_world_model

CHUNK, LENGTH, HORIZON = 8, 64, 16
VAL_SEED0 = 1_000_000


def centroid_errors(
    model: WorldModel,
    world: DotWorld,
    episodes: list[Episode],
    seed: int,
    per_episode: dict[str, list[float]] | None = None,
) -> dict[str, float]:
    """Mean dot-centroid errors (px) at h8 and h16 (see the module doc); each episode's into
    `per_episode` where given (for paired intervals: compare_scores.py)."""
    steps = -(-HORIZON // CHUNK) * CHUNK
    first = np.stack([e.frames[0] for e in episodes])
    true_actions = np.stack([padded_actions(e.actions, steps, 2) for e in episodes])
    other_actions = np.stack(alternative_actions("other", episodes, steps, seed))
    pred = open_loop_rollout(model, first, true_actions, CHUNK, HORIZON, seed).numpy()
    pred_other = open_loop_rollout(model, first, other_actions, CHUNK, HORIZON, seed).numpy()
    out: dict[str, float] = {}
    for h in (8, 16):
        rows = {"true": [], "other": [], "tracks_other": [], "copy": []}
        for i, episode in enumerate(episodes):
            start = episode.sim_states[0]
            truth = world.positions(start, true_actions[i])[h]
            moved = world.positions(start, other_actions[i])[h]
            rows["true"].append(np.linalg.norm(dot_centroid(pred[i, h - 1]) - truth))
            found_other = dot_centroid(pred_other[i, h - 1])
            rows["other"].append(np.linalg.norm(found_other - truth))
            rows["tracks_other"].append(np.linalg.norm(found_other - moved))
            rows["copy"].append(np.linalg.norm(start - truth))
        out.update({f"centroid_{k}@{h}": float(np.mean(v)) for k, v in rows.items()})
        if per_episode is not None:
            for k, v in rows.items():
                per_episode[f"centroid_{k}@{h}"] = [float(x) for x in v]
    return out


def score(
    model: WorldModel,
    world: DotWorld,
    episodes: list[Episode],
    seed: int,
    per_episode: dict[str, list[float]] | None = None,
) -> tuple[OpenLoopReport, dict[str, float]]:
    """(the open-loop report, the dot metrics: PSNR, copy PSNR, action gap, response ratio at
    h1 / h8 / h16, and `centroid_errors`) of `model` on held-out `episodes`."""
    model.eval()
    report = open_loop_eval(
        model, episodes, HORIZON, seed=seed, keep_videos=4, alternatives=("other",),
        replay=world.replay,
    )  # fmt: skip
    row: dict[str, float] = {}
    for h in (1, 8, 16):
        row[f"psnr@{h}"] = report.psnr[h - 1]
        row[f"copy_psnr@{h}"] = report.copy_psnr[h - 1]
        row[f"action_gap@{h}"] = report.action_gap(h)
        row[f"response_ratio@{h}"] = report.response_ratio[h - 1]
    row.update(centroid_errors(model, world, episodes, seed, per_episode))
    return report, row


class ControlTrainer(WorldModelTrainer):
    """The train-wm trainer, validated on held-out dot episodes with the dot metrics; its
    budget is the process's CPU time, so that a run on a shared machine gets what it asked for."""

    clock = staticmethod(time.process_time)

    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        store: EpisodeStore,
        world: DotWorld,
        val: list[Episode],
    ) -> None:
        super().__init__(cfg, run_dir, store, action_dim=2)
        self.world, self.val_episodes, self.curve = world, val, []
        self.t_start = self.prep_minutes = self.cpu_offset = 0.0

    def run(self, resume: bool = True, init: str | None = None) -> Path:
        self.t_start = time.process_time()
        return super().run(resume, init)

    def cache_latents(self, model: WorldModel) -> WindowLatents:
        """Encoded windows, cached beside the data per reused autoencoder (every row of an
        ablation shares data and autoencoder); the budget starts after them."""
        source = self.cfg.world_model.vae_init
        path = None
        if source is not None:
            weights = Path(source) / "model.safetensors"
            if not weights.is_file():  # a train-wm run directory
                weights = Path(source) / "world_model" / "model.safetensors"
            digest = hashlib.sha1(weights.read_bytes()).hexdigest()[:12]
            path = Path(self.store.root) / f"window-latents-{digest}.pt"
        if path is not None and path.is_file():
            state = torch.load(path, weights_only=True)
            latents = WindowLatents.from_state_dict(self.train, state)
        else:
            latents = super().cache_latents(model)
            if path is not None:
                torch.save(latents.state_dict(), path)
        self.t_run = self.clock()  # the denoiser's budget starts here
        self.prep_minutes = (self.t_run - self.t_start) / 60  # autoencoder + encoding
        return latents

    def validate(self, model: WorldModel, step: int):  # noqa: ANN201 (the base's report)
        row = {"step": step, "cpu_minutes": self.cpu_offset + (self.clock() - self.t_run) / 60}
        report, scores = score(model, self.world, self.val_episodes, self.cfg.simulator.seed)
        row.update(scores)
        self.curve.append(row)
        self.logger.log({f"eval/wm/{k}": v for k, v in row.items() if k != "step"}, step)
        print(
            json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
            flush=True,
        )
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="opensora", choices=["opensora", "wan"])
    parser.add_argument("--distractors", action="store_true", help="a static coloured scene")
    parser.add_argument(
        "--minutes", type=float, default=15.0, help="CPU-time budget of the denoiser"
    )
    parser.add_argument("--episodes", type=int, default=200, help="training episodes")
    parser.add_argument("--val-episodes", type=int, default=16)
    parser.add_argument("--val-every", type=int, default=100)
    parser.add_argument("--vae-steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue OUT's run from its last checkpoint for --minutes more (the curve goes on)",
    )
    parser.add_argument("--data", type=Path, help="episode store to (re)use (default OUT/data)")
    parser.add_argument(
        "--sampling-steps", type=int, default=2, help="as the mw-* presets (imagination speed)"
    )
    parser.add_argument(
        "--init",
        help="start from this world model (train-wm --init); with "
        "--set world_model.distill_guidance=true, distil its action guidance into one pass",
    )
    parser.add_argument(
        "--score",
        type=Path,
        help="score this saved world model without training, loaded as imagination loads it "
        "(the run's world_model.action_guidance and --sampling-steps applied): OUT/score.json",
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()

    world = DotWorld(distractors=args.distractors)
    store = EpisodeStore(args.data or args.out / "data")
    if len(store) == 0:
        store.add([world.episode(seed, LENGTH, CHUNK) for seed in range(args.episodes)])
    val = [world.episode(VAL_SEED0 + i, LENGTH, CHUNK) for i in range(args.val_episodes)]

    options = {
        "simulator.image_size": world.size,
        "simulator.chunk_size": CHUNK,
        "simulator.seed": 0,
        "world_model.backend": args.backend,
        "world_model.steps": 100_000,
        "world_model.time_limit_min": args.minutes,
        "world_model.vae_steps": args.vae_steps,
        "world_model.val_every": args.val_every,
        "world_model.save_every": 100_000,
        "world_model.val_horizon": HORIZON,
        "world_model.num_inference_steps": args.sampling_steps,
        "num_threads": args.threads,
    }
    cfg = resolve_config(None, options, args.overrides)
    configure_threads(cfg.num_threads)
    torch.manual_seed(0)
    if args.score is not None:
        model = load_imagining_world_model(args.score, world.size, world.size, cfg, "cpu")
        started = time.process_time()
        per_episode: dict[str, list[float]] = {}
        _, row = score(model, world, val, cfg.simulator.seed, per_episode)
        result = {
            "model": str(args.score), "overrides": args.overrides,
            "sampling_steps": args.sampling_steps,
            "sampler_guidance": model.config.action_guidance,
            "guidance_distilled": getattr(model.config, "guidance_distilled", None),
            "score_cpu_s": time.process_time() - started, **row, "per_episode": per_episode,
        }  # fmt: skip
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "score.json").write_text(json.dumps(result, indent=1))
        print("score:", json.dumps(result))
        return
    trainer = ControlTrainer(cfg, args.out, store, world, val)
    total_minutes = args.minutes
    previous = args.out / "control.json"
    if args.resume and previous.is_file():
        earlier = json.loads(previous.read_text())
        trainer.curve, trainer.cpu_offset = earlier["curve"], earlier["curve"][-1]["cpu_minutes"]
        total_minutes += earlier["minutes"]
    trainer.run(resume=args.resume, init=args.init)
    result = {
        "backend": args.backend,
        "distractors": args.distractors,
        "overrides": args.overrides,
        "minutes": total_minutes,
        "prep_cpu_minutes": trainer.prep_minutes,
        "curve": trainer.curve,
    }
    (args.out / "control.json").write_text(json.dumps(result, indent=1))
    print("final:", json.dumps(trainer.curve[-1]))


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad --init / --score model or setting: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
