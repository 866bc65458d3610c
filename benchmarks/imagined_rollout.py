"""RL's imagined rollout with and without ended episodes skipping the world model, side by side.

    python benchmarks/imagined_rollout.py --preset RUN_CONFIG.yaml [--envs 32] [--rounds 3]
        [--warmup 0] [--out RESULT.json] [--markdown TABLE.md]

RUN_CONFIG is a train-policy config in imagination (a run folder's config.yaml will do): its
world model, reward model, policy and reset set are loaded as RL loads them. Each round
collects one rollout of `--envs` episodes, as one GRPO step does (`collect_rollout`, the same
starts and policy seed in both arms), once with `WorldModel.predict_active` (ended episodes
cost nothing) and once with every env predicted at every chunk (the behaviour before it), in
alternating order, after `--warmup` untimed rollouts. Printed per arm: wall seconds per rollout
(median), world-model seconds, mean episode length; and the ratio of medians (each arm's spread
in the JSON). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import harness  # noqa: E402
from rollout_timing import (  # noqa: E402
    load_rollout_setup,
    rollout_parser,
    summarize_arms,
    timed_rollout,
)


def main() -> None:
    args = rollout_parser(__doc__, rounds=3, warmup=0).parse_args()
    setup = load_rollout_setup(args)
    cfg, env, policy, sampler = setup.cfg, setup.env, setup.policy, setup.sampler
    max_chunks = setup.max_chunks
    skip_ended = env.world_model.predict_active
    predict_all = lambda actions, active, generator=None: env.world_model.predict(  # noqa: E731
        actions, generator
    )

    for warm in range(args.warmup):  # untimed: the first chunks' one-time costs
        timed_rollout(env, policy, sampler.sample(), max_chunks, cfg, -1 - warm)
    results: dict[str, list[tuple[float, float, float]]] = {"skip ended": [], "predict all": []}
    for round_ in range(args.rounds):
        init_ids = sampler.sample()
        arms = list(results) if round_ % 2 == 0 else list(results)[::-1]
        for arm in arms:
            env.world_model.predict_active = skip_ended if arm == "skip ended" else predict_all
            wall, world_model, rollout = timed_rollout(
                env, policy, init_ids, max_chunks, cfg, round_
            )
            length = float(rollout.episode_len.float().mean())
            results[arm].append((wall, world_model, length))
            print(
                f"round {round_} {arm}: {wall:.1f} s, world model {world_model:.1f} s, "
                f"mean episode length {length:.1f}",
                flush=True,
            )

    medians, lines, arms = summarize_arms(results, args.envs)
    ratio = medians["skip ended"] / medians["predict all"]
    lines.append(f"skip ended / predict all: {ratio:.2f}")
    result = {
        "envs": args.envs,
        "arms": arms,
        "skip_ended_over_predict_all": ratio,
    }
    harness.write(args, "imagined_rollout", result, "\n".join(lines))


if __name__ == "__main__":
    harness.main(main)
