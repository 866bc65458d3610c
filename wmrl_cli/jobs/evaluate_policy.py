"""Evaluating a policy in the simulator, the job behind `wmrl eval --policy` and co-evolve's
evaluations: the policy built from the config, run on every task of the configured simulator
with fixed seeds (evaluation/policy_eval.py measures it), its report written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wmrl_cli.config import RunConfig
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.policy_eval import (
    EvalReport,
    compare_with_baseline,
    evaluate_with_config,
    load_baseline,
)


def evaluate_in_simulator(
    cfg: RunConfig,
    trials: int,
    out: Path | Callable[[], Path],
    *,
    videos: bool = False,
    baseline: Path | None = None,
    warn: Callable[[str], None] | None = None,
) -> EvalReport:
    """The job behind `wmrl eval --policy` and co-evolve's evaluations: `cfg.policy` (expert,
    random, a run, a checkpoint or a policy asset) on every task x `trials` of the configured
    simulator with fixed seeds, written to `out` (or to the directory `out()` claims once the
    policy has loaded). `videos`: every frame rendered, an mp4 per episode and a grid per task;
    `baseline`: an earlier report, compared episode by episode; `warn` is told where the
    policy runs outside the setting it was trained in."""
    from wmrl_cli.policies.registry import build_policy, policy_mismatches
    from wmrl_cli.sims.backends import (
        check_scripted_policy,
        resolve_simulator,
        simulator_action_dim,
        simulator_class,
        simulator_suite,
    )

    sim_cfg = resolve_simulator(cfg.simulator)
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
    if warn is not None and (
        warning := policy_mismatches(
            cfg.policy.name, agent, sim_cfg.suite, sim_cfg.image_size, sim_cfg.chunk_size
        )
    ):
        warn(warning)
    run_dir = out() if callable(out) else out
    run_dir.mkdir(parents=True, exist_ok=True)
    # Without videos only the frames the policy observes are rendered.
    with simulator(sim_cfg, render_every_step=videos) as sim:
        report = evaluate_with_config(
            sim, agent, sim_cfg, cfg, trials, video_dir=run_dir / "videos" if videos else None
        )
    report.policy = cfg.policy.name  # as given (a run's folder is often named `policy`)
    if before is not None:
        report.baseline = compare_with_baseline(report, before)
    report.save(run_dir)
    return report
