"""`wmrl rollout`: collect episodes in the real simulator into an episode store; with
`--world-model WM --replay STORE`, imagine them: WM rolled over STORE's recorded actions."""

from __future__ import annotations

from pathlib import Path
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
    say_done,
)
from wmrl_cli.errors import ConfigError
from wmrl_cli.logging import console

# The options that drive the simulator's policy: none of them applies to imagined rollouts.
POLICY_OPTIONS = (
    ("--policy", "policy"),
    ("--suite", "suite"),
    ("--episodes-per-task", "episodes_per_task"),
    ("--kir", "kir"),
    ("--export-rlinf", "export_rlinf"),
    ("--temperature", "temperature"),
    ("--greedy", "greedy"),
    ("--noise-std", "noise_std"),
    ("--noise-kind", "noise_kind"),
    ("--random-chunk-prob", "random_chunk_prob"),
    ("--num-workers", "num_workers"),
    ("--image-size", "image_size"),
)


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
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite",
            help="Replace the store in --out: its episodes and the files wmrl wrote go (yours "
            "stay).",
        ),
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
    world_model: Annotated[
        Path | None,
        typer.Option(
            "--world-model",
            help="Imagine instead: roll this world model (a train-wm run, a model directory or "
            "an RLinf Wan/OpenSora directory) over --replay's episodes; --num-envs episodes a "
            "batch.",
        ),
    ] = None,
    replay: Annotated[
        Path | None,
        typer.Option(
            help="With --world-model: the episode store whose real context frames and recorded "
            "actions (and success flags, the labels) the imagined episodes take."
        ),
    ] = None,
    reset_set: Annotated[
        Path | None,
        typer.Option(
            help="With --world-model and --policy: the episode store whose starts the policy "
            "acts from in imagination, each chunk also executed in the simulator to label the "
            "imagined frames (--episodes-per-task episodes of every task)."
        ),
    ] = None,
    horizon: Annotated[
        int | None,
        typer.Option(help="With --world-model: steps imagined per start (default: the rest)."),
    ] = None,
    start_every: Annotated[
        int | None,
        typer.Option(
            help="With --world-model: start at steps 0, K, 2K, ... of every episode (default 0: "
            "the episode start only)."
        ),
    ] = None,
    format_: Annotated[
        str,
        typer.Option(
            "--format",
            help="wmrl: --out is an episode store; lerobot: --out is a LeRobotDataset v3 "
            "(lerobot.camera, lerobot.fps; docs/formats.md).",
        ),
    ] = "wmrl",
) -> None:
    """Run a policy (its actions optionally perturbed: --noise-kind, --random-chunk-prob) for N episodes per task in Meta-World or LIBERO (--suite libero_*) and store every frame, action, reward and success flag, with the exact simulator state at each chunk boundary; with --world-model and --replay, store the world model's imagined episodes under the recorded actions instead, labelled with the recorded success; with --world-model, --policy and --reset-set, store the policy's own imagined episodes from the store's starts, labelled by executing its actions in the simulator."""  # noqa: E501
    given = locals()
    if format_ != "wmrl":
        _rollout_as_lerobot(given)
        return
    what = "imagined episodes"
    if reset_set is not None:
        from wmrl_cli.jobs.imagine_policy import imagine_policy_rollouts

        _check_policy_imagined_options(world_model, policy, given)
        cfg = build_config(
            preset,
            set_,
            policy__name=policy,
            simulator__suite=suite,
            rollout__episodes_per_task=episodes_per_task,
            policy__temperature=temperature,
            policy__greedy=greedy or None,
            simulator__seed=seed,
            simulator__num_envs=num_envs,
            simulator__num_workers=num_workers,
            world_model__path=str(world_model),
            world_model__reset_set=str(reset_set),
            assets_dir=assets_dir,
            output_dir=out,
        )
        summary = imagine_policy_rollouts(cfg, append, overwrite)
    elif world_model is not None or replay is not None:
        from wmrl_cli.jobs.imagine_replay import imagine_replay_rollouts

        world_model, replay = _check_imagined_options(world_model, replay, given)
        cfg = build_config(
            preset,
            set_,
            simulator__seed=seed,
            simulator__num_envs=num_envs,
            world_model__path=str(world_model),
            assets_dir=assets_dir,
            output_dir=out,
        )
        summary = imagine_replay_rollouts(
            cfg, world_model, replay, horizon, start_every or 0, append, overwrite
        )
    else:
        from wmrl_cli.jobs.collect_rollouts import collect_rollouts

        if horizon is not None or start_every is not None:
            raise ConfigError(
                "--horizon and --start-every apply only with --world-model and --replay"
            )
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
        if noise_std is not None:  # the std of the configured perturbation, else the expert's
            noisy = cfg.rollout.perturbation.kind != "none"
            key = "rollout__perturbation__std" if noisy else "policy__noise_std"
            cfg = build_config(preset, set_, **options, **{key: noise_std})
        summary = collect_rollouts(
            cfg, append=append, write_rlinf=export_rlinf, overwrite=overwrite
        )
        what = "episodes"
    console.print(summary.table())
    say_done(f"{summary.episodes} {what}", summary.store)


