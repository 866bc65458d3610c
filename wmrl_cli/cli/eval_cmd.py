"""`wmrl eval`: success rate of a policy in the real simulator, per task, with videos; with
`--world-model`, the reliability of a world model (evaluation/reliability.py); with
`--reward-model` alone, how a reward model's scores match the simulator's success labels on
stored episodes (evaluation/reward_eval.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from wmrl_cli.cli.common import (
    AssetsDirOpt,
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
    say_done,
)
from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.logging import console, err_console
from wmrl_cli.run_dirs import prepare_run_dir
from wmrl_cli.runtime import configure_threads, seed_everything

WorldModelOpt = Annotated[
    Path | None,
    typer.Option(
        "--world-model",
        help="Evaluate this world model (a train-wm run, a model directory or an RLinf "
        "Wan/OpenSora directory) instead of a "
        "policy: open-loop PSNR/SSIM, controllability, imagined vs real frames/s, imagined vs "
        "real success; with --policy also how differently that policy acts on imagined frames.",
    ),
]
RewardModelOpt = Annotated[
    Path | None,
    typer.Option(
        "--reward-model",
        help="A train-reward run or model directory, or an RLinf .pth: with --world-model, the "
        "judge of imagined success; alone (with --data), the model evaluated on stored episodes.",
    ),
]
DataOpt = Annotated[
    Path | None,
    typer.Option(
        help="With --world-model or --reward-model: the episode store to evaluate on "
        "(held-out episodes)."
    ),
]
BaselineOpt = Annotated[
    Path | None,
    typer.Option(
        help="An earlier `wmrl eval --policy` report (report.json or its run directory): also "
        "report this run minus it, paired by episode, overall and per task, with bootstrap 95% "
        "intervals."
    ),
]
AuditOpt = Annotated[
    bool,
    typer.Option(
        "--audit",
        help="Run the policy in the RL config's imagined env instead of the simulator (world "
        "model, reset set, reward model and verdict rule as RL has them; --world-model and "
        "--reward-model replace the config's), every episode's actions replayed in the "
        "simulator: per task, how often the judge's verdict on the policy's own imagined "
        "episodes is true, and whether each false call is the judge's or the world model's. "
        "No update is made.",
    ),
]
HorizonOpt = Annotated[
    int | None, typer.Option(help="With --world-model: open-loop horizon in steps (default 32).")
]
EvalOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--out", "-o", help="Run directory (default: runs/eval-<time>); refused if not empty."
    ),
]
OverwriteOpt = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Evaluate into an --out directory that is not empty, replacing the report and "
        "videos an earlier evaluation left there.",
    ),
]


def check_out_dir(out: Path | None, overwrite: bool) -> None:
    """Refuse (one line, exit 2) an --out that is not an evaluation's directory, and an earlier
    evaluation's unless --overwrite; checked before the evaluation starts."""
    from wmrl_cli.run_dirs import own_run_dir

    if out is None or not out.is_dir() or not any(out.iterdir()):
        return
    own_run_dir(out, "eval", check_only=True)
    if not overwrite:
        raise ConfigError(
            f"--out {out} holds an earlier evaluation; pass --overwrite to replace it (only "
            "the files it wrote), or choose another directory"
        )


