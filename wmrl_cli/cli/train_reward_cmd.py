"""`wmrl train-reward`: a frame-level success classifier from stored episodes."""

from __future__ import annotations

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
from wmrl_cli.errors import ConfigError
from wmrl_cli.logging import console


@handle_errors
def train_reward_command(
    data: Annotated[
        list[Path],
        typer.Option(
            help="Episode store with success flags (wmrl rollout); repeat to pool several, e.g. "
            "real and imagined episodes (wmrl rollout --world-model); or a LeRobotDataset v3: "
            "a folder or a Hub repo id (lerobot.* settings)."
        ),
    ],
    kind: Annotated[
        str | None,
        typer.Option(
            help="resnet or taskemb_resnet (RLinf's two reward models), videomae (WMPO's "
            "clip classifier; sizes in reward_model.videomae), or latent (a head on the frozen "
            "VAE latents of --world-model)."
        ),
    ] = None,
    world_model: Annotated[
        str | None,
        typer.Option(
            "--world-model",
            help="With --kind latent: the world model whose VAE encoder the judge reads "
            "(copied into the judge, frozen): a train-wm run, a model directory, RLinf's "
            "OpenSora folder or an asset name (world_model.path).",
            autocompletion=complete_assets,
        ),
    ] = None,
    steps: Annotated[int | None, typer.Option(help="Optimizer steps.")] = None,
    width: Annotated[
        int | None,
        typer.Option(help="ResNet base width (RLinf: 64); latent: the head's channels."),
    ] = None,
    init: Annotated[
        str | None,
        typer.Option(
            help="Fine-tune this reward model: a train-reward run or model directory, an RLinf "
            "*rm.pth (or a folder holding one), or a published asset name.",
            autocompletion=complete_assets,
        ),
    ] = None,
    export_rlinf: Annotated[
        Path | None,
        typer.Option(
            "--export-rlinf",
            help="Then write the trained model as FOLDER/<the --init file's name> in its "
            "published layout (RLinf's keys); an existing file of that name is replaced.",
        ),
    ] = None,
    assets_dir: AssetsDirOpt = None,
    seed: TrainSeedOpt = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    out: OutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    log_with: LogWithOpt = None,
) -> None:
    """Train a success classifier (RLinf's ResNet on frames, a head on a world model's latents, or WMPO's VideoMAE on clips) on frames labelled by the simulator's success flags; the threshold is chosen by F1 on held-out episodes and saved with the model in RUN/reward_model/."""  # noqa: E501
    from rich.table import Table

    from wmrl_cli.assets.datasets import open_episode_data
    from wmrl_cli.run_dirs import claim_run_dir, default_run_dir
    from wmrl_cli.runtime import configure_threads
    from wmrl_cli.training.init_sources import (
        export_reward_model,
        latent_judge_encoder,
        reward_export_path,
        reward_model_to_fine_tune,
    )
    from wmrl_cli.training.reward_trainer import train_reward_model

    cfg = build_config(
        preset,
        set_,
        log_with=log_with,
        reward_model__kind=kind,
        simulator__seed=seed,
        reward_model__steps=steps,
        reward_model__width=width,
        world_model__path=world_model,
        assets_dir=assets_dir,
        output_dir=out,
    )
    store = open_episode_data(data, cfg)
    source = target = model = encoder = world_model_dir = None
    if init is not None and world_model is not None:
        raise ConfigError(
            f"--world-model builds a new latent judge; --init {init} is fine-tuned as it is"
        )
    if init is None and cfg.reward_model.kind == "latent":
        if not cfg.world_model.path:
            raise ConfigError(
                "--kind latent needs --world-model WM: the world model whose latents it judges"
            )
        world_model_dir, encoder = latent_judge_encoder(cfg.world_model.path, store, cfg)
    elif world_model is not None:
        raise ConfigError(
            f"--world-model is for --kind latent; reward_model.kind is {cfg.reward_model.kind}"
        )
    if init is not None:  # loaded before the run directory is made: a bad file writes nothing
        source, model = reward_model_to_fine_tune(init, store, cfg.assets_dir, cfg.reward_model)
        target = reward_export_path(source, export_rlinf)
        own = {"--kind": model.kind, "--width": getattr(model.config, "width", None)}
        for option, given in (("--kind", kind), ("--width", width)):
            if given is not None and given != own[option]:
                raise ConfigError(f"{option} {given}, but --init {init} has {own[option]}")
    elif export_rlinf is not None:
        raise ConfigError("--export-rlinf needs --init: the published reward model to go back to")
    run_dir = claim_run_dir(
        cfg,
        "train-reward",
        default=default_run_dir("train-reward", preset),
        inputs={**data_inputs(data), "init": source, "world_model": world_model_dir},
        resume=resume,
        overwrite=overwrite,
    )
    configure_threads(cfg.num_threads)
    model_dir, metrics = train_reward_model(cfg, run_dir, store, init=model, encoder=encoder)
    if target is not None and source is not None:
        exported = export_reward_model(model_dir, source, target, store)
        console.print(f"exported in the layout of {source} to {exported}")
    table = Table(title=f"reward model on held-out episodes -> {model_dir}")
    for column in ("threshold", "precision", "recall", "F1"):
        table.add_column(column, justify="right")
    table.add_row(
        f"{metrics.threshold:.3f}",
        f"{metrics.precision:.3f}",
        f"{metrics.recall:.3f}",
        f"{metrics.f1:.3f}",
    )
    console.print(table)
    say_done("reward model", model_dir)


def data_inputs(data: list[Path]) -> dict[str, Path]:
    """The run record's inputs for the stores: `data` (one store, as before), then `data2`, ..."""
    return {("data" if i == 0 else f"data{i + 1}"): path for i, path in enumerate(data)}
