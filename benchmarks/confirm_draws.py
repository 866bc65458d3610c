"""The cost of a confirmed verdict (`reward_model.confirm_draws=1`) in RL's imagined rollout.

    python benchmarks/confirm_draws.py --preset RUN_CONFIG.yaml [--policy DIR] [--envs 32]
        [--rounds 3] [--warmup 0] [--out RESULT.json] [--markdown TABLE.md]

RUN_CONFIG is a train-policy config in imagination (a run folder's config.yaml will do); its
world model, reward model, policy (or `--policy`) and reset set are loaded as RL loads them.
Each round collects one rollout of `--envs` episodes, as one GRPO step does, in three arms
with the same starts and seeds, in rotating order, after `--warmup` untimed rollouts:
- "one draw": no confirmation (`confirm_draws=0`);
- "lazy": the confirming draw imagines an episode from the chunk the first draw calls it
  (catching up on its chunks so far), as the imagined env does;
- "every chunk": the confirming draw imagines every running episode at every chunk (the
  behaviour before 2026-11-27).
Printed per arm: wall seconds per rollout, world-model seconds, env-chunks the world model
imagined (its cost in batch rows), calls; then the ratios of medians (each arm's spread in the
JSON). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import os
import statistics

os.environ.setdefault("MUJOCO_GL", "egl")

import harness  # noqa: E402
import torch  # noqa: E402
from rollout_timing import (  # noqa: E402
    arm_seconds,
    load_rollout_setup,
    rollout_parser,
    timed_rollout,
)

ARMS = ("one draw", "lazy", "every chunk")


def main() -> None:
    parser = rollout_parser(__doc__, rounds=3, warmup=0)
    parser.add_argument("--policy", default=None, help="a policy folder in place of the config's")
    args = parser.parse_args()

    def edit(cfg) -> None:
        if args.policy:
            cfg.policy.name = args.policy
        cfg.reward_model.confirm_draws = 1

    setup = load_rollout_setup(args, edit)
    cfg, env, policy, sampler = setup.cfg, setup.env, setup.policy, setup.sampler
    max_chunks = setup.max_chunks

    rows = {"n": 0}
    predict_active = env.world_model.predict_active

    def counted(actions, active, generator=None):
        rows["n"] += int(torch.as_tensor(active).sum())
        return predict_active(actions, active, generator=generator)

    env.world_model.predict_active = counted
    lazy = env._confirmed
    every_chunk = lambda actions, active, valid, called: lazy(  # noqa: E731
        actions, active, valid, active
    )  # every running episode "called": each draw follows it from its first chunk

    for warm in range(args.warmup):  # untimed: the first chunks' one-time costs
        timed_rollout(env, policy, sampler.sample(), max_chunks, cfg, -1 - warm)
    results: dict[str, list[tuple[float, float, int, int]]] = {arm: [] for arm in ARMS}
    for round_ in range(args.rounds):
        init_ids = sampler.sample()
        for arm in ARMS[round_ % 3 :] + ARMS[: round_ % 3]:
            env.confirm_draws = 0 if arm == "one draw" else 1
            env._confirmed = every_chunk if arm == "every chunk" else lazy
            rows["n"] = 0
            wall, world_model, rollout = timed_rollout(
                env, policy, init_ids, max_chunks, cfg, round_
            )
            calls = int(rollout.success.sum())
            results[arm].append((wall, world_model, rows["n"], calls))
            print(
                f"round {round_} {arm}: {wall:.1f} s, world model {world_model:.1f} s, "
                f"{rows['n']} env-chunks imagined, {calls} calls",
                flush=True,
            )

    seconds = {arm: arm_seconds(rs) for arm, rs in results.items()}
    medians = {arm: spread["wall_s"].median for arm, spread in seconds.items()}
    lines = [
        f"{arm}: median {medians[arm]:.1f} s per rollout of {args.envs}, world model "
        f"{statistics.median(r[1] for r in rs):.1f} s, env-chunks "
        f"{statistics.median(r[2] for r in rs):.0f}"
        for arm, rs in results.items()
    ]
    base = medians["one draw"]
    lines.append(
        f"lazy / one draw: {medians['lazy'] / base:.2f}; every chunk / one draw: "
        f"{medians['every chunk'] / base:.2f}; lazy / every chunk: "
        f"{medians['lazy'] / medians['every chunk']:.2f}"
    )
    result = {
        "envs": args.envs,
        "arms": {
            arm: {
                **{key: spread.as_dict() for key, spread in seconds[arm].items()},
                "env_chunks": statistics.median(r[2] for r in rs),
                "calls": [r[3] for r in rs],
            }
            for arm, rs in results.items()
        },
    }
    harness.write(args, "confirm_draws", result, "\n".join(lines))


if __name__ == "__main__":
    harness.main(main)
