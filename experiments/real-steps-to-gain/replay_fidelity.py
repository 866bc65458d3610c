"""How far do the imagined frames of a labelled store drift from the real frames of the same
actions, task by task and step by step?

    python experiments/real-steps-to-gain/replay_fidelity.py --run RUN [--store STORE] \\
        [--tasks a,b] [--strips K] --out DIR

Each episode of a store of imagined episodes labelled by replay (co-evolve's
`RUN/data/labelled_base`: the policy acting in the world model from RL's starts) is replayed
in the simulator from its start (the reset entry's stored state and seed in
`RUN/data/base_merged`), every step rendered, and its imagined frames compared with the real
ones: PSNR (dB, 8-bit frames) at each step after the start, averaged per task. Open loop on the
policy's own imagined actions: where `closed_loop_gap.py` finds a task the policy fails in the
world model, this says whether the world model's frames drift more there. A frame average is
dominated by the still background, so the same is measured in the moving region (the pixels
where the real frame differs from the start: the arm and what it moves; the episodes' MSE
averaged, then PSNR, as `wmrl train-wm`'s validation does) beside the start held still, a
world model that moves nothing: where the imagined frames score no better than that, the world
model does not show where the actions took the arm. Writes
DIR/replay_fidelity.json and .md; `--strips K`: also DIR/strips_<task>.png, the first K
episodes of each task as pairs of rows (imagined frames above, the replay's real frames below)
at the start and the steps of STRIP_STEPS, to look at what a frame average cannot show.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.world_model_eval import psnr_of_mse
from wmrl_cli.files import atomic_write_text

STEPS = (8, 16, 32, 48, 64, 80, 96, 112, 127)
STRIP_STEPS = (16, 32, 48, 64, 80, 96, 112, 127)


def strip(pairs: list[tuple[np.ndarray, np.ndarray]], scale: int = 2) -> np.ndarray:
    """One uint8 image of (imagined [T+1, H, W, 3] from the start, real [T, H, W, 3]) pairs:
    per pair an imagined row over a real row, columns the start and STRIP_STEPS (those the
    episode reaches), a 2-pixel white gap between pairs, upscaled `scale` times."""
    rows = []
    for imagined, real in pairs:
        steps = [s for s in STRIP_STEPS if s <= len(real)]
        top = [imagined[0], *(imagined[s] for s in steps)]
        bottom = [imagined[0], *(real[s - 1] for s in steps)]  # the same real start
        rows += [np.concatenate(top, axis=1), np.concatenate(bottom, axis=1)]
        rows.append(np.full((2, rows[-1].shape[1], 3), 255, np.uint8))
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    image = np.concatenate(rows[:-1])
    return image.repeat(scale, axis=0).repeat(scale, axis=1)


def psnr_by_step(imagined: np.ndarray, real: np.ndarray) -> np.ndarray:
    """[T] PSNR (dB) of uint8 frames [T, H, W, 3] against [T, H, W, 3], step by step; 100 where
    a frame matches exactly (evaluation/video_metrics.py's)."""
    import torch

    from wmrl_cli.evaluation.video_metrics import psnr

    return psnr(torch.from_numpy(imagined), torch.from_numpy(real)).double().numpy()


def moving_mse_by_step(imagined: np.ndarray, real: np.ndarray, start: np.ndarray) -> np.ndarray:
    """[T] MSE over the pixels where the real frame differs from the start (the arm and what
    it moves: evaluation/world_model_eval.py's moving region), NaN where nothing moves."""
    import torch

    from wmrl_cli.evaluation.world_model_eval import moving_mse

    as_batch = [torch.from_numpy(np.ascontiguousarray(a))[None] for a in (imagined, real, start)]
    return moving_mse(*as_batch)[0]


def replay_frames(sim, sim_cfg, entry, actions: np.ndarray, chunk: int) -> np.ndarray:
    """The real frames [T, H, W, 3] after each of `actions` [T, A] (stored: as executed),
    replayed in `sim` (one env, rendering every step, not ended at success) from `entry`'s
    stored start."""
    from wmrl_cli.sims.backends import replay_actions

    actions = replay_actions(sim_cfg, actions).astype(np.float32)
    sim.reset([entry.task_id], [entry.sim_state], seeds=[entry.seed])
    frames = []
    for k in range(0, len(actions), chunk):
        frames.append(sim.chunk_step(actions[None, k : k + chunk]).frames[0])
    return np.concatenate(frames)[: len(actions)]


def markdown(rows: dict[str, dict]) -> str:
    head = " | ".join(f"step {s}" for s in STEPS)
    lines = [f"| task | episodes | {head} |", "|---|---|" + "---|" * len(STEPS)]
    for task, r in rows.items():
        cells = " | ".join(f"{r['psnr'][str(s)]:.1f}" for s in STEPS if str(s) in r["psnr"])
        lines.append(f"| {task} | {r['episodes']} | {cells} |")
    lines += ["", "In the moving region (the pixels where the real frame differs from the start), "
              "the imagined frames / the start held still:", "",
              f"| task | {head} |", "|---|" + "---|" * len(STEPS)]  # fmt: skip
    for task, r in rows.items():
        moving, held = r["moving_psnr"], r["held_moving_psnr"]
        cells = " | ".join(
            f"{moving[str(s)]:.1f} / {held[str(s)]:.1f}" for s in STEPS if str(s) in moving
        )
        lines.append(f"| {task} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a co-evolve run directory")
    parser.add_argument("--store", type=Path, help="default: RUN/data/labelled_base")
    parser.add_argument("--tasks", help="comma-separated task names (default: all)")
    parser.add_argument("--strips", type=int, default=0, help="episodes per task to draw")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    store = args.store or args.run / "data" / "labelled_base"
    from wmrl_cli.config import resolve_config
    from wmrl_cli.jobs.inputs import load_reset_set
    from wmrl_cli.sims.backends import resolve_simulator, simulator_class

    try:
        index = json.loads((store / "index.json").read_text())["episodes"]
        config = args.run / "stage1" / "config.yaml"
        if not config.is_file():
            raise WmrlError(f"{config}: not found (--run takes a co-evolve run with its stage 1)")
        wanted = set(args.tasks.split(",")) if args.tasks else {e["task_name"] for e in index}
        unknown = sorted(wanted - {e["task_name"] for e in index})
        if unknown:
            raise WmrlError(f"--tasks {','.join(unknown)}: not a task of {store}")
        cfg = resolve_config(str(config))
        entries, _ = load_reset_set(cfg, args.run / "data" / "base_merged")
    except (OSError, ValueError, KeyError, WmrlError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    update = {"max_steps": 10_000, "terminate_on_success": False}
    sim_cfg = resolve_simulator(cfg.simulator).model_copy(update=update)
    sim = simulator_class(sim_cfg)(sim_cfg, 1, render_every_step=True)
    curves: dict[str, list[np.ndarray]] = defaultdict(list)
    moving: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    drawn: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    try:
        for episode in index:
            if episode["task_name"] not in wanted:
                continue
            with np.load(store / episode["file"], allow_pickle=False) as data:
                frames, actions = data["frames"], data["actions"]
            entry = entries[episode.get("imagined", {}).get("reset_entry", episode["init_id"])]
            real = replay_frames(sim, sim_cfg, entry, actions, episode["chunk_size"])
            curves[episode["task_name"]].append(psnr_by_step(frames[1 : len(real) + 1], real))
            held = np.broadcast_to(frames[0], real.shape)
            moving[episode["task_name"]].append(
                (
                    moving_mse_by_step(frames[1 : len(real) + 1], real, frames[0]),
                    moving_mse_by_step(held, real, frames[0]),
                )
            )
            if len(drawn[episode["task_name"]]) < args.strips:
                drawn[episode["task_name"]].append((frames, real))
    except (OSError, ValueError, KeyError, IndexError) as exc:  # a damaged store: nothing written
        print(f"error: {store}: {exc}", file=sys.stderr)
        return 2
    finally:
        sim.close()
    rows = {}
    for task, runs in curves.items():
        depth = min(len(c) for c in runs)
        mean = np.mean(np.stack([c[:depth] for c in runs]), axis=0)
        psnr = {str(s): float(mean[s - 1]) for s in STEPS if s <= depth}
        rows[task] = {"episodes": len(runs), "psnr": psnr}
        for key, which in (("moving_psnr", 0), ("held_moving_psnr", 1)):
            mse = np.nanmean(np.stack([m[which][:depth] for m in moving[task]]), axis=0)
            db = psnr_of_mse(mse)
            rows[task][key] = {str(s): float(db[s - 1]) for s in STEPS if s <= depth}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "replay_fidelity.json", json.dumps(rows, indent=2) + "\n")
    atomic_write_text(args.out / "replay_fidelity.md", markdown(rows))
    import imageio.v3 as iio

    for task, pairs in drawn.items():
        tmp = args.out / f".strips_{task}.png"
        iio.imwrite(tmp, strip(pairs))
        tmp.rename(args.out / f"strips_{task}.png")
    print(markdown(rows), end="")
    return 0


if __name__ == "__main__":  # the simulator's workers start by spawning: only under this guard
    sys.exit(main())