@handle_errors
def eval_command(
    policy: PolicyOpt = None,
    suite: SuiteOpt = None,
    episodes_per_task: EpisodesOpt = None,
    save_video: Annotated[
        bool | None,
        typer.Option(
            "--save-video/--no-save-video",
            help="Write one mp4 per episode and a grid per task (default: eval.save_video, off).",
            show_default=False,
        ),
    ] = None,
    temperature: TemperatureOpt = None,
    greedy: GreedyOpt = False,
    noise_std: NoiseOpt = None,
    seed: SeedOpt = None,
    num_envs: NumEnvsOpt = None,
    num_workers: WorkersOpt = None,
    image_size: ImageSizeOpt = None,
    out: EvalOutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    world_model: WorldModelOpt = None,
    reward_model: RewardModelOpt = None,
    data: DataOpt = None,
    horizon: HorizonOpt = None,
    overwrite: OverwriteOpt = False,
    baseline: BaselineOpt = None,
    assets_dir: AssetsDirOpt = None,
    audit: AuditOpt = False,
) -> None:
    """Evaluate a policy on every task x trial of a suite with fixed seeds (success_once); with --world-model, evaluate a world model's reliability on stored episodes instead."""  # noqa: E501
    if audit and (data is not None or horizon is not None or baseline is not None or save_video):
        raise ConfigError(
            "--audit runs the policy from the config's reset set: drop --data, --horizon, "
            "--baseline and --save-video"
        )
    if world_model is None and horizon is not None:
        raise WmrlError("--horizon applies only with --world-model")
    if world_model is None and reward_model is None and data is not None:
        raise WmrlError("--data applies only with --world-model or --reward-model")
    if world_model is None and reward_model is not None and policy is not None:
        raise WmrlError(
            "--reward-model without --world-model evaluates the reward model on --data, not a "
            "policy: drop --policy"
        )
    if baseline is not None and (world_model is not None or reward_model is not None):
        raise WmrlError("--baseline compares policy evaluations: drop --world-model/--reward-model")
    check_out_dir(out, overwrite)
    from wmrl_cli.evaluation.policy_eval import baseline_table
    from wmrl_cli.jobs import check_models
    from wmrl_cli.jobs.evaluate_policy import evaluate_in_simulator
    from wmrl_cli.sims.backends import resolve_simulator

    cfg = build_config(
        preset,
        set_,
        policy__name=policy,
        simulator__suite=suite,
        eval__episodes_per_task=episodes_per_task,
        eval__save_video=save_video,
        policy__temperature=temperature,
        policy__greedy=greedy or None,
        policy__noise_std=noise_std,
        simulator__seed=seed,
        simulator__num_envs=num_envs,
        simulator__num_workers=num_workers,
        simulator__image_size=image_size,
        world_model__path=None if world_model is None else str(world_model),
        world_model__val_horizon=horizon,
        reward_model__path=None if reward_model is None else str(reward_model),
        assets_dir=assets_dir,
        output_dir=out,
    )
    configure_threads(cfg.num_threads)
    if audit:
        from wmrl_cli.jobs.audit_policy import audit_policy

        tally = audit_policy(cfg, cfg.eval.episodes_per_task, out=lambda: _claim(cfg, "eval"))
        console.print(tally.table("the judge on the policy's imagined episodes (simulator replay)"))
        say_done("audit (judge_audit.json)", cfg.output_dir)
        return
    if world_model is not None:
        report = check_models.eval_world_model(
            cfg, data, lambda: _claim(cfg, "eval-wm"), with_policy=policy is not None
        )
    elif reward_model is not None:
        report = check_models.eval_reward_model(
            cfg, data, lambda: _claim(cfg, "eval-rm", seed=False)
        )
    else:
        cfg.simulator = resolve_simulator(cfg.simulator)  # its config.yaml: as it ran
        report = evaluate_in_simulator(
            cfg,
            cfg.eval.episodes_per_task,
            lambda: _claim(cfg, "eval"),
            videos=cfg.eval.save_video,
            baseline=baseline,
            warn=lambda line: err_console.print(line, style="yellow", soft_wrap=True, markup=False),
        )
    console.print(report.table())
    if baseline is not None:
        console.print(baseline_table(report.baseline))
    say_done("report (report.md, report.json)", cfg.output_dir)


def _claim(cfg: RunConfig, command: str, seed: bool = True) -> Path:
    """The run directory, made once the inputs are known to be good (check_out_dir allowed an
    overwrite), and the run's seeds."""
    run_dir = prepare_run_dir(cfg, command, overwrite=True)
    if seed:
        seed_everything(cfg.simulator.seed)
    return run_dir
