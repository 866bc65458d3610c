"""`wmrl eval`: success rate of a policy in the real simulator, per task, with videos; with
`--world-model`, the reliability of a world model (evaluation/reliability.py); with
`--reward-model` alone, how a reward model's scores match the simulator's success labels on
stored episodes (evaluation/reward_eval.py)."""

from __future__ import annotations

from pathlib import Path
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
from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.logging import console, err_console
from wmrl_cli.runtime import configure_threads, prepare_run_dir, seed_everything

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
    from wmrl_cli.runtime import own_run_dir

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
        bool, typer.Option("--save-video", help="Write one mp4 per episode and a grid per task.")
    ] = False,
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
    from wmrl_cli.evaluation.policy_eval import (
        compare_with_baseline,
        evaluate_with_config,
        load_baseline,
    )
    from wmrl_cli.policies.registry import build_policy, policy_mismatches
    from wmrl_cli.sims.backends import (
        check_scripted_policy,
        resolve_simulator,
        simulator_action_dim,
        simulator_class,
        simulator_suite,
    )

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
        world_model__path=None if world_model is None else str(world_model),
        world_model__val_horizon=horizon,
        reward_model__path=None if reward_model is None else str(reward_model),
        output_dir=out,
    )
    if audit:
        _audit_policy(cfg)
        return
    if world_model is not None:
        _eval_world_model(cfg, data, with_policy=policy is not None)
        return
    if reward_model is not None:
        _eval_reward_model(cfg, data)
        return
    cfg.simulator = sim_cfg = resolve_simulator(cfg.simulator)
    before = None if baseline is None else load_baseline(baseline)
    if before is not None and before["suite"] != sim_cfg.suite:
        raise WmrlError(
            f"--baseline {baseline} evaluated {before['suite']}, this run {sim_cfg.suite}"
        )
    check_scripted_policy(sim_cfg, cfg.policy.name)
    simulator = simulator_class(sim_cfg)  # LIBERO: fails here if it is not installed
    agent = build_policy(
        cfg.policy,
        simulator_suite(sim_cfg),
        simulator_action_dim(sim_cfg),
        sim_cfg.chunk_size,
        seed=sim_cfg.seed,
        assets_dir=cfg.assets_dir,
    )
    warning = policy_mismatches(
        cfg.policy.name, agent, sim_cfg.suite, sim_cfg.image_size, sim_cfg.chunk_size
    )
    if warning:
        err_console.print(warning, style="yellow", soft_wrap=True, markup=False)
    run_dir = prepare_run_dir(cfg, "eval", overwrite=True)  # check_out_dir allowed it
    configure_threads(cfg.num_threads)
    seed_everything(sim_cfg.seed)
    # Without videos only the frames the policy observes are rendered.
    with simulator(sim_cfg, render_every_step=cfg.eval.save_video) as sim:
        report = evaluate_with_config(
            sim,
            agent,
            sim_cfg,
            cfg,
            cfg.eval.episodes_per_task,
            video_dir=run_dir / "videos" if cfg.eval.save_video else None,
        )
    if before is not None:
        report.baseline = compare_with_baseline(report, before)
    report.save(run_dir)
    console.print(report.table())
    if report.baseline is not None:
        console.print(baseline_table(report.baseline))
    console.print(f"report: {run_dir / 'report.json'}")


def baseline_table(comparison: dict):
    from rich.table import Table

    from wmrl_cli.evaluation.stats import format_difference

    table = Table(title=f"against {comparison['path']} (paired, bootstrap 95%)")
    for column in ("task", "episodes", "baseline", "this run", "difference [95%]"):
        table.add_column(column, justify="left" if column == "task" else "right")
    rows = [*comparison["per_task"].items(), ("overall", comparison["overall"])]
    for i, (task, d) in enumerate(rows):
        if i == len(rows) - 1:
            table.add_section()
        table.add_row(
            task,
            str(d["episodes"]),
            f"{100 * d['rate_a']:.1f}%",
            f"{100 * d['rate_b']:.1f}%",
            format_difference(d),
        )
    return table


def _audit_policy(cfg: RunConfig) -> None:
    """`wmrl eval --audit`: the judge's verdict on the policy's imagined episodes against the
    simulator's replay of them (rl/policy_audit.py)."""
    from wmrl_cli.rl.policy_audit import audit_config, audit_policy
    from wmrl_cli.rl.setup import check_inputs

    # A config that cannot be audited, or a missing input, fails before the run folder exists.
    inputs = check_inputs(audit_config(cfg))
    run_dir = prepare_run_dir(cfg, "eval", overwrite=True)  # check_out_dir allowed it
    configure_threads(cfg.num_threads)
    seed_everything(cfg.simulator.seed)
    tally = audit_policy(cfg, cfg.eval.episodes_per_task, inputs)
    path = tally.write(run_dir)
    console.print(tally.table("the judge on the policy's imagined episodes (simulator replay)"))
    console.print(f"audit: {path}")


