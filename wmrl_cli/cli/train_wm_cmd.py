"""`wmrl train-wm`: an action-conditioned world model (Wan or OpenSora) from stored episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wmrl_cli.cli.common import (
    OutOpt,
    OverwriteOpt,
    PresetOpt,
    ResumeOpt,
    SetOpt,
    build_config,
    handle_errors,
)
from wmrl_cli.logging import console


@handle_errors
def train_wm_command(
    data: Annotated[Path, typer.Option(help="Episode store to learn from (wmrl rollout).")],
    backend: Annotated[
        str | None, typer.Option(help="wan (WoVR/RLinf) or opensora (WMPO/RLinf STDiT3).")
    ] = None,
    init: Annotated[
        Path | None, typer.Option(help="Start from this world model (skips the autoencoder).")
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Denoiser optimizer steps.")] = None,
    vae_steps: Annotated[
        int | None, typer.Option(help="Autoencoder steps when training from scratch.")
    ] = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    out: OutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
) -> None:
    """Train the autoencoder (from scratch only), then the action-conditioned denoiser on windows of reference + context + target frames; validate by open-loop rollouts against the copy-last-frame baseline; save to RUN/world_model/."""  # noqa: E501
    from rich.table import Table

    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.runtime import claim_run_dir, configure_threads, default_run_dir, seed_everything
    from wmrl_cli.training.world_model_trainer import WorldModelTrainer

    cfg = build_config(
        preset,
        set_,
        world_model__backend=backend,
        world_model__steps=steps,
        world_model__vae_steps=vae_steps,
        output_dir=out,
    )
    store = EpisodeStore.open(data)
    if len(store) == 0:
        raise typer.BadParameter(f"{data} holds no episodes")
    action_dim = int(store.load(0).actions.shape[1])
    run_dir = claim_run_dir(
        cfg,
        "train-wm",
        default=default_run_dir("train-wm", preset),
        inputs={"data": data, "init": init},
        resume=resume,
        overwrite=overwrite,
    )
    configure_threads(cfg.num_threads)
    seed_everything(cfg.simulator.seed)
    trainer = WorldModelTrainer(cfg, run_dir, store, action_dim)
    out_dir = trainer.run(resume=True, init=None if init is None else str(init))
    console.print(f"world model saved to {out_dir}")
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
