"""What an RL run's metrics say about its updates, and the warning for a run that made none:
one rule for `train-policy` (said when it ends) and co-evolve's report (each RL stage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.logging import read_metric_rows
from wmrl_cli.rl.real_step_kinds import KINDS

SUCCESS_WINDOW = 5  # RL steps averaged at each end of a run's training-success curve


def rl_activity(run_dir: Path) -> dict[str, Any] | None:
    """What an RL run's metrics.jsonl says about its updates: steps, the mean fraction of
    kept groups, the largest gradient norm, whether any step changed the policy, and the
    success of its training rollouts as its environment judged them (imagination: the reward
    model's verdict), averaged over the first and the last `SUCCESS_WINDOW` steps, and the real
    steps it spent by kind (rl/real_step_kinds.py; the data it started from left out), and with
    the anchor (`algorithm.bc_coef`) its loss over the same windows (None without metrics)."""
    rows = read_metric_rows(Path(run_dir))
    if not rows:
        return None
    kept = [float(r.get("rollout/kept_groups_fraction", 1.0)) for r in rows]
    grad = [float(r.get("train/actor/grad_norm", 0.0)) for r in rows]
    activity: dict[str, Any] = {
        "steps": len(rows),
        "kept_groups_fraction": float(np.mean(kept)),
        "max_grad_norm": max(grad),
        "updated": max(grad) > 0.0,
    }
    # algorithm.bc_coef: the anchor's loss on the real successes it clones
    for metric, name in (("env/success_once", "train_success"), ("train/bc/loss", "bc_loss")):
        values = [float(r[metric]) for r in rows if metric in r]
        if values:
            window = max(1, min(SUCCESS_WINDOW, len(values) // 2))
            activity[f"{name}_first"] = float(np.mean(values[:window]))
            activity[f"{name}_last"] = float(np.mean(values[-window:]))
    spent = {
        k: int(rows[-1][f"env/real_steps_{k}"])
        for k in KINDS[1:]
        if f"env/real_steps_{k}" in rows[-1]
    }
    if spent:  # runs logged before the split have none
        activity["real_steps_by_kind"] = spent
    return activity


def no_update_reason(activity: dict[str, Any]) -> str | None:
    """Why a run whose gradients were all zero changed nothing (None where it made an update):
    the sentence both the command's warning and co-evolve's report give."""
    if activity.get("updated", True):
        return None
    return (
        f"in its {activity['steps']} steps, kept groups {activity['kept_groups_fraction']:.2f} "
        f"on average and gradient norm {activity['max_grad_norm']:.3g} at most (every group "
        "had the same outcome, so GRPO had no signal); its policy moved only by AdamW's weight "
        "decay"
    )