def _eval_world_model(cfg: RunConfig, data: Path | None, with_policy: bool = False) -> None:
    """`wmrl eval --world-model`: checks the paths, loads, and hands over to the library. With
    `with_policy` (--policy given), cfg.policy's shift between real and imagined frames too."""
    import torch

    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.evaluation.reliability import (
        episodes_per_task,
        evaluate_world_model,
        load_reward_model_from,
        verdict_threshold,
    )
    from wmrl_cli.policies.registry import SCRIPTED, load_learned_policy
    from wmrl_cli.rl.setup import load_imagining_world_model

    wm_path, rm_path = cfg.world_model.path, cfg.reward_model.path
    if data is None:
        raise WmrlError("--world-model needs --data STORE: the episodes to evaluate it on")
    if rm_path is None:
        raise WmrlError("--world-model needs --reward-model PATH to judge imagined success")
    if not Path(wm_path).exists():
        raise WmrlError(
            f"{wm_path}: no such world model (expected a train-wm run, a model directory or an "
            "RLinf Wan/OpenSora directory)"
        )
    if with_policy and cfg.policy.name in SCRIPTED:
        raise WmrlError(
            f"--policy {cfg.policy.name} with --world-model: the policy shift needs a learned "
            "policy's action distribution (a policy checkpoint or asset name)"
        )
    store = EpisodeStore.open(data)
    ids = episodes_per_task(store, cfg.eval.episodes_per_task)
    if not ids:
        raise WmrlError(f"{data}: the episode store holds no episodes")
    chunk = store.load(ids[0]).chunk_size
    if with_policy and cfg.world_model.val_horizon < chunk:
        raise WmrlError(
            f"--policy with --world-model reads the policy at chunk boundaries: --horizon must "
            f"be at least one chunk ({chunk} steps), got {cfg.world_model.val_horizon}"
        )
    configure_threads(cfg.num_threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rm = load_reward_model_from(rm_path).to(device)
    policy = None
    if with_policy:
        policy = load_learned_policy(
            cfg.policy.name, top_k=cfg.policy.top_k, device=device, assets_dir=cfg.assets_dir
        ).model
    height, width = store.load(ids[0]).frames.shape[1:3]  # a published model's frame size
    wm = load_imagining_world_model(Path(wm_path), height, width, cfg, device)
    # only once the inputs are known to be good; check_out_dir allowed an overwrite
    run_dir = prepare_run_dir(cfg, "eval-wm", overwrite=True)
    seed_everything(cfg.simulator.seed)
    threshold, source = verdict_threshold(cfg.reward_model, rm, rm_path)
    report = evaluate_world_model(
        wm,
        rm,
        store,
        ids,
        cfg.simulator,
        horizon=cfg.world_model.val_horizon,
        threshold=threshold,
        threshold_source=source,
        success_frames=cfg.reward_model.success_frames,
        progress=cfg.logging.progress,
        seed=cfg.simulator.seed,
        world_model_name=str(wm_path),
        reward_model_name=str(rm_path),
        policy=policy,
        policy_temperature=cfg.policy.temperature,
    )
    report.save(run_dir, save_video=cfg.eval.save_video, fps=cfg.eval.video_fps)
    console.print(report.table())
    console.print(f"report: {run_dir / 'report.json'}")


def _eval_reward_model(cfg: RunConfig, data: Path | None) -> None:
    """`wmrl eval --reward-model R --data STORE`: frame- and episode-level precision, recall and
    F1 of the reward model against the simulator's success labels."""
    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.evaluation.reliability import (
        episodes_per_task,
        load_reward_model_from,
        verdict_threshold,
    )
    from wmrl_cli.evaluation.reward_eval import evaluate_reward_model

    rm_path = cfg.reward_model.path
    if data is None:
        raise WmrlError("--reward-model needs --data STORE: the episodes to score")
    store = EpisodeStore.open(data)
    ids = episodes_per_task(store, cfg.eval.episodes_per_task)
    if not ids:
        raise WmrlError(f"{data}: the episode store holds no episodes")
    configure_threads(cfg.num_threads)
    rm = load_reward_model_from(rm_path)
    threshold, source = verdict_threshold(cfg.reward_model, rm, rm_path)
    # only once the inputs are known to be good; check_out_dir allowed an overwrite
    run_dir = prepare_run_dir(cfg, "eval-rm", overwrite=True)
    report = evaluate_reward_model(rm, store, ids, threshold, source, str(rm_path))
    report.save(run_dir)
    console.print(report.table())
    console.print(f"report: {run_dir / 'report.json'}")
