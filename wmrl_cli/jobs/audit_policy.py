"""The judge audited on a fixed policy's imagined episodes, with no update (`wmrl eval --audit`).

RL's audit (`reward_model.audit_with_simulator`, rl/judge_audit.py) tallies the judge's verdict
against the simulator's replay of the same actions while the policy trains. This runs the same
env, the imagined env of RL (world model, reset set, reward model, verdict rule, confirming
draws) with the simulator replaying every episode, for one policy from seeded starts and
without a gradient step. Two world models, judges or verdict rules can then be compared on the
episodes a policy would train on before any RL is spent on them: the false calls it would be
rewarded for, and whether each is the judge's (it passes the real frame too) or the world
model's (it drew a success the simulator does not reach). Co-evolve's acceptance compares the
refinements of the world model this way for the evolved policy, and its per-task trust audits
each RL stage's inputs (docs/results.md#refining-the-world-model).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError
from wmrl_cli.jobs.assembly import build_env, load_policy
from wmrl_cli.jobs.inputs import Inputs, check_inputs
from wmrl_cli.rl.buffer import collect_rollout
from wmrl_cli.rl.judge_audit import JudgeAudit


def audit_config(cfg: RunConfig) -> RunConfig:
    """A copy of the RL config `cfg` whose imagined env the simulator audits."""
    if cfg.algorithm.env != "imagined":
        raise ConfigError(
            f"invalid value for 'algorithm.env': {cfg.algorithm.env!r}; the audit runs the "
            "policy in imagination (algorithm.env=imagined)"
        )
    if cfg.reward_model.source == "simulator" or not cfg.reward_model.path:
        raise ConfigError(
            "the audit checks a reward model's verdict: set reward_model.path (and "
            "reward_model.source=model or verified)"
        )
    cfg = cfg.model_copy(deep=True)
    # verified imagination's judge is audited alone: the audit's replays are its confirmation
    cfg.reward_model.source = "model"
    cfg.reward_model.exact_fraction = 0.0  # every episode is replayed already
    cfg.reward_model.task_recall_floor = 0.0
    cfg.reward_model.audit_with_simulator = True
    return cfg


def audit_policy(
    cfg: RunConfig,
    per_task: int,
    inputs: Inputs | None = None,
    device: str | None = None,
    out: Path | Callable[[], Path] | None = None,
) -> JudgeAudit:
    """`per_task` imagined episodes per task of `cfg.policy.name` from `world_model.reset_set`,
    judged as RL judges them and replayed in the simulator, tallied per task (into
    out/judge_audit.json where `out` is given, or into the directory `out()` claims once the
    inputs are checked: `wmrl eval --audit`). Starts, the policy's sampling and the world
    model's noise are seeded by `simulator.seed`. `inputs`: `check_inputs` of
    `audit_config(cfg)` where the caller has checked them already."""
    from wmrl_cli.jobs.imagine_policy import start_ids
    from wmrl_cli.logging import progress_task

    cfg = audit_config(cfg)
    # A config that cannot be audited, or a missing input, fails before `out()` makes a folder.
    inputs = inputs or check_inputs(cfg)
    run_dir = out() if callable(out) else out
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    seed = cfg.simulator.seed
    num_envs = cfg.algorithm.num_envs
    env = build_env(cfg, num_envs, device, inputs)
    try:
        ids = start_ids(env.entry_task_ids, per_task, seed)
        policy = load_policy(inputs, device)
        policy.eval()
        generator = torch.Generator().manual_seed(seed)  # the policy's sampling, as RL's
        env.generator.manual_seed(seed + 1)
        max_chunks = -(-cfg.algorithm.max_episode_steps // policy.chunk_size)
        audit = JudgeAudit(list(env.task_names))
        with progress_task("audit", len(ids), cfg.logging.progress) as advance:
            for start in range(0, len(ids), num_envs):
                batch = ids[start : start + num_envs]
                # A short last batch is padded (as envs/runner.py pads); the padding not counted.
                padded = batch + [batch[-1]] * (num_envs - len(batch))
                ro = collect_rollout(
                    env,
                    policy,
                    padded,
                    max_chunks,
                    cfg.policy.temperature,
                    cfg.policy.top_k,
                    generator,
                )
                k = len(batch)
                passes = ro.real_frame_passes
                audit.add(
                    ro.task_ids[:k].numpy(),
                    ro.success[:k].numpy(),
                    ro.real_success[:k].numpy(),
                    None if passes is None else passes[:k].numpy(),
                    real_steps=int(ro.episode_len[:k].sum()),
                )
                advance(k)
    finally:
        env.close()
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        audit.write(run_dir)
    return audit
