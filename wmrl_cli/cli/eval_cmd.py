"""`wmrl eval`: success rate of a policy in the real simulator, per task, with videos."""

from __future__ import annotations

from typing import Annotated

import typer

from wmrl_cli.cli.common import (
    EpisodesOpt,
    GreedyOpt,
    ImageSizeOpt,
    NoiseOpt,
    NumEnvsOpt,
    OutOpt,
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
from wmrl_cli.runtime import configure_threads, prepare_run_dir, seed_everything


@handle_errors
def eval_command(
    policy: PolicyOpt = None,
    suite: SuiteOpt = None,
    episodes_per_task: EpisodesOpt = None,
    save_video: Annotated[
        bool, typer.Option("--save-video", help="Write one mp4 per episode and a grid per task.")
    ] = False,
    temperature: TemperatureOpt = None,
    greedy: GreedyOpt = False,
    noise_std: NoiseOpt = None,
    seed: SeedOpt = None,
    num_envs: NumEnvsOpt = None,
    num_workers: WorkersOpt = None,
    image_size: ImageSizeOpt = None,
    out: OutOpt = None,
    preset: PresetOpt = None,
    set_: SetOpt = None,
) -> None:
    """Evaluate a policy on every task x trial of a suite with fixed seeds (success_once)."""
    from wmrl_cli.evaluation.policy_eval import evaluate_policy
    from wmrl_cli.policies.registry import build_policy
    from wmrl_cli.sims.metaworld_sim import ACTION_DIM, MetaWorldSim
    from wmrl_cli.sims.suites import get_suite

    cfg = build_config(
        preset,
        set_,
        policy__name=policy,
        simulator__suite=suite,
        eval__episodes_per_task=episodes_per_task,
        eval__save_video=save_video or None,
        policy__temperature=temperature,
        policy__greedy=greedy or None,
        policy__noise_std=noise_std,
        simulator__seed=seed,
        simulator__num_envs=num_envs,
        simulator__num_workers=num_workers,
        simulator__image_size=image_size,
        output_dir=out,
    )
    sim_cfg = cfg.simulator
    agent = build_policy(
        cfg.policy, get_suite(sim_cfg.suite), ACTION_DIM, sim_cfg.chunk_size, seed=sim_cfg.seed
    )
    run_dir = prepare_run_dir(cfg, "eval")
    configure_threads(cfg.num_threads)
    seed_everything(sim_cfg.seed)
    with MetaWorldSim(sim_cfg) as sim:
        report = evaluate_policy(
            sim,
            agent,
            suite=sim_cfg.suite,
            trials=cfg.eval.episodes_per_task,
            chunk_size=sim_cfg.chunk_size,
            base_seed=sim_cfg.seed,
            sample=not cfg.policy.greedy,
            temperature=cfg.policy.temperature,
            video_dir=run_dir / "videos" if cfg.eval.save_video else None,
            fps=cfg.eval.video_fps,
            progress=cfg.logging.progress,
        )
    report.save(run_dir)
    console.print(report.table())
    console.print(f"report: {run_dir / 'report.json'}")
