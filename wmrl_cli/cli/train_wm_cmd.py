"""`wmrl train-wm`: an action-conditioned world model (Wan or OpenSora) from stored episodes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from wmrl_cli.cli.common import (
    AssetsDirOpt,
    LogWithOpt,
    OutOpt,
    OverwriteOpt,
    PresetOpt,
    ResumeOpt,
    SetOpt,
    TrainSeedOpt,
    build_config,
    handle_errors,
    say_done,
)
from wmrl_cli.cli.completion import complete_assets
from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.logging import console
from wmrl_cli.ranks import check_not_single_rank_launch, relaunch_ranks
from wmrl_cli.run_dirs import expect_run_dir


@handle_errors
def train_wm_command(
    data: Annotated[
        Path,
        typer.Option(
            help="Episode store to learn from (wmrl rollout), or a LeRobotDataset v3: a folder "
            "or a Hub repo id (lerobot.* settings)."
        ),
    ],
    backend: Annotated[
        str | None, typer.Option(help="wan (WoVR/RLinf) or opensora (WMPO/RLinf STDiT3).")
    ] = None,
    init: Annotated[
        str | None,
        typer.Option(
            help="Start from this world model (skips the autoencoder): a train-wm run or model "
            "directory, RLinf's Wan or OpenSora folder, or a published asset name.",
            autocompletion=complete_assets,
        ),
    ] = None,
    export_rlinf: Annotated[
        Path | None,
        typer.Option(
            "--export-rlinf",
            help="Then write the trained world model into this new folder in the published "
            "layout --init was loaded from (RLinf's files and key names).",
        ),
    ] = None,
    gradient_checkpointing: Annotated[
        bool,
        typer.Option(
            "--gradient-checkpointing",
            help="Recompute the denoiser's activations in the backward pass: less memory "
            "(world_model.gradient_checkpointing=true).",
        ),
    ] = False,
    assets_dir: AssetsDirOpt = None,
    seed: TrainSeedOpt = None,
    steps: Annotated[int | None, typer.Option(help="Denoiser optimizer steps.")] = None,
    vae_steps: Annotated[
        int | None, typer.Option(help="Autoencoder steps when training from scratch.")
    ] = None,
    num_processes: Annotated[
        int,
        typer.Option(
            help="Data-parallel processes (ranks) to launch, world_model.batch_size split among "
            "them; use 1 under accelerate launch."
        ),
    ] = 1,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    out: OutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    log_with: LogWithOpt = None,
) -> None:
    """Train the autoencoder (from scratch only), then the action-conditioned denoiser on windows of reference + context + target frames; validate by open-loop rollouts against the copy-last-frame baseline; save to RUN/world_model/."""  # noqa: E501
    from rich.table import Table

    from wmrl_cli.assets.datasets import open_episode_data
    from wmrl_cli.memory.world_model import check_world_model_training
    from wmrl_cli.run_dirs import claim_run_dir, default_run_dir
    from wmrl_cli.runtime import configure_threads, seed_everything
    from wmrl_cli.training.guidance_distillation import check_distillation
    from wmrl_cli.training.init_sources import resolve_init
    from wmrl_cli.training.world_model_trainer import WorldModelTrainer, make_accelerator
    from wmrl_cli.world_models.loading import (
        check_world_model_export,
        export_world_model,
        world_model_backend,
    )

    check_not_single_rank_launch()
    cfg = build_config(
        preset,
        set_,
        log_with=log_with,
        world_model__backend=backend,
        simulator__seed=seed,
        world_model__steps=steps,
        world_model__vae_steps=vae_steps,
        world_model__gradient_checkpointing=gradient_checkpointing or None,
        assets_dir=assets_dir,
        output_dir=out,
    )
    store = open_episode_data([data], cfg)
    if len(store) == 0:
        raise typer.BadParameter(f"{data} holds no episodes")
    first = store.load(0)
    action_dim = int(first.actions.shape[1])
    source = None
    if init is not None:  # checked before the run directory is made
        source = resolve_init(init, cfg.assets_dir)
        own = world_model_backend(source)
        if backend is not None and backend != own:
            raise ConfigError(f"--backend {backend}, but --init {init} holds a {own} world model")
        cfg.world_model.backend = own
        check_world_model_export(source, export_rlinf)
    elif export_rlinf is not None:
        raise ConfigError("--export-rlinf needs --init: the published model to go back to")
    check_distillation(cfg, source, num_processes)
    claim = dict(
        default=default_run_dir("train-wm", preset),
        inputs={"data": data, "init": source},
        resume=resume,
        overwrite=overwrite,
    )
    if "LOCAL_RANK" not in os.environ:  # checked before any rank starts
        check_ranks(cfg, num_processes, trains_autoencoder=source is None)
        # the memory plan per GPU, before any model loads (on a GPU or with a budget)
        frames = tuple(first.frames.shape[1:3])
        plan = check_world_model_training(cfg, source, frames, num_processes, action_dim)
        if plan is not None:
            console.print(plan.line())
        if num_processes > 1:
            claim_run_dir(cfg.model_copy(deep=True), "train-wm", **claim, write=False)
            if cfg.output_dir is not None:
                expect_run_dir(Path(cfg.output_dir))
            relaunch_ranks(num_processes)
    accelerator = make_accelerator(cfg)
    if accelerator.num_processes > 1 and cfg.output_dir is None:
        raise WmrlError("several ranks need --out so that every rank writes to the same run")
    # every rank applies the run-directory rule (with --resume, each adopts the recorded
    # config); the main process writes
    run_dir = claim_run_dir(cfg, "train-wm", **claim, write=accelerator.is_main_process)
    accelerator.wait_for_everyone()
    configure_threads(cfg.num_threads)
    seed_everything(cfg.simulator.seed)
    trainer = WorldModelTrainer(cfg, run_dir, store, action_dim)
    trainer.accelerator = accelerator
    out_dir = trainer.run(resume=True, init=source)
    if not accelerator.is_main_process:
        return
    if export_rlinf is not None and source is not None:
        exported = export_world_model(out_dir, source, export_rlinf)
        console.print(f"exported in the layout of {source} to {exported}")
    reliability = out_dir / "reliability.json"
    if reliability.is_file():
        import json

        data_ = json.loads(reliability.read_text())
        table = Table(title="open-loop PSNR (dB) on held-out episodes")
        other = (data_.get("alternative_psnr") or {}).get("other")
        columns = ["horizon", "world model", "copy last frame"]
        columns += ["action gap (other episode)"] if other else []
        for column in columns:
            table.add_column(column, justify="right")
        for step in (8, 16, 24, 32):
            if step <= data_["horizon"]:
                row = [str(step), f"{data_['psnr'][step - 1]:.2f}"]
                row.append(f"{data_['copy_psnr'][step - 1]:.2f}")
                if other:
                    row.append(f"{data_['psnr'][step - 1] - other[step - 1]:+.2f}")
                table.add_row(*row)
        console.print(table)
    say_done("world model", out_dir)


def check_ranks(cfg: RunConfig, world: int, trains_autoencoder: bool) -> None:
    """Each rank trains on an equal share of every batch: the batch sizes must split."""
    from wmrl_cli.training.world_model_batches import check_batch_split

    if world > 1 and cfg.output_dir is None:
        raise ConfigError("--num-processes needs --out so that every rank writes one run")
    check_batch_split(cfg, world, trains_autoencoder)
