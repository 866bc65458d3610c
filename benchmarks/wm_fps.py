"""Imagined vs real frames per second, side by side in one run, over world-model settings.

    python benchmarks/wm_fps.py [--backend opensora] [--steps 1 2 4 10] [--envs 10 32 64]
                                [--threads 2] [--rounds 3] [--warmup 1] [--flops]
                                [--precision fp32 bf16] [--compile] [--guidance 1 2]
                                [--preset mw-coevolve]
                                [--out RESULT.json] [--markdown TABLE.md]

Speed does not depend on the weights, so each setting uses a freshly built model of the
configured size (tiny by default: the embedded default's world model, 64x64 frames). The real
simulator (Meta-World, 2 worker processes, every frame rendered as the world model makes every
frame) is measured in the same run with `benchmarks/sim_fps.py`'s loop, the best of 2 rounds.
A world-model setting is timed over `--rounds` 8-frame chunks after `--warmup` untimed ones
(frames/s over all of them; each chunk's seconds in the JSON). With `--flops`, each row also
gives the floating-point operations per frame of the whole prediction and of its VAE decoder
(counted by torch's FlopCounterMode on one chunk), the arithmetic rate the measured speed
implies, and the frame rate the decoder alone would allow at that rate: an upper bound on any
world model with that decoder.
`--precision` times each setting under each autocast precision; `--compile` adds, per
precision, the same model with its denoiser and decoder under torch.compile
(`compile_world_model`), their compilation in the warm-up chunk (so keep `--warmup` at 1 or
more with it). `--guidance` times each setting at each action-guidance scale: a scale other
than 1 builds the model with a null action and runs its pass beside every conditioned one (the
mw-* presets sample at 2); a model distilled into one pass (`world_model.distill_guidance`)
runs as scale 1. `--preset` takes the world model's other options (action tokens and the like)
from a preset, so that the model timed is that preset's.
Results: docs/benchmarks.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import harness  # noqa: E402
import torch  # noqa: E402
from sim_fps import measure as measure_sim  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from wmrl_cli.config.loading import resolve_config  # noqa: E402
from wmrl_cli.config.schema import RunConfig, SimulatorConfig  # noqa: E402
from wmrl_cli.sims.suites import get_suite  # noqa: E402
from wmrl_cli.world_models.factory import build_world_model  # noqa: E402
from wmrl_cli.world_models.interface import WorldModel  # noqa: E402

ACTION_DIM = 4  # Meta-World


@torch.no_grad()
def measure_world_model(
    model: WorldModel, cfg: RunConfig, envs: int, rounds: int, warmup: int = 1
) -> harness.Spread:
    """Seconds of each timed 8-frame chunk."""
    size, k, c = cfg.simulator.image_size, cfg.world_model.context_frames, 8
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (envs, k, size, size, 3), dtype=torch.uint8, generator=gen)
    model.reset_context(frames[:, 0], frames, torch.zeros(envs, k, ACTION_DIM))
    actions = torch.rand(envs, c, ACTION_DIM, generator=gen) * 2 - 1
    return harness.timed(lambda: model.predict(actions, generator=gen), rounds, warmup)


@torch.no_grad()
def flops_per_frame(model: WorldModel, cfg: RunConfig, envs: int) -> tuple[float, float]:
    """(FLOPs per predicted frame of a whole chunk prediction, of its VAE decoder alone)."""
    size, k, c = cfg.simulator.image_size, cfg.world_model.context_frames, 8
    frames = torch.zeros(envs, k, size, size, 3, dtype=torch.uint8)
    model.reset_context(frames[:, 0], frames, torch.zeros(envs, k, ACTION_DIM))
    counter = FlopCounterMode(display=False)
    with counter:
        model.predict(torch.zeros(envs, c, ACTION_DIM))
    per_module = counter.get_flop_counts()
    # FlopCounterMode names modules by class path; the VAE decoder is a top-level "...Decoder..."
    decoder = sum(
        sum(ops.values())
        for name, ops in per_module.items()
        if "." not in name and "Decoder" in name
    )
    return counter.get_total_flops() / (envs * c), decoder / (envs * c)


def main() -> None:
    parser = harness.parser(__doc__, rounds=3, warmup=1)
    parser.add_argument("--backend", default="opensora", choices=["opensora", "wan"])
    parser.add_argument("--size", default="tiny", choices=["tiny", "full"])
    parser.add_argument("--image-size", type=harness.positive, default=64)
    parser.add_argument("--steps", type=harness.positive, nargs="+", default=[1, 2, 4, 10])
    parser.add_argument("--envs", type=harness.positive, nargs="+", default=[10, 32, 64])
    parser.add_argument(
        "--threads", type=harness.positive, default=2, help="torch threads for the model"
    )
    parser.add_argument("--flops", action="store_true", help="count FLOPs per frame as well")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument(
        "--compile", action="store_true", help="also torch.compile the denoiser and decoder"
    )
    parser.add_argument(
        "--guidance", type=float, nargs="+", default=[1.0], help="action guidance scales"
    )
    parser.add_argument(
        "--preset", help="the world model's other options from this preset (e.g. mw-coevolve)"
    )
    args = parser.parse_args()
    resolve_config(args.preset)  # a bad preset is refused before the simulator is timed
    torch.set_num_threads(args.threads)

    n_tasks = len(get_suite("mw10").tasks)
    sim_cfg = SimulatorConfig(
        suite="mw10", image_size=args.image_size, num_envs=n_tasks, num_workers=2, max_steps=104
    )
    real = measure_sim(sim_cfg, 96, 2, render_every_step=True).high
    columns = (
        "| precision | compiled | guidance | sampling steps | envs | frames/s | ratio to real |"
    )
    if args.flops:
        columns += " GFLOP/frame | decoder GFLOP/frame | GFLOP/s | decoder-only bound, frames/s |"
    lines = [
        f"real simulator (mw10, 2 workers, {args.image_size}px): {real:.1f} frames/s",
        f"{args.backend} {args.size} world model, {args.threads} torch thread(s):",
        columns,
        "|" + "---|" * (columns.count("|") - 1),
    ]
    print("\n".join(lines), flush=True)
    result: dict = {"real_frames_per_s": real, "backend": args.backend, "rows": []}
    dtypes = {"fp32": None, "bf16": torch.bfloat16}
    compiled_too = [False, True] if args.compile else [False]
    variants = [(p, c, g) for g in args.guidance for p in args.precision for c in compiled_too]
    for steps in args.steps:
        for envs in args.envs:
            for precision, compiled, guidance in variants:
                options = {
                    "simulator.image_size": args.image_size,
                    "world_model.backend": args.backend,
                    "world_model.size": args.size,
                    "world_model.num_inference_steps": steps,
                    "world_model.action_guidance": guidance,
                }
                cfg = resolve_config(args.preset, options)
                model = build_world_model(cfg, ACTION_DIM).eval()
                model.autocast_dtype = dtypes[precision]
                if compiled:
                    model.compile_for_imagination()
                seconds = measure_world_model(model, cfg, envs, args.rounds, args.warmup)
                fps = envs * 8 / seconds.mean
                row = (
                    f"| {precision} | {'yes' if compiled else 'no'} | {guidance:g} | {steps} | "
                    f"{envs} | "
                    f"{fps:.1f} | {fps / real:.2f}x |"
                )
                if args.flops:
                    total, decoder = flops_per_frame(model, cfg, envs)
                    rate = fps * total
                    row += (
                        f" {total / 1e9:.3f} | {decoder / 1e9:.3f} | {rate / 1e9:.1f} |"
                        f" {rate / max(decoder, 1.0):.0f} |"
                    )
                print(row, flush=True)
                lines.append(row)
                result["rows"].append(
                    {
                        "precision": precision,
                        "compiled": compiled,
                        "guidance": guidance,
                        "sampling_steps": steps,
                        "envs": envs,
                        "frames_per_s": fps,
                        "chunk_seconds": seconds.as_dict(),
                    }
                )
                harness.write(args, "wm_fps", result, "\n".join(lines) + "\n", echo=False)


if __name__ == "__main__":
    harness.main(main)
