"""Simulator cost of GRPO's resets: env steps per second over whole updates whose rollouts
each reset 32 Meta-World slots to a new mix of tasks, as varied-outcome GRPO in the simulator
does (8 groups of 4 per rollout, 4 rollouts per update), rendering chunk ends only.

    python benchmarks/sim_grpo_resets.py [--rounds 2] [--warmup 1] [--steps 96]
        [--out RESULT.json] [--markdown TABLE.md]

One process, one thread: the work of one simulator worker. Each round is one update; the
`--warmup` updates (the first builds the environments) are not timed. Prints env steps/s over
the timed updates and environments built per timed update (the median and spread of the
updates' rates in the JSON); pair two checkouts side by side to compare implementations.
Results: docs/benchmarks.md.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import harness  # noqa: E402
import numpy as np  # noqa: E402

from wmrl_cli.envs.reset_sampler import varied_outcome_probability  # noqa: E402
from wmrl_cli.sims.metaworld_envs import MetaWorldEnvs  # noqa: E402
from wmrl_cli.sims.suites import get_suite  # noqa: E402

# Per-task success of the mw-sft base at temperature 1.0 (docs/results.md), mw10 order.
BASE_SUCCESS = np.array([0.0, 0.0, 0.4, 0.1, 0.05, 0.2, 0.65, 0.8, 0.05, 0.05])


def main() -> None:
    parser = harness.parser(__doc__, rounds=2, warmup=1)
    parser.add_argument("--steps", type=harness.positive, default=96, help="env steps a rollout")
    parser.add_argument("--num-envs", type=harness.positive, default=32)
    parser.add_argument("--group-size", type=harness.positive, default=4)
    parser.add_argument("--rollouts", type=harness.positive, default=4, help="rollouts an update")
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
    steps = args.rollouts * args.num_envs * chunks * 8  # env steps an update

    def update() -> tuple[float, int]:
        start, built = time.perf_counter(), builds
        for _ in range(args.rollouts):
            tasks = rng.choice(n_tasks, args.num_envs // args.group_size, p=weights)
            offsets = rng.integers(0, 1000, len(tasks))
            init_ids = np.repeat(tasks + n_tasks * offsets, args.group_size)
            envs.reset([int(i) for i in init_ids], None)
            for _ in range(chunks):
                envs.chunk_step(rng.uniform(-1, 1, (args.num_envs, 8, 4)))
        return time.perf_counter() - start, builds - built

    try:
        timed = harness.repeat(update, args.rounds, args.warmup)  # warm-up: builds the pool
    finally:
        envs.close()
    seconds = sum(s for s, _ in timed)
    built = sum(b for _, b in timed) / args.rounds
    rate = harness.Spread.of([steps / s for s, _ in timed])
    line = (
        f"{args.rollouts} rollouts x {args.num_envs} envs (groups of {args.group_size}) x "
        f"{chunks * 8} steps per update, {args.rounds} timed updates: "
        f"{steps * args.rounds / seconds:.1f} env steps/s, "
        f"{built:.1f} environments built per update"
    )
    result = {
        "env_steps_per_s": steps * args.rounds / seconds,
        "env_steps_per_s_per_update": rate.as_dict(),
        "environments_built_per_update": built,
        "rollouts": args.rollouts,
        "envs": args.num_envs,
        "group_size": args.group_size,
        "steps": chunks * 8,
    }
    harness.write(args, "sim_grpo_resets", result, line)


if __name__ == "__main__":
    harness.main(main)
