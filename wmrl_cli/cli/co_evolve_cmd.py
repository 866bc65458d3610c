"""`wmrl co-evolve`: the whole method end to end, resumable stage by stage."""

from __future__ import annotations

import os
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
from wmrl_cli.logging import console

PROFILES = {"default": "mw-coevolve", "smoke": "mw-coevolve-smoke", "long": "mw-coevolve-long"}
# What a whole run of each profile takes, said when it starts (docs/results.md: the default
# profile's 2.86 h on 2 cores, the simulator control included).
PROFILE_TIMES = {
    "default": "about 3 hours on a 2-core CPU",
    "smoke": "a few minutes on a 2-core CPU",
    "long": "hours per seed on a GPU, days on a 2-core CPU",
}


@handle_errors
def co_evolve_command(
    profile: Annotated[
        str,
        typer.Option(
            help="default (the embedded main job), smoke (minutes, for CI) or long (the research "
            "profile: 25 RL steps per stage, evaluated every 5).",
            autocompletion=lambda incomplete: [p for p in PROFILES if p.startswith(incomplete)],
        ),
    ] = "default",
    seed: SeedOpt = None,
    resume: ResumeOpt = False,
    overwrite: OverwriteOpt = False,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Continue the run in --out with this command's configuration: the finished "
            "stages it does not affect are kept, the others (and every stage built on them) "
            "run again.",
        ),
    ] = False,
    num_processes: Annotated[
        int,
        typer.Option(
            help="Processes (ranks, one GPU each) every RL and world-model stage trains on, "
            "as train-policy and train-wm --num-processes; the other stages run in this one.",
        ),
    ] = 1,
    assets_dir: AssetsDirOpt = None,
    out: OutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
    log_with: LogWithOpt = None,
) -> None:
    """Expert demos -> SFT base policy -> base rollouts -> world model + reward model (Meta-World), or the published policy, world model, reward model and reset set (LIBERO presets: --preset wan-spatial-coevolve) -> RL stage 1 -> real rollouts of the evolved policy -> refinement -> RL stage 2, with real-simulator evaluation after every stage and report.md / report.json / a success plot. Run the same command again to resume an interrupted run."""  # noqa: E501
    from wmrl_cli.coevolve.pipeline import co_evolve, prepare_co_evolve
    from wmrl_cli.errors import ConfigError
    from wmrl_cli.run_dirs import claim_run_dir, default_run_dir
    from wmrl_cli.runtime import configure_threads, seed_everything

    if "LOCAL_RANK" in os.environ:  # every rank would run the whole pipeline
        raise ConfigError(
            "co-evolve runs in one process: start it without torchrun or accelerate launch, "
            "with --num-processes N for its RL stages on N ranks"
        )
    if profile not in PROFILES:
        raise ConfigError(f"unknown profile '{profile}': expected {', '.join(PROFILES)}")
    cfg = build_config(
        preset or PROFILES[profile],
        set_,
        log_with=log_with,
        simulator__seed=seed,
        assets_dir=assets_dir,
        output_dir=out,
    )
    # the simulator, the given models and their memory plan, before anything is written
    prepare_co_evolve(cfg, num_processes)
    named = preset or (profile if profile != "default" else None)
    run_dir = claim_run_dir(
        cfg,
        "co-evolve",
        default=default_run_dir("co-evolve", named),
        resume=resume,
        overwrite=overwrite,
        update=update,
    )
    if preset is None:
        console.print(
            f"co-evolve --profile {profile}: {PROFILE_TIMES[profile]} for the whole run; "
            "interrupted, the same command resumes it"
        )
    configure_threads(cfg.num_threads)
    seed_everything(cfg.simulator.seed)
    report = co_evolve(cfg, run_dir, num_processes)
    rows = ", ".join(f"{stage} {100 * r['overall']:.1f}%" for stage, r in report["success"].items())
    say_done("report (report.md, report.json)", run_dir, f"real success: {rows}")
