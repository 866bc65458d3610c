"""The plan's budget (memory/budget.py `device_budget`): a GPU's memory less a stated
reserve for what the plan cannot see, read without a CUDA context in the launcher; a CPU run
against the host memory available."""

from __future__ import annotations

import sys

import pytest
import torch

from wmrl_cli.config import resolve_config
from wmrl_cli.errors import ConfigError
from wmrl_cli.memory.budget import device_budget, gpu_reserve, sft_memory_plan
from wmrl_cli.policies.config import tiny_config


def test_a_gpu_budget_keeps_a_reserve_for_what_the_plan_cannot_see() -> None:
    assert gpu_reserve(80.0, None) == pytest.approx(5.0)  # 1 GiB + 5%
    assert gpu_reserve(80.0, 2.0) == 2.0  # training.memory_reserve_gb
    cfg = resolve_config(overrides=["training.memory_budget_gb=80"])
    budget = (75.0, "training.memory_budget_gb=80 less a 5.0 GiB reserve")
    assert device_budget(cfg, "cpu") == budget
    cfg.training.memory_budget_gb = 0.5  # less than its reserve: nothing left, never below 0
    assert device_budget(cfg, "cpu")[0] == 0.0
    cfg.training.memory_budget_gb = 80
    policy = tiny_config(100, image_size=32)
    peak = sft_memory_plan(cfg, policy, 1, "cpu").plan.peak
    # a plan that fills the whole budget is refused: the reserve would not fit beside it
    cfg.training.memory_budget_gb = peak + 0.5
    with pytest.raises(ConfigError, match="less a 1.0 GiB reserve"):
        sft_memory_plan(cfg, policy, 1, "cpu")
    cfg.training.memory_reserve_gb = 0.0
    assert sft_memory_plan(cfg, policy, 1, "cpu").budget == peak + 0.5


def test_the_gpus_memory_is_read_without_a_cuda_context(tmp_path, monkeypatch) -> None:
    """The launcher reads GPU 1 (physical GPU 5 under CUDA_VISIBLE_DEVICES) from nvidia-smi:
    nothing in this process asks CUDA, which would hold a context on the GPU beside rank 0."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/asked\necho 81559\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed: nvidia-smi answers

    def no_cuda(*args, **kwargs):
        raise AssertionError("asked CUDA: a context on the GPU")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("mem_get_info", "get_device_properties", "init", "set_device", "_lazy_init"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    budget, where = device_budget(resolve_config(), "cuda:1")
    total = 81559 / 1024
    assert budget == pytest.approx(total - gpu_reserve(total, None))
    assert where == f"cuda:1's {total:.1f} GiB less a {gpu_reserve(total, None):.1f} GiB reserve"
    assert (tmp_path / "asked").read_text().split()[-2:] == ["-i", "5"]


def test_a_cpu_run_is_checked_against_the_host_memory_its_ranks_share(monkeypatch) -> None:
    monkeypatch.setattr("wmrl_cli.runtime.host_memory_available_gib", lambda: 16.0)
    cfg = resolve_config()
    assert device_budget(cfg, "cpu") == (None, "cpu")  # --plan on a machine without a GPU
    assert device_budget(cfg, "cpu", host=True) == (16.0, "host memory available")
    budget, where = device_budget(cfg, "cpu", 4, host=True)
    assert (budget, where) == (4.0, "host memory available to each of 4 ranks (16.0 GiB in all)")


def _wan_plan(budget: float, ranks: int = 16, extra: tuple[str, ...] = ()):
    """The seeds' Wan preset with 128 envs, published sizes, planned as a GPU runs it."""
    from wmrl_cli.memory.budget import rl_memory_plan
    from wmrl_cli.memory.param_counts import full_world_model_params, published_reward_bytes
    from wmrl_cli.memory.plan import imagination_cost
    from wmrl_cli.policies.config import full_config

    overrides = ["algorithm.num_envs=128", "world_model.dtype=bf16", *extra]
    cfg = resolve_config(
        "wan-spatial-grpo", overrides=[*overrides, f"training.memory_budget_gb={budget}"]
    )
    wan, reward = full_world_model_params("wan"), published_reward_bytes("resnet")
    return rl_memory_plan(
        cfg, full_config(), wan, reward, ranks, "cpu", imagination_cost("wan", 256, 256)
    )


def test_more_gpus_are_advised_only_where_more_ranks_fit() -> None:
    """The audit's `--num-processes 16 --plan` at 24 GiB: 16 ranks need 32.6 GiB and 32 ranks
    30.0, because the policy gathered for the rollout and the world model do not shrink; the
    plan said 'use more GPUs'. It says that nothing fits, why, and what is left."""
    with pytest.raises(ConfigError) as err:
        _wan_plan(24)
    message = str(err.value)
    assert "use more GPUs" not in message and "no setting fits" in message
    assert "its rollout holding policy gathered for the rollout" in message
    assert "world model + VAE 10.7" in message and "fewer envs per rank" in message
    # where every saving on more ranks fits, the message names them together, ranks included
    with pytest.raises(ConfigError) as err:
        _wan_plan(29)
    message = str(err.value)
    assert "it fits with these together: " in message and "--num-processes 64" in message


def test_the_peak_sits_under_the_phase_that_holds_it() -> None:
    from rich.console import Console

    with pytest.raises(ConfigError) as err:
        _wan_plan(24)
    plan = err.value.plan
    assert plan.peak_phase == 0 and plan.peak == plan.rollout  # the rollout, not AdamW's step
    console = Console(record=True, width=400)
    console.print(plan.table(21.8))
    peak = next(line for line in console.export_text().splitlines() if line.startswith("│ peak"))
    cells = [cell.strip() for cell in peak.split("│")[2:5]]
    assert cells == [f"{plan.peak:.2f} of 21.8", "", ""]


def test_the_update_counts_the_anchors_batch_where_it_is_the_larger() -> None:
    """algorithm.bc_coef: the behaviour-cloning batch's forward and backward follow the
    minibatch's, so the update holds the larger of the two per rank, never their sum."""
    plain = _wan_plan(400).plan
    minibatch = plain.settings.sequences
    anchor = ("algorithm.bc_coef=0.5", "algorithm.bc_data=runs/x/data/reward_real")
    small = _wan_plan(400, extra=(*anchor, f"algorithm.bc_batch_size={16 * minibatch}")).plan
    assert small.settings.sequences == minibatch and small.update == plain.update
    large = _wan_plan(400, extra=(*anchor, f"algorithm.bc_batch_size={16 * 4 * minibatch}")).plan
    assert large.settings.sequences == 4 * minibatch and large.update > plain.update
