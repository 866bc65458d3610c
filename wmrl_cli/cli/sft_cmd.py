"""`wmrl sft`: behaviour-clone the base VLA policy from expert demonstrations."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from wmrl_cli.cli.common import (
    ImageSizeOpt,
    LogWithOpt,
    OutOpt,
    OverwriteOpt,
    PresetOpt,
    ResumeOpt,
    SeedOpt,
    SetOpt,
    SuiteOpt,
    WorkersOpt,
    build_config,
    handle_errors,
    say_done,
)


@handle_errors
def sft_command(
    suite: SuiteOpt = None,
    demos_per_task: Annotated[
        int | None, typer.Option(help="Expert demonstrations collected per task.")
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            help="Train on this episode store instead of collecting demonstrations, or on a "
            "LeRobotDataset v3: a folder or a Hub repo id (lerobot.* settings)."
        ),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Samples per step (all ranks).")] = None,
    lr: Annotated[float | None, typer.Option(help="Peak learning rate.")] = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    seed: SeedOpt = None,
    num_workers: WorkersOpt = None,
    image_size: ImageSizeOpt = None,
    out: OutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    log_with: LogWithOpt = None,
) -> None:
    """Collect scripted-expert demonstrations (or read --data), behaviour-clone a tiny OpenVLA-OFT policy with cross-entropy over action tokens, and save it to RUN_DIR/policy. Evaluate with `wmrl eval --policy RUN_DIR`."""  # noqa: E501
    from wmrl_cli.assets.datasets import open_episode_data
    from wmrl_cli.jobs.sft import collect_demos, train_bc
    from wmrl_cli.memory.budget import check_sft_memory
    from wmrl_cli.ranks import check_not_single_rank_launch
    from wmrl_cli.run_dirs import claim_run_dir, default_run_dir
    from wmrl_cli.runtime import configure_threads, seed_everything

    check_not_single_rank_launch()
    cfg = build_config(
        preset,
        set_,
        log_with=log_with,
        simulator__suite=suite,
        sft__demos_per_task=demos_per_task,
        sft__data=None if data is None else str(data),
        sft__steps=steps,
        sft__batch_size=batch_size,
        sft__lr=lr,
        simulator__seed=seed,
        simulator__num_workers=num_workers,
        simulator__image_size=image_size,
        output_dir=out,
    )
    store = open_episode_data([cfg.sft.data], cfg) if cfg.sft.data else None
    check_sft_memory(cfg, int(os.environ.get("WORLD_SIZE", 1)))  # before anything is written
    run_dir = claim_run_dir(
        cfg,
        "sft",
        default=default_run_dir("sft", preset),
        inputs={"sft.data": cfg.sft.data},
        resume=resume,
        overwrite=overwrite,
    )
    if resume and cfg.sft.data:  # the recorded config's store
        store = open_episode_data([cfg.sft.data], cfg)
    configure_threads(cfg.num_threads)
    seed_everything(cfg.simulator.seed)
    if store is None:
        store = collect_demos(cfg, run_dir)
    policy_dir = train_bc(cfg, run_dir, store)
    say_done("policy", policy_dir, f"evaluate it with `wmrl eval --policy {run_dir}`")
