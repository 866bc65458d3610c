"""`wmrl rollout`: collect episodes in the real simulator into an episode store."""

from __future__ import annotations

from typing import Annotated

import typer

from wmrl_cli.cli.common import (
    AssetsDirOpt,
    EpisodesOpt,
    GreedyOpt,
    ImageSizeOpt,
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
    noise_std: Annotated[
        float | None,
        typer.Option(
            help="Std of the action noise: of --noise-kind's noise when a kind is set "
            "(rollout.perturbation.std), else per-step Gaussian noise on expert actions "
            "(policy.noise_std)."
        ),
    ] = None,
    noise_kind: Annotated[
        str | None,
        typer.Option(
            help="Noise on any policy's actions, recorded per step in the store: none, "
            "gaussian (per step), ou (temporally correlated, Ornstein-Uhlenbeck) or "
            "chunk_offset (one offset per chunk)."
        ),
    ] = None,
    random_chunk_prob: Annotated[
        float | None,
        typer.Option(
            help="Probability that a chunk of an episode is replaced by uniform random "
            "actions in [-1, 1]."
        ),
    ] = None,
    seed: SeedOpt = None,
    num_envs: NumEnvsOpt = None,
    num_workers: WorkersOpt = None,
    image_size: ImageSizeOpt = None,
    assets_dir: AssetsDirOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
) -> None:
    """Run a policy (its actions optionally perturbed: --noise-kind, --random-chunk-prob) for N episodes per task in Meta-World or LIBERO (--suite libero_*) and store every frame, action, reward and success flag, with the exact simulator state at each chunk boundary."""  # noqa: E501
    from wmrl_cli.data.collection import collect_rollouts

    options = dict(
        policy__name=policy,
        simulator__suite=suite,
        rollout__episodes_per_task=episodes_per_task,
        rollout__kir__enabled=kir or None,
        policy__temperature=temperature,
        policy__greedy=greedy or None,
        rollout__perturbation__kind=noise_kind,
        rollout__perturbation__random_chunk_prob=random_chunk_prob,
        simulator__seed=seed,
        simulator__num_envs=num_envs,
        simulator__num_workers=num_workers,
        simulator__image_size=image_size,
        assets_dir=assets_dir,
        output_dir=out,
    )
    cfg = build_config(preset, set_, **options)
    if noise_std is not None:  # the std of the configured perturbation, else the expert's noise
        noisy = cfg.rollout.perturbation.kind != "none"
        key = "rollout__perturbation__std" if noisy else "policy__noise_std"
        cfg = build_config(preset, set_, **options, **{key: noise_std})
    summary = collect_rollouts(cfg, append=append, write_rlinf=export_rlinf)
    console.print(summary.table())
