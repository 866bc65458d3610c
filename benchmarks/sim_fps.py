"""Simulator throughput: rendered frames per second, one worker vs two, in one run.

    python benchmarks/sim_fps.py [--suite mw10] [--image-size 64] [--steps 96] [--repeats 2]

Each setting steps the same batch (one env per task, random actions) for the same number of
steps after a warm-up reset; the best of the repeats is reported. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from wmrl_cli.config.schema import SimulatorConfig  # noqa: E402
from wmrl_cli.sims.metaworld_sim import MetaWorldSim  # noqa: E402
from wmrl_cli.sims.suites import get_suite  # noqa: E402


def measure(cfg: SimulatorConfig, steps: int, repeats: int) -> float:
    rng = np.random.default_rng(0)
    init_ids = list(range(cfg.num_envs))
    best = 0.0
    with MetaWorldSim(cfg) as sim:
        sim.reset(init_ids)  # builds the environments and renderers: not timed
        for _ in range(repeats):
            sim.reset(init_ids)
            start = time.perf_counter()
            for _ in range(steps // cfg.chunk_size):
                actions = rng.uniform(-1, 1, (cfg.num_envs, cfg.chunk_size, 4))
                sim.chunk_step(actions)
            elapsed = time.perf_counter() - start
            best = max(best, cfg.num_envs * (steps // cfg.chunk_size) * cfg.chunk_size / elapsed)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="mw10")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    n_tasks = len(get_suite(args.suite).tasks)
    results = {}
    for workers in (1, 2):
        cfg = SimulatorConfig(
            suite=args.suite,
            image_size=args.image_size,
            num_envs=n_tasks,
            num_workers=workers,
            max_steps=args.steps + 8,
            chunk_size=8,
        )
        results[workers] = measure(cfg, args.steps, args.repeats)
    print(
        f"suite {args.suite}, {n_tasks} envs, {args.image_size}x{args.image_size}, "
        f"{args.steps} steps, best of {args.repeats}"
    )
    for workers, fps in results.items():
        print(f"  {workers} worker(s): {fps:7.1f} frames/s (physics step + render)")
    print(f"  speed-up 2 vs 1: {results[2] / results[1]:.2f}x")


if __name__ == "__main__":
    main()
