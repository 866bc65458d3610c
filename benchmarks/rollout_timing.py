"""One GRPO-sized imagined rollout, timed: shared by the imagined-rollout benchmarks."""

from __future__ import annotations

import time

import harness
import torch

from wmrl_cli.rl.buffer import Rollout, collect_rollout


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
