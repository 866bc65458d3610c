"""Simulator cost of GRPO's resets: env steps per second over whole updates whose rollouts
each reset 32 Meta-World slots to a new mix of tasks, as varied-outcome GRPO in the simulator
does (8 groups of 4 per rollout, 4 rollouts per update), rendering chunk ends only.

    python benchmarks/sim_grpo_resets.py [--updates 2] [--steps 96]

One process, one thread: the work of one simulator worker. The first update (building the
environments) is not timed. Prints env steps/s and environments built per timed update; pair
two checkouts side by side to compare implementations. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np  # noqa: E402

from wmrl_cli.envs.reset_sampler import varied_outcome_probability  # noqa: E402
from wmrl_cli.sims.metaworld_envs import MetaWorldEnvs  # noqa: E402
from wmrl_cli.sims.suites import get_suite  # noqa: E402

# Per-task success of the mw-sft base at temperature 1.0 (docs/results.md), mw10 order.
BASE_SUCCESS = np.array([0.0, 0.0, 0.4, 0.1, 0.05, 0.2, 0.65, 0.8, 0.05, 0.05])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=2, help="timed updates")
    parser.add_argument("--steps", type=int, default=96, help="env steps per rollout")
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per update")
    args = parser.parse_args()
    suite = get_suite("mw10")
    n_tasks = len(suite.tasks)
    weights = varied_outcome_probability(BASE_SUCCESS, args.group_size) + 0.05
    weights /= weights.sum()
    rng = np.random.default_rng(0)
    envs = MetaWorldEnvs(suite, args.num_envs, 64, "corner", args.steps + 8, False, 0, False)
    builds = 0
    make = envs._make

    def counting_make(task_id: int):
        nonlocal builds
        builds += 1
        return make(task_id)

    envs._make = counting_make
    chunks = args.steps // 8
    try:
        timed_steps, timed_s, timed_builds = 0, 0.0, 0
        for update in range(1 + args.updates):
            start, built = time.perf_counter(), builds
            for _ in range(args.rollouts):
                tasks = rng.choice(n_tasks, args.num_envs // args.group_size, p=weights)
                offsets = rng.integers(0, 1000, len(tasks))
                init_ids = np.repeat(tasks + n_tasks * offsets, args.group_size)
                envs.reset([int(i) for i in init_ids], None)
                for _ in range(chunks):
                    envs.chunk_step(rng.uniform(-1, 1, (args.num_envs, 8, 4)))
            if update:  # the first update builds the pool: not timed
                timed_s += time.perf_counter() - start
                timed_steps += args.rollouts * args.num_envs * chunks * 8
                timed_builds += builds - built
        print(
            f"{args.rollouts} rollouts x {args.num_envs} envs (groups of {args.group_size}) x "
            f"{chunks * 8} steps per update, {args.updates} timed updates: "
            f"{timed_steps / timed_s:.1f} env steps/s, "
            f"{timed_builds / args.updates:.1f} environments built per update"
        )
    finally:
        envs.close()


if __name__ == "__main__":
    main()
