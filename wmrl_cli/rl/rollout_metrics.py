"""A rollout's per-step metrics: its advantages, rewards and successes and, where a run has
both verdicts (the judge audited by the simulator, or the simulator judging beside the judge),
how often the learned verdict RL trains on is true."""

from __future__ import annotations

import torch

from wmrl_cli.rl.buffer import Rollout
from wmrl_cli.rl.reductions import masked_mean, masked_stats


def judge_and_truth(ro: Rollout) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the reward model's verdict, the simulator's) on each episode, where a run has both;
    else None."""
    if ro.model_success is not None:  # the reward model judged beside the simulator
        return ro.model_success, ro.success
    if ro.real_success is not None:  # the simulator audited the reward model's verdict
        return ro.success, ro.real_success
    return None


def rollout_metrics(ro: Rollout, adv: torch.Tensor, keep: torch.Tensor) -> dict[str, float]:
    """A rollout's per-step metrics (RLinf's names): the advantages over the kept groups
    (`keep` [B]), rewards, episode length, return and success and, where the run has two
    verdicts, the judge against the simulator (env/model_*)."""
    mask = ro.step_mask
    adv_stats = masked_stats(adv, mask & keep[:, None])
    returns = (ro.rewards * mask).sum(1)
    metrics = {
        "rollout/advantages_max": float(adv_stats["max"]),
        "rollout/advantages_mean": float(adv_stats["mean"]),
        "rollout/advantages_min": float(adv_stats["min"]),
        "rollout/rewards": float(masked_mean(ro.rewards, mask)),
        "rollout/kept_groups_fraction": float(keep.float().mean()),
        "env/episode_len": float(ro.episode_len.float().mean()),
        "env/return": float(returns.mean()),
        "env/reward": float(masked_mean(ro.rewards, mask)),
        "env/success_once": float(ro.success.float().mean()),
    }
    verdicts = judge_and_truth(ro)
    if verdicts is not None:
        model, real = verdicts
        metrics["env/real_success_once"] = float(real.float().mean())
        metrics["env/model_success_once"] = float(model.float().mean())
        metrics["env/model_agreement"] = float((model == real).float().mean())
        metrics["env/model_false_success"] = float((model & ~real).float().mean())
        metrics["env/model_missed_success"] = float((~model & real).float().mean())
        if ro.real_frame_passes is not None:  # a false call: the judge's error or the WM's
            false = model & ~real
            on_real = (false & ro.real_frame_passes).float().mean()
            metrics["env/model_false_success_on_real_frame"] = float(on_real)
            imagined_only = (false & ~ro.real_frame_passes).float().mean()
            metrics["env/model_false_success_imagined_only"] = float(imagined_only)
    return metrics
