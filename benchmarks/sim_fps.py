"""Simulator throughput: env steps per second, one worker vs two, rendering every step vs
only the frames a policy observes (chunk ends), in one run.

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


def measure(cfg: SimulatorConfig, steps: int, repeats: int, render_every_step: bool) -> float:
    rng = np.random.default_rng(0)
    init_ids = list(range(cfg.num_envs))
    best = 0.0
    with MetaWorldSim(cfg, render_every_step=render_every_step) as sim:
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
    for every in (True, False):
        for workers in (1, 2):
            cfg = SimulatorConfig(
                suite=args.suite,
                image_size=args.image_size,
                num_envs=n_tasks,
                num_workers=workers,
                max_steps=args.steps + 8,
                chunk_size=8,
            )
            results[every, workers] = measure(cfg, args.steps, args.repeats, every)
    print(
        f"suite {args.suite}, {n_tasks} envs, {args.image_size}x{args.image_size}, "
        f"{args.steps} steps in chunks of 8, best of {args.repeats}"
    )
    for (every, workers), fps in results.items():
        what = "every step rendered" if every else "chunk ends rendered"
        print(f"  {workers} worker(s), {what}: {fps:7.1f} env steps/s")
    print(f"  two workers vs one (every step): {results[True, 2] / results[True, 1]:.2f}x")
    for workers in (1, 2):
        ratio = results[False, workers] / results[True, workers]
        print(f"  chunk ends vs every step, {workers} worker(s): {ratio:.2f}x")


if __name__ == "__main__":
    main()
