"""Between a world model's training and RL in it (`wmrl co-evolve`): check that the world model
can carry a learning signal, and recalibrate the reward model's threshold on its frames.

The check is `wmrl eval --world-model` on the world model's own validation episodes (those it
never trained on): open-loop rollouts under the recorded and other actions, and imagined vs
real success from the episodes' start points and KIR keyframes, each replayed in the simulator
from the stored state. Two things follow from it:

- **the threshold** RL judges imagined success with: a reward model calibrated on real frames
  scores imagined frames lower (docs/results.md: recall 0.36 at its own threshold, 0.75 once
  recalibrated), so RL uses the best-F1 threshold on the imagined scores;
- **the gate**: when the action gap or the recall of imagined success (counted out of sample,
  2-fold by episode) is below its floor (`coevolve.min_action_gap_db`,
  `coevolve.min_imagined_recall`), the pipeline stops with the measured values rather than
  spend hours of RL on groups whose outcome the actions cannot change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wmrl_cli.config import RunConfig
from wmrl_cli.errors import WmrlError

GATE_STEP = 8  # the horizon step whose action gap the gate reads (one chunk of 8 actions)


def gate_check(
    cfg: RunConfig, out: Path, world_model: str, reward_model: str, data: str
) -> dict[str, Any]:
    """Evaluate `world_model` on the validation episodes of `data` (`eval --world-model`'s job)
    and return what the gate and the RL stage need (the full report goes to out/report.md and
    out/report.json; with coevolve.videos, the real episodes beside the world model's
    imagination of them, out/videos/open_loop_truth_vs_model.mp4)."""
    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.jobs import check_models
    from wmrl_cli.training.world_model_batches import split_episodes

    store = EpisodeStore.open(data)
    _, val_ids = split_episodes(store, cfg)
    ids = val_ids[: cfg.coevolve.check_episodes]
    if not ids:
        raise WmrlError(f"{data}: no validation episode to check the world model on")
    report = check_models.check_world_model(
        cfg,
        world_model,
        reward_model,
        store,
        ids,
        out,
        hand_tracking=False,  # not what the gate reads; `wmrl eval --world-model` reports it
        save_video=cfg.coevolve.videos,
    )
    return summarize(report, cfg.coevolve.recalibrate_threshold)


def summarize(report: Any, recalibrate: bool) -> dict[str, Any]:
    """The check's figures: action gap and response ratio at the gate's step and at the
    horizon, agreement at the reward model's threshold and at the recalibrated one (out of
    sample), and the threshold RL is to use."""
    loop, horizon = report.open_loop, report.horizon
    step = min(GATE_STEP, horizon)
    ratio = loop.response_ratio
    calibrated, cv = report.imagined_calibration, report.imagined_calibration_cv
    use_recalibrated = recalibrate and calibrated is not None
    return {
        "gate_step": step,
        "episodes": report.episodes,
        "starts": report.agreement.total,
        f"action_gap@{step}": loop.action_gap(step),
        f"action_gap@{horizon}": loop.action_gap(horizon),
        f"response_ratio@{step}": None if ratio is None else ratio[step - 1],
        f"response_ratio@{horizon}": None if ratio is None else ratio[horizon - 1],
        "reward_threshold": report.threshold,
        "precision_at_reward_threshold": report.agreement.precision,
        "recall_at_reward_threshold": report.agreement.recall,
        "recalibrated_threshold": None if calibrated is None else calibrated.threshold,
        "recalibrated_precision_cv": None if cv is None else cv.precision,
        "recalibrated_recall_cv": None if cv is None else cv.recall,
        "rl_threshold": calibrated.threshold if use_recalibrated else report.threshold,
        "real_steps": report.simulator_steps,
    }


def gate_failures(check: dict[str, Any], cfg: RunConfig) -> list[str]:
    """What falls below the configured floors (empty: RL may start)."""
    ce = cfg.coevolve
    failures = []
    gap = check.get(f"action_gap@{check.get('gate_step', GATE_STEP)}")
    if ce.min_action_gap_db is not None and (gap is None or gap < ce.min_action_gap_db):
        shown = "unmeasured" if gap is None else f"{gap:+.2f} dB"
        failures.append(
            f"action gap at step {GATE_STEP} {shown} < {ce.min_action_gap_db} "
            "(coevolve.min_action_gap_db)"
        )
    if ce.min_imagined_recall is not None:
        recall = (
            check["recalibrated_recall_cv"]
            if ce.recalibrate_threshold
            else check["recall_at_reward_threshold"]
        )
        if recall is None or recall < ce.min_imagined_recall:
            shown = (
                "unmeasured (no real success among the starts)"
                if recall is None
                else (f"{recall:.2f}")
            )
            failures.append(
                f"recall of imagined success {shown} < {ce.min_imagined_recall} "
                "(coevolve.min_imagined_recall)"
            )
    return failures


def enforce_gate(name: str, check: dict[str, Any], cfg: RunConfig, report_dir: Path) -> None:
    failures = gate_failures(check, cfg)
    if failures:
        raise WmrlError(
            f"world model {name} failed the health check before RL: {'; '.join(failures)}. "
            f"RL in it would get no signal from its actions; see {report_dir / 'report.md'}. "
            "Train the world model longer or on more varied actions, or lower the floor "
            "(--set coevolve.min_action_gap_db=... / coevolve.min_imagined_recall=...)"
        )
