"""Simulator throughput: env steps per second, one worker vs two, rendering every step vs
only the frames a policy observes (chunk ends), in one run.

    python benchmarks/sim_fps.py [--suite mw10] [--image-size 64] [--steps 96] [--rounds 2]
        [--warmup 0] [--out RESULT.json] [--markdown TABLE.md]

Each setting steps the same batch (one env per task, random actions) for the same number of
steps after a warm-up reset (which builds the environments and renderers), in `--rounds`
rounds after `--warmup` untimed ones; the best round is reported (load from other processes
only ever lowers a figure), the median and the spread in the JSON. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import harness  # noqa: E402
import numpy as np  # noqa: E402

from wmrl_cli.config.schema import SimulatorConfig  # noqa: E402
from wmrl_cli.sims.metaworld_sim import MetaWorldSim  # noqa: E402
from wmrl_cli.sims.suites import get_suite  # noqa: E402


def measure(
    cfg: SimulatorConfig, steps: int, rounds: int, render_every_step: bool, warmup: int = 0
) -> harness.Spread:
    """Env steps per second of each timed round."""
    rng = np.random.default_rng(0)
    init_ids = list(range(cfg.num_envs))
    chunks = steps // cfg.chunk_size

    def one_round() -> float:
        sim.reset(init_ids)
        start = time.perf_counter()
        for _ in range(chunks):
            actions = rng.uniform(-1, 1, (cfg.num_envs, cfg.chunk_size, 4))
            sim.chunk_step(actions)
        return cfg.num_envs * chunks * cfg.chunk_size / (time.perf_counter() - start)

    with MetaWorldSim(cfg, render_every_step=render_every_step) as sim:
        sim.reset(init_ids)  # builds the environments and renderers: not timed
        return harness.Spread.of(harness.repeat(one_round, rounds, warmup))


def main() -> None:
    parser = harness.parser(__doc__, rounds=2, warmup=0)
    parser.add_argument("--suite", default="mw10")
    parser.add_argument("--image-size", type=harness.positive, default=64)
    parser.add_argument("--steps", type=harness.positive, default=96)
    args = parser.parse_args()
    n_tasks = len(get_suite(args.suite).tasks)
    results: dict[tuple[bool, int], harness.Spread] = {}
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
            results[every, workers] = measure(cfg, args.steps, args.rounds, every, args.warmup)
    best = {key: spread.high for key, spread in results.items()}
    lines = [
        f"suite {args.suite}, {n_tasks} envs, {args.image_size}x{args.image_size}, "
        f"{args.steps} steps in chunks of 8, best of {args.rounds}"
    ]
    for (every, workers), fps in best.items():
        what = "every step rendered" if every else "chunk ends rendered"
        lines.append(f"  {workers} worker(s), {what}: {fps:7.1f} env steps/s")
    lines.append(f"  two workers vs one (every step): {best[True, 2] / best[True, 1]:.2f}x")
    for workers in (1, 2):
        ratio = best[False, workers] / best[True, workers]
        lines.append(f"  chunk ends vs every step, {workers} worker(s): {ratio:.2f}x")
    result = {
        "suite": args.suite,
        "envs": n_tasks,
        "image_size": args.image_size,
        "steps": args.steps,
        "env_steps_per_s": [
            {"render_every_step": every, "workers": workers, **spread.as_dict()}
            for (every, workers), spread in results.items()
        ],
    }
    harness.write(args, "sim_fps", result, "\n".join(lines))


if __name__ == "__main__":
    harness.main(main)
