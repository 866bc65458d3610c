"""`wmrl train-policy --plan`: the memory plan per GPU that a launch with these settings would
check, printed before anything is downloaded or written and before any model loads.

The inputs on disk are counted as the launch counts them (`check_rl_memory`: configs and
weight-file headers); a published asset not downloaded yet counts at its published size (the
7.5 B OpenVLA-OFT, the backend's full world model, RLinf's reward model, 256 x 256 frames). So a
user can ask on a machine without a GPU which settings fit the GPUs they will run on:

    wmrl train-policy --preset wan-spatial-grpo --num-processes 8 --plan \\
        --set training.memory_budget_gb=79
"""

from __future__ import annotations

import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.jobs.inputs import resolve_inputs
from wmrl_cli.logging import console
from wmrl_cli.memory.budget import (
    CheckedPlan,
    OverBudget,
    check_rl_memory,
    device_budget,
)


def launch_plan(cfg: RunConfig, world_size: int) -> tuple[CheckedPlan, list[str]]:
    """(The plan as a launch of `world_size` ranks checks it, the assets counted at their
    published size). Where it does not fit: the table of the plan, then the launch's OverBudget
    error (what to change; exit 2). Without a GPU here, it plans for one: `world_model.dtype`
    auto is bf16, and the budget is `training.memory_budget_gb` (none if unset)."""
    inputs = resolve_inputs(cfg, missing_assets_ok=True)
    counted = inputs.not_downloaded if inputs.world_model else {inputs.policy}  # simulator: only it
    published = sorted(path.name for path in inputs.not_downloaded & counted)
    target = cfg
    if not torch.cuda.is_available() and cfg.world_model.dtype == "auto":
        target = cfg.model_copy(deep=True)
        target.world_model.dtype = "bf16"  # auto's choice on a GPU
    try:
        return check_rl_memory(target, inputs, world_size), published
    except OverBudget as exc:
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
        console.print(exc.plan.table(device_budget(target, device)[0]))
        print_published(published)
        raise


def print_published(names: list[str]) -> None:
    if names:
        console.print(f"counted at their published size (not downloaded): {', '.join(names)}")


def print_launch_plan(cfg: RunConfig, world_size: int) -> CheckedPlan:
    """The plan's table, then one line: whether it fits and with which settings the launch
    would turn on (`world_model.vae_batch`, `world_model.offload_during_update`)."""
    checked, published = launch_plan(cfg, world_size)
    console.print(checked.plan.table(checked.budget))  # a GPU's plan, also on this CPU
    print_published(published)
    if checked.budget is None:
        console.print(
            f"nothing to check against on {checked.where} (no GPU): --set "
            "training.memory_budget_gb=79 plans for a GPU of 79 GiB (an 80 GB H100)"
        )
        return checked
    turned_on = []
    if checked.vae_batch is not None and cfg.world_model.vae_batch is None:
        turned_on.append(f"world_model.vae_batch={checked.vae_batch}")
    if checked.offload_world_model and cfg.world_model.offload_during_update is None:
        turned_on.append("world_model.offload_during_update=true")
    with_ = f", with {' and '.join(turned_on)}" if turned_on else ""
    console.print(
        f"fits: {checked.plan.peak:.1f} of {checked.budget:.1f} GiB per GPU "
        f"({checked.where}) on {world_size} rank(s){with_}"
    )
    return checked
