"""The cost of a confirmed verdict (`reward_model.confirm_draws=1`) in RL's imagined rollout.

    python benchmarks/confirm_draws.py --preset RUN_CONFIG.yaml [--policy DIR] [--envs 32]
        [--repeats 3]

RUN_CONFIG is a train-policy config in imagination (a run folder's config.yaml will do); its
world model, reward model, policy (or `--policy`) and reset set are loaded as RL loads them.
Each repeat collects one rollout of `--envs` episodes, as one GRPO step does, in three arms
with the same starts and seeds, in rotating order:
- "one draw": no confirmation (`confirm_draws=0`);
- "lazy": the confirming draw imagines an episode from the chunk the first draw calls it
  (catching up on its chunks so far), as the imagined env does;
- "every chunk": the confirming draw imagines every running episode at every chunk (the
  behaviour before 2026-11-27).
Printed per arm: wall seconds per rollout, world-model seconds, env-chunks the world model
imagined (its cost in batch rows), calls; then the ratios of medians. Results:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402
import yaml  # noqa: E402
from rollout_timing import timed_rollout  # noqa: E402

from wmrl_cli.config.loading import validate_config  # noqa: E402
from wmrl_cli.envs.reset_sampler import GroupResetSampler  # noqa: E402
from wmrl_cli.rl.assembly import build_imagined_env, load_policy  # noqa: E402
from wmrl_cli.rl.inputs import resolve_inputs  # noqa: E402

ARMS = ("one draw", "lazy", "every chunk")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, help="a train-policy config in imagination")
    parser.add_argument("--policy", default=None, help="a policy folder in place of the config's")
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with open(args.preset) as f:
        cfg = validate_config(yaml.safe_load(f))
    if args.policy:
        cfg.policy.name = args.policy
    cfg.reward_model.confirm_draws = 1
    inputs = resolve_inputs(cfg)
    env = build_imagined_env(cfg, args.envs, "cpu", inputs)
    policy = load_policy(inputs, "cpu")
    alg = cfg.algorithm
    sampler = GroupResetSampler(len(env.reset_set), args.envs, alg.group_size, seed=0)
    max_chunks = -(-alg.max_episode_steps // cfg.simulator.chunk_size)

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

    results: dict[str, list[tuple[float, float, int, int]]] = {arm: [] for arm in ARMS}
    for repeat in range(args.repeats):
        init_ids = sampler.sample()
        for arm in ARMS[repeat % 3 :] + ARMS[: repeat % 3]:
            env.confirm_draws = 0 if arm == "one draw" else 1
            env._confirmed = every_chunk if arm == "every chunk" else lazy
            rows["n"] = 0
            wall, world_model, rollout = timed_rollout(
                env, policy, init_ids, max_chunks, cfg, repeat
            )
            calls = int(rollout.success.sum())
            results[arm].append((wall, world_model, rows["n"], calls))
            print(
                f"repeat {repeat} {arm}: {wall:.1f} s, world model {world_model:.1f} s, "
                f"{rows['n']} env-chunks imagined, {calls} calls",
                flush=True,
            )

    medians = {arm: statistics.median(r[0] for r in rs) for arm, rs in results.items()}
    for arm, rs in results.items():
        print(
            f"{arm}: median {medians[arm]:.1f} s per rollout of {args.envs}, world model "
            f"{statistics.median(r[1] for r in rs):.1f} s, env-chunks "
            f"{statistics.median(r[2] for r in rs):.0f}"
        )
    base = medians["one draw"]
    print(
        f"lazy / one draw: {medians['lazy'] / base:.2f}; every chunk / one draw: "
        f"{medians['every chunk'] / base:.2f}; lazy / every chunk: "
        f"{medians['lazy'] / medians['every chunk']:.2f}"
    )


if __name__ == "__main__":
    main()