# What needs the episode store itself: no place for it in a LeRobot dataset.
STORE_OPTIONS = (("--append", "append"), ("--kir", "kir"), ("--export-rlinf", "export_rlinf"))


def _rollout_as_lerobot(given: dict) -> None:
    """--format lerobot: the rollout into an episode store beside --out (a temporary folder),
    then that store written to --out as a LeRobotDataset v3."""
    import inspect
    import shutil

    from wmrl_cli.cli.convert_cmd import check_new_output, export_lerobot, recorded_camera
    from wmrl_cli.data.episodes import EpisodeStore

    if given["format_"] != "lerobot":
        raise ConfigError(f"--format {given['format_']}: choose wmrl or lerobot")
    _refuse_given(STORE_OPTIONS, given, "--format lerobot writes a new LeRobot dataset")
    out = Path(given["out"])
    check_new_output(out, given["overwrite"])
    tmp = out.parent / f".{out.name}.store-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    params = {name: given[name] for name in inspect.signature(rollout_command).parameters}
    try:
        run = rollout_command.__wrapped__  # type: ignore[attr-defined]  # errors: reported once
        run(**{**params, "out": str(tmp), "format_": "wmrl", "overwrite": False})
        cfg = build_config(given["preset"], given["set_"])
        export_lerobot(EpisodeStore.open(tmp), out, cfg, recorded_camera(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _given(value: object) -> bool:
    return value is not None and value is not False  # a flag's default is False, 0.0 is a value


def _refuse_given(options: tuple[tuple[str, str], ...], given: dict, why: str) -> None:
    """One line naming the `options` (flag, parameter) the user gave that do not apply."""
    conflicts = [flag for flag, name in options if _given(given[name])]
    if conflicts:
        raise ConfigError(f"{why}: drop " + ", ".join(conflicts))


def _check_imagined_options(
    world_model: Path | None, replay: Path | None, given: dict
) -> tuple[Path, Path]:
    """One line for imagined rollouts asked for with a part missing or with policy options."""
    if world_model is None or replay is None:
        missing = "--replay STORE" if replay is None else "--world-model WM"
        raise ConfigError(f"imagined rollouts need both --world-model and --replay: add {missing}")
    _refuse_given(
        POLICY_OPTIONS, given, "--world-model rolls --replay's recorded actions, not a policy"
    )
    return world_model, replay


# Simulator-rollout options that do not apply to a policy acting in imagination.
NOT_IN_IMAGINATION = (
    ("--replay", "replay"),
    ("--horizon", "horizon"),
    ("--start-every", "start_every"),
    ("--kir", "kir"),
    ("--export-rlinf", "export_rlinf"),
    ("--noise-std", "noise_std"),
    ("--noise-kind", "noise_kind"),
    ("--random-chunk-prob", "random_chunk_prob"),
    ("--image-size", "image_size"),
)


def _check_policy_imagined_options(world_model: Path | None, policy: str | None, given: dict):
    """One line for a labelled imagined rollout asked for with a part missing or with options
    that apply to other rollouts."""
    if world_model is None or policy is None:
        missing = "--world-model WM" if world_model is None else "--policy POLICY"
        raise ConfigError(f"--reset-set rolls a policy in a world model: add {missing}")
    _refuse_given(
        NOT_IN_IMAGINATION,
        given,
        "--reset-set rolls the policy in the world model from the store's starts",
    )
