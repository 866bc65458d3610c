"""Co-evolve runs its stages one after another in one process: RL with bf16 autocast, the
world model's training without, in either order (a resumed run may start with either).
Accelerate keeps one process-wide state; each stage's Accelerator has its own settings."""

from __future__ import annotations

import pytest
from accelerate.state import AcceleratorState

from wmrl_cli.config import resolve_config
from wmrl_cli.jobs.train_policy import make_accelerator as rl_accelerator
from wmrl_cli.training.world_model_trainer import make_accelerator as wm_accelerator


@pytest.fixture(autouse=True)
def _fresh_state():
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("first", ["rl", "world model"])
def test_each_stage_gets_its_own_mixed_precision_in_either_order(first: str) -> None:
    cfg = resolve_config("mw-coevolve", overrides=["training.bf16=true"])
    stages = {"rl": lambda: rl_accelerator(cfg), "world model": lambda: wm_accelerator(cfg)}
    expected = {"rl": "bf16", "world model": "no"}
    order = [first, *(name for name in stages if name != first)] * 2
    for name in order:
        assert stages[name]().mixed_precision == expected[name], order
