"""`wmrl rollout`: collect episodes in the real simulator into an episode store."""

from __future__ import annotations

from typing import Annotated

import typer

from wmrl_cli.cli.common import (
    EpisodesOpt,
    GreedyOpt,
    ImageSizeOpt,
    NoiseOpt,
    NumEnvsOpt,
    PolicyOpt,
    PresetOpt,
    SeedOpt,
    SetOpt,
    SuiteOpt,
    TemperatureOpt,
    WorkersOpt,
    build_config,
    handle_errors,
)
from wmrl_cli.logging import console


@handle_errors
def rollout_command(
    out: Annotated[str, typer.Option("--out", "-o", help="Episode store directory to write.")],
    policy: PolicyOpt = None,
    suite: SuiteOpt = None,
    episodes_per_task: EpisodesOpt = None,
    kir: Annotated[
        bool, typer.Option("--kir", help="Also select KIR keyframes (rule: docs/formats.md#kir).")
    ] = False,
    export_rlinf: Annotated[
        bool,
        typer.Option("--export-rlinf", help="Also write RLinf's reset layout to OUT/dataset/."),
    ] = False,
    append: Annotated[
        bool, typer.Option("--append", help="Add to an existing store instead of refusing.")
    ] = False,
    temperature: TemperatureOpt = None,
    greedy: GreedyOpt = False,
    noise_std: NoiseOpt = None,
    seed: SeedOpt = None,
    num_envs: NumEnvsOpt = None,
    num_workers: WorkersOpt = None,
    image_size: ImageSizeOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run a policy for N episodes per task and store every frame, action, reward and success flag, with the simulator state at each chunk boundary."""  # noqa: E501
    from wmrl_cli.data.collection import collect_rollouts

    cfg = build_config(
        preset,
        set_,
        policy__name=policy,
        simulator__suite=suite,
        rollout__episodes_per_task=episodes_per_task,
        rollout__kir__enabled=kir or None,
        policy__temperature=temperature,
        policy__greedy=greedy or None,
        policy__noise_std=noise_std,
        simulator__seed=seed,
        simulator__num_envs=num_envs,
        simulator__num_workers=num_workers,
        simulator__image_size=image_size,
        output_dir=out,
    )
    summary = collect_rollouts(cfg, append=append, write_rlinf=export_rlinf)
    console.print(summary.table())
