"""Imagined vs real frames per second, side by side in one run, over world-model settings.

    python benchmarks/wm_fps.py [--backend opensora] [--steps 1 2 4 10] [--envs 10 32 64]
                                [--threads 2] [--chunks 3]

Speed does not depend on the weights, so each setting uses a freshly built model of the
configured size (tiny by default: the embedded default's world model, 64x64 frames). The real
simulator (Meta-World, 2 worker processes) is measured in the same run with
`benchmarks/sim_fps.py`'s loop. A world-model setting is timed over `--chunks` 8-frame chunks
after one warm-up chunk. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402
from sim_fps import measure as measure_sim  # noqa: E402

from wmrl_cli.config.schema import RunConfig, SimulatorConfig  # noqa: E402
from wmrl_cli.sims.suites import get_suite  # noqa: E402
from wmrl_cli.training.world_model_trainer import build_world_model  # noqa: E402

ACTION_DIM = 4  # Meta-World


@torch.no_grad()
def measure_world_model(cfg: RunConfig, envs: int, chunks: int) -> float:
    model = build_world_model(cfg, ACTION_DIM).eval()
    size, k, c = cfg.simulator.image_size, cfg.world_model.context_frames, 8
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (envs, k, size, size, 3), dtype=torch.uint8, generator=gen)
    model.reset_context(frames[:, 0], frames, torch.zeros(envs, k, ACTION_DIM))
    actions = torch.rand(envs, c, ACTION_DIM, generator=gen) * 2 - 1
    model.predict(actions, generator=gen)  # warm-up
    start = time.perf_counter()
    for _ in range(chunks):
        model.predict(actions, generator=gen)
    return envs * c * chunks / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="opensora", choices=["opensora", "wan"])
    parser.add_argument("--size", default="tiny", choices=["tiny", "full"])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4, 10])
    parser.add_argument("--envs", type=int, nargs="+", default=[10, 32, 64])
    parser.add_argument("--threads", type=int, default=2, help="torch threads for the model")
    parser.add_argument("--chunks", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    n_tasks = len(get_suite("mw10").tasks)
    sim_cfg = SimulatorConfig(
        suite="mw10", image_size=args.image_size, num_envs=n_tasks, num_workers=2, max_steps=104
    )
    real = measure_sim(sim_cfg, steps=96, repeats=2)
    print(f"real simulator (mw10, 2 workers, {args.image_size}px): {real:.1f} frames/s")
    print(f"{args.backend} {args.size} world model, {args.threads} torch thread(s):")
    print("| sampling steps | envs | frames/s | ratio to real |")
    print("|---|---|---|---|")
    for steps in args.steps:
        for envs in args.envs:
            cfg = RunConfig.model_validate(
                {
                    "simulator": {"image_size": args.image_size},
                    "world_model": {
                        "backend": args.backend,
                        "size": args.size,
                        "num_inference_steps": steps,
                    },
                }
            )
            fps = measure_world_model(cfg, envs, args.chunks)
            print(f"| {steps} | {envs} | {fps:.1f} | {fps / real:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
