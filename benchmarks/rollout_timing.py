"""One GRPO-sized imagined rollout, timed: shared by the imagined-rollout benchmarks."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import harness
import torch
import yaml

from wmrl_cli.config.loading import validate_config
from wmrl_cli.config.schema import RunConfig
from wmrl_cli.envs.reset_sampler import GroupResetSampler
from wmrl_cli.jobs.assembly import build_imagined_env, load_policy
from wmrl_cli.jobs.inputs import Inputs, resolve_inputs
from wmrl_cli.rl.buffer import Rollout, collect_rollout


def rollout_parser(doc: str, rounds: int, warmup: int) -> argparse.ArgumentParser:
    """The harness's parser with what every imagined-rollout benchmark reads: a train-policy
    config in imagination, the envs per rollout and the torch threads."""
    parser = harness.parser(doc, rounds=rounds, warmup=warmup)
    parser.add_argument("--preset", required=True, help="a train-policy config in imagination")
    parser.add_argument("--envs", type=harness.positive, default=32)
    parser.add_argument("--threads", type=harness.positive, default=2)
    return parser


@dataclass
class RolloutSetup:
    """What RL loads for its rollouts, as train-policy loads it, on the CPU."""

    cfg: RunConfig
    inputs: Inputs
    env: object  # the imagined env (ImaginedEnv)
    policy: object
    sampler: GroupResetSampler  # GRPO's groups of starts, seed 0
    max_chunks: int

    def another_env(self):
        """A second imagined env of the same config and inputs (a benchmark's other arm)."""
        return build_imagined_env(self.cfg, self.env.num_envs, "cpu", self.inputs)


def load_rollout_setup(
    args: argparse.Namespace, edit: Callable[[RunConfig], None] | None = None
) -> RolloutSetup:
    """`args` from rollout_parser; `edit` changes the config before its inputs resolve."""
    torch.set_num_threads(args.threads)
    with open(args.preset) as f:
        cfg = validate_config(yaml.safe_load(f))
    if edit is not None:
        edit(cfg)
    inputs = resolve_inputs(cfg)
    env = build_imagined_env(cfg, args.envs, "cpu", inputs)
    alg = cfg.algorithm
    return RolloutSetup(
        cfg,
        inputs,
        env,
        load_policy(inputs, "cpu"),
        GroupResetSampler(len(env.reset_set), args.envs, alg.group_size, seed=0),
        -(-alg.max_episode_steps // cfg.simulator.chunk_size),
    )


def timed_rollout(
    env, policy, init_ids, max_chunks: int, cfg, seed: int
) -> tuple[float, float, Rollout]:
    """Collect one rollout as a GRPO step does, the world model and the policy seeded with
    `seed`: (wall seconds, the world model's seconds, the rollout)."""
    env.generator.manual_seed(seed)
    env.pop_timings()
    start = time.perf_counter()
    rollout = collect_rollout(
        env,
        policy,
        init_ids,
        max_chunks,
        cfg.policy.temperature,
        cfg.policy.top_k,
        torch.Generator().manual_seed(seed),
    )
    wall = time.perf_counter() - start
    return wall, env.pop_timings()["world_model"], rollout


def arm_seconds(rows: list[tuple]) -> dict[str, harness.Spread]:
    """An arm's rounds of (wall seconds, world-model seconds, ...): each as a Spread."""
    return {
        "wall_s": harness.Spread.of([r[0] for r in rows]),
        "world_model_s": harness.Spread.of([r[1] for r in rows]),
    }


def summarize_arms(
    results: dict[str, list[tuple[float, float, float]]], envs: int
) -> tuple[dict[str, float], list[str], dict[str, dict]]:
    """Each arm's rounds of (wall s, world-model s, mean episode length): the median wall
    seconds per arm, a printed line per arm, and the arms as the JSON records them."""
    seconds = {arm: arm_seconds(rows) for arm, rows in results.items()}
    medians = {arm: spread["wall_s"].median for arm, spread in seconds.items()}
    lines = [
        f"{arm}: median {medians[arm]:.1f} s per rollout of {envs}, world model "
        f"{statistics.median(r[1] for r in rows):.1f} s, mean length "
        f"{statistics.mean(r[2] for r in rows):.1f}"
        for arm, rows in results.items()
    ]
    arms = {
        arm: {
            **{key: spread.as_dict() for key, spread in seconds[arm].items()},
            "mean_episode_length": statistics.mean(r[2] for r in rows),
        }
        for arm, rows in results.items()
    }
    return medians, lines, arms
