"""The plan's budget (training/memory_budget.py `device_budget`): a GPU's memory less a stated
reserve for what the plan cannot see, read without a CUDA context in the launcher; a CPU run
against the host memory available."""

from __future__ import annotations

import sys

import pytest
import torch

from wmrl_cli.config import resolve_config
from wmrl_cli.errors import ConfigError
from wmrl_cli.policies.config import tiny_config
from wmrl_cli.training.memory_budget import device_budget, gpu_reserve, sft_memory_plan


def test_a_gpu_budget_keeps_a_reserve_for_what_the_plan_cannot_see() -> None:
    assert gpu_reserve(80.0, None) == pytest.approx(5.0)  # 1 GiB + 5%
    assert gpu_reserve(80.0, 2.0) == 2.0  # training.memory_reserve_gb
    cfg = resolve_config(overrides=["training.memory_budget_gb=80"])
    budget = (75.0, "training.memory_budget_gb=80 less a 5.0 GiB reserve")
    assert device_budget(cfg, "cpu") == budget
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
