"""Shared fixtures: a small Meta-World setting and a few recorded expert episodes."""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402
import torch  # noqa: E402

from wmrl_cli.config.schema import SimulatorConfig  # noqa: E402

# Tiny models gain nothing from intra-op threads, and on a 2-core machine shared with simulator
# workers oversubscribed threads make them an order of magnitude slower.
torch.set_num_threads(1)


def small_sim_config(**overrides) -> SimulatorConfig:
    base = dict(suite="mw3", image_size=32, num_envs=3, num_workers=0, max_steps=48, seed=7)
    base.update(overrides)
    return SimulatorConfig(**base)


@pytest.fixture(scope="session")
def expert_episodes():
    """One expert episode per mw3 task (in-process simulator), recorded with sim states."""
    from wmrl_cli.envs.runner import iter_episodes
    from wmrl_cli.sims.experts import ExpertPolicy
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    cfg = small_sim_config(max_steps=120)
    with MetaWorldSim(cfg) as sim:
        policy = ExpertPolicy(sim.suite)
        return list(
            iter_episodes(
                sim,
                policy,
                [0, 1, 2],
                chunk_size=cfg.chunk_size,
                seed_of=lambda i: cfg.seed + i,
                suite=cfg.suite,
            )
        )
