"""RL's imagined rollout with and without ended episodes skipping the world model, side by side.

    python benchmarks/imagined_rollout.py --preset RUN_CONFIG.yaml [--envs 32] [--repeats 3]

RUN_CONFIG is a train-policy config in imagination (a run folder's config.yaml will do): its
world model, reward model, policy and reset set are loaded as RL loads them. Each repeat
collects one rollout of `--envs` episodes, as one GRPO step does (`collect_rollout`, the same
starts and policy seed in both arms), once with `WorldModel.predict_active` (ended episodes
cost nothing) and once with every env predicted at every chunk (the behaviour before it), in
alternating order. Printed per arm: wall seconds per rollout (median), world-model seconds,
mean episode length; and the ratio of medians. Results: docs/benchmarks.md.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, help="a train-policy config in imagination")
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with open(args.preset) as f:
        cfg = validate_config(yaml.safe_load(f))
    inputs = resolve_inputs(cfg)
    env = build_imagined_env(cfg, args.envs, "cpu", inputs)
    policy = load_policy(inputs, "cpu")
    alg = cfg.algorithm
    sampler = GroupResetSampler(len(env.reset_set), args.envs, alg.group_size, seed=0)
    max_chunks = -(-alg.max_episode_steps // cfg.simulator.chunk_size)
    skip_ended = env.world_model.predict_active
    predict_all = lambda actions, active, generator=None: env.world_model.predict(  # noqa: E731
        actions, generator
    )

    results: dict[str, list[tuple[float, float, float]]] = {"skip ended": [], "predict all": []}
    for repeat in range(args.repeats):
        init_ids = sampler.sample()
        arms = list(results) if repeat % 2 == 0 else list(results)[::-1]
        for arm in arms:
            env.world_model.predict_active = skip_ended if arm == "skip ended" else predict_all
            wall, world_model, rollout = timed_rollout(
                env, policy, init_ids, max_chunks, cfg, repeat
            )
            length = float(rollout.episode_len.float().mean())
            results[arm].append((wall, world_model, length))
            print(
                f"repeat {repeat} {arm}: {wall:.1f} s, world model {world_model:.1f} s, "
                f"mean episode length {length:.1f}",
                flush=True,
            )

    medians = {arm: statistics.median(r[0] for r in rows) for arm, rows in results.items()}
    for arm, rows in results.items():
        print(
            f"{arm}: median {medians[arm]:.1f} s per rollout of {args.envs}, world model "
            f"{statistics.median(r[1] for r in rows):.1f} s, mean length "
            f"{statistics.mean(r[2] for r in rows):.1f}"
        )
    print(f"skip ended / predict all: {medians['skip ended'] / medians['predict all']:.2f}")


if __name__ == "__main__":
    main()
