"""A small Meta-World setting for the tests that build a simulator themselves."""

from __future__ import annotations

from wmrl_cli.config.schema import SimulatorConfig


def small_sim_config(**overrides) -> SimulatorConfig:
    """mw3 at 32x32, three envs in-process, episodes of at most 48 steps, seed 7."""
    base = dict(suite="mw3", image_size=32, num_envs=3, num_workers=0, max_steps=48, seed=7)
    base.update(overrides)
    return SimulatorConfig(**base)
