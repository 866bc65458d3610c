"""Real environment steps by what spent them, the quantity RL in a world model exists to save.

A run's `env/real_steps` is the sum of:
- `data`: what came before RL and the run was given (co-evolve's demonstrations, rollouts, the
  judge's labelled episodes: train-policy's `real_steps` argument);
- `rollouts`: RL's own episodes in the real simulator (`--env simulator`);
- `calls`: verified imagination's replays of the judge's calls (envs/verified.py);
- `exact`: episodes judged exactly, the simulator stepping beside the world model (the exact
  verdict, `reward_model.source=simulator`; the recall floor's groups).
Each is logged cumulatively as `env/real_steps_<kind>` beside the total, so that a method's cost
reads off its metrics split as its comparison needs (docs/results.md, "Real steps to gain").
"""

from __future__ import annotations

KINDS = ("data", "rollouts", "calls", "exact")


def taken_by_kind(env, episode_steps: int) -> dict[str, int]:
    """This process's real steps of one rollout in `env`, by kind: an env that counts its own
    (`pop_real_steps_by_kind`), else every executed step of an env whose steps are real, of its
    `real_kind` (default `rollouts`), else none (imagination)."""
    if hasattr(env, "pop_real_steps_by_kind"):
        return {k: int(v) for k, v in env.pop_real_steps_by_kind().items()}
    if getattr(env, "real", False):
        return {getattr(env, "real_kind", "rollouts"): int(episode_steps)}
    return {}


def real_step_metrics(by_kind: dict[str, int]) -> dict[str, float]:
    """`env/real_steps` and its split, cumulative."""
    metrics = {"env/real_steps": float(sum(by_kind.values()))}
    metrics.update({f"env/real_steps_{k}": float(by_kind.get(k, 0)) for k in KINDS})
    return metrics


def restored(extra: dict, data: int) -> dict[str, int]:
    """The split a checkpoint carries; one saved before the split existed carries its total
    only, counted as data (what its run started from and spent cannot be told apart)."""
    if "real_steps_by_kind" in extra:
        return {k: int(extra["real_steps_by_kind"].get(k, 0)) for k in KINDS}
    return dict(dict.fromkeys(KINDS, 0), data=int(extra.get("real_steps", data)))
