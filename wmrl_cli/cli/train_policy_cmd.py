"""`wmrl train-policy`: GRPO or PPO of the VLA policy inside the imagined env or the real
simulator (`--env`)."""

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
    SeedOpt,
    SetOpt,
    build_config,
    handle_errors,
    say_done,
)
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.logging import err_console
from wmrl_cli.ranks import check_not_single_rank_launch, relaunch_ranks
from wmrl_cli.run_dirs import expect_run_dir


@handle_errors
def train_policy_command(
    policy: Annotated[
        str | None,
        typer.Option(
            help="Base policy: a wmrl sft run, a policy dir (wmrl or prismatic) or an asset."
        ),
    ] = None,
    world_model: Annotated[
        str | None,
        typer.Option(
            help="A wmrl train-wm run, a model dir, an RLinf Wan/OpenSora dir or an asset."
        ),
    ] = None,
    reward_model: Annotated[
        str | None,
        typer.Option(help="A wmrl train-reward run, a model dir, an RLinf .pth or an asset."),
    ] = None,
    reset_set: Annotated[
        str | None,
        typer.Option(help="Initial states: an episode store, an RLinf folder or an asset."),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="Where rollouts run: imagined (world + reward model, the default) or simulator "
            "(the real one; needs only --policy). Config: algorithm.env.",
        ),
    ] = None,
    assets_dir: AssetsDirOpt = None,
    steps: Annotated[int | None, typer.Option(help="RL steps (rollout + update).")] = None,
    num_processes: Annotated[
        int, typer.Option(help="Processes (ranks) to launch; use 1 under accelerate launch.")
    ] = 1,
    seed: SeedOpt = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    out: OutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    log_with: LogWithOpt = None,
    plan: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Print the memory plan per GPU for these settings and --num-processes, then "
            "exit (2 where it does not fit): nothing is downloaded or written and no model "
            "loads; assets not downloaded count at their published size. Plan for another GPU "
            "with --set training.memory_budget_gb=GIB.",
        ),
    ] = False,
) -> None:
    """GRPO/PPO in imagination (the policy and the world model alternate chunk by chunk, the reward model scores every frame) or, with --env simulator, in the real simulator; token-level clipped updates; periodic evaluation in the real simulator. Starting the same command again resumes from RUN/checkpoints."""  # noqa: E501
    check_not_single_rank_launch()
    cfg = build_config(
        preset,
        set_,
        log_with=log_with,
        policy__name=policy,
        world_model__path=world_model,
        reward_model__path=reward_model,
        world_model__reset_set=reset_set,
        algorithm__env=env,
        assets_dir=assets_dir,
        training__steps=steps,
        simulator__seed=seed,
        output_dir=out,
    )
    from wmrl_cli.jobs.inputs import check_inputs, exact_groups
    from wmrl_cli.rl.schedule import check_world_size
    from wmrl_cli.run_dirs import adopt_recorded_config, claim_run_dir, default_run_dir

    # What the run will use: with --resume, the recorded config (so that `--out RUN --resume`
    # alone continues RUN); claim_run_dir below adopts it into cfg and says what it ignored.
    effective = cfg.model_copy(deep=True)
    if resume:
        adopt_recorded_config(effective, default_run_dir("train-policy", preset))

    def _claim(inputs) -> dict:
        """The run-directory rule's arguments: the inputs fingerprinted by their paths."""
        paths = {
            "policy": inputs.policy,
            "world_model": inputs.world_model,
            "reward_model": inputs.reward_model,
            "reset_set": inputs.reset_set,
        }
        default = default_run_dir("train-policy", preset)
        return dict(default=default, inputs=paths, resume=resume, overwrite=overwrite)

    if "LOCAL_RANK" not in os.environ:  # checked before any rank starts
        check_world_size(
            effective.algorithm.num_envs, effective.algorithm.group_size, num_processes
        )
        exact_groups(effective, effective.algorithm.num_envs // num_processes)
    if plan:
        if "LOCAL_RANK" in os.environ:  # every rank would print, each with the wrong rank count
            raise ConfigError(
                "--plan runs in one process: start it without accelerate launch or torchrun, "
                "with --num-processes N for N ranks"
            )
        from wmrl_cli.jobs.plan import print_launch_plan

        print_launch_plan(effective, num_processes)
        return
    if num_processes > 1 and "LOCAL_RANK" not in os.environ:
        if cfg.output_dir is None:
            raise ConfigError("--num-processes needs --out so that every rank writes one run")
        from wmrl_cli.memory.budget import check_rl_memory

        launched = check_inputs(effective)
        check_rl_memory(effective, launched, num_processes, host=True)  # before any rank
        claim_run_dir(  # the rule, checked only: the ranks apply it
            cfg.model_copy(deep=True), "train-policy", **_claim(launched), write=False
        )
        expect_run_dir(Path(cfg.output_dir))
        relaunch_ranks(num_processes)

    from wmrl_cli.jobs.train_policy import make_accelerator, train_policy
    from wmrl_cli.runtime import configure_threads, seed_everything

    inputs = check_inputs(effective)
    accelerator = make_accelerator(effective)
    if accelerator.num_processes > 1 and cfg.output_dir is None:
        raise WmrlError("several ranks need --out so that every rank writes to the same run")
    # every rank applies the run-directory rule (with --resume, each adopts the recorded
    # config); the main process writes
    claim_run_dir(cfg, "train-policy", **_claim(inputs), write=accelerator.is_main_process)
    accelerator.wait_for_everyone()
    configure_threads(cfg.num_threads)
    seed_everything(cfg.simulator.seed)
    trained = train_policy(cfg, Path(cfg.output_dir), inputs, accelerator)
    if accelerator.is_main_process:
        warn_if_no_update(Path(cfg.output_dir))
        found = ""
        if trained.last_eval is not None:
            step, success = trained.last_eval
            found = f"real success at step {step}: {100 * success:.1f}%"
        say_done("policy", trained.path, found)


def warn_if_no_update(run_dir: Path) -> None:
    """A warning where the run's gradients were all zero: no step changed the policy (the rule
    co-evolve's report applies to each RL stage)."""
    from wmrl_cli.rl.activity import no_update_reason, rl_activity

    activity = rl_activity(run_dir)
    why = no_update_reason(activity) if activity is not None else None
    if why:
        err_console.print(
            f"warning: train-policy made no update: {why}",
            style="yellow",
            soft_wrap=True,
            markup=False,
        )
