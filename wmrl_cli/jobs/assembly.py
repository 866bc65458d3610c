"""Assembling RL from its resolved inputs (jobs/inputs.py): the policy, the env of this rank
(imagined; verified or judged by the real simulator with `reward_model.source`; or the real
simulator with `algorithm.env=simulator`), the line that names its verdict, and the
real-simulator evaluation callback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from wmrl_cli.config import RunConfig
from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.envs.interface import Env
from wmrl_cli.envs.simulator_judged import SimulatorJudgedEnv
from wmrl_cli.envs.simulator_rl import SimulatorRLEnv, StoredStartsSimulatorEnv
from wmrl_cli.envs.verified import VerifiedEnv
from wmrl_cli.errors import ConfigError
from wmrl_cli.jobs.inputs import (
    Inputs,
    evaluation_simulator,
    exact_groups,
    load_reset_set,
    replays_in_simulator,
    resolve_inputs,
    reward_task_ids,
)
from wmrl_cli.rewards.calibration import judge_threshold
from wmrl_cli.sims.backends import resolve_simulator, simulator_class
from wmrl_cli.world_models.loading import load_imagining_world_model


def rl_simulator(cfg: RunConfig, num_envs: int, max_steps: int | None = None) -> Env:
    """`num_envs` real simulator envs as RL steps them: episodes truncated at `max_steps`
    (default `algorithm.max_episode_steps`) by the simulator itself, terminated at success."""
    limit = max_steps or cfg.algorithm.max_episode_steps
    sim_cfg = resolve_simulator(cfg.simulator).model_copy(
        update={"max_steps": limit, "terminate_on_success": True}
    )
    # RL reads the observations at chunk ends and the per-step success flags, never the frames
    # between.
    return simulator_class(sim_cfg)(sim_cfg, num_envs, render_every_step=False)


def build_simulator_env(
    cfg: RunConfig, num_envs: int, inputs: Inputs | None = None
) -> SimulatorRLEnv | StoredStartsSimulatorEnv:
    """The real simulator as the RL env of this rank (`algorithm.env=simulator`): from fresh
    training init ids, or, with `world_model.reset_set`, from that reset set's stored states
    with imagination's step counting (the start-distribution control)."""
    reset_set = inputs.reset_set if inputs is not None else cfg.world_model.reset_set
    if reset_set:
        entries, task_names = load_reset_set(cfg, Path(reset_set))
        horizon = cfg.algorithm.max_episode_steps + max(e.step for e in entries)
        return StoredStartsSimulatorEnv(
            rl_simulator(cfg, num_envs, max_steps=min(horizon + 1, 10_000)),
            entries,
            task_names,
            cfg.algorithm.max_episode_steps,
            kir_step_reset=cfg.algorithm.kir_step_reset,
            reward_coef=cfg.reward_model.reward_coef,
        )
    sim = rl_simulator(cfg, num_envs)
    return SimulatorRLEnv(
        sim,
        cfg.algorithm.sim_init_ids,
        cfg.algorithm.sim_init_offset,
        reward_coef=cfg.reward_model.reward_coef,
    )


def build_env(cfg: RunConfig, num_envs: int, device: str, inputs: Inputs | None = None) -> Env:
    """The RL env `algorithm.env` names, with `num_envs` envs (one rank's share)."""
    if cfg.algorithm.env == "simulator":  # no judge: the reward model's settings are moot
        return build_simulator_env(cfg, num_envs, inputs)
    exact = exact_groups(cfg, num_envs)  # checked before any model loads
    imagined = build_imagined_env(cfg, num_envs, device, inputs)
    if not replays_in_simulator(cfg):
        return imagined
    # The simulator never truncates first: the imagined env's step count decides, as it does
    # for keyframe entries recorded past the episode limit.
    horizon = cfg.algorithm.max_episode_steps + max(e.step for e in imagined.reset_set)
    limit = min(horizon + 1, 10_000)
    if cfg.reward_model.source == "verified":  # the judge's calls replayed, one at a time
        if cfg.reward_model.audit_with_simulator:
            raise ConfigError(
                "invalid value for 'reward_model.audit_with_simulator': "
                "reward_model.source=verified replays every call already"
            )
        keep = cfg.reward_model.keep_verified_calls
        replay = rl_simulator(cfg, 1, max_steps=limit)
        # the recall floor's envs are the first groups of every reset: the sampler draws a
        # rollout's groups in random order (envs/reset_sampler.py), a random sample of starts
        # (the per-task floor's, any env of a reset: the simulator has one beside each)
        by_task = cfg.reward_model.task_recall_floor > 0
        first = exact * cfg.algorithm.group_size
        sim_envs = num_envs if by_task else first
        exact_sim = rl_simulator(cfg, sim_envs, max_steps=limit) if sim_envs else None
        return VerifiedEnv(
            imagined,
            replay,
            keep,
            exact_sim,
            exact_first=first,
            exact_by_task=by_task,
            refuted_calls=cfg.reward_model.refuted_calls,
        )
    sim = rl_simulator(cfg, num_envs, max_steps=limit)
    coef = cfg.reward_model.reward_coef
    if cfg.reward_model.source == "model":  # the audit: the reward model judges as always
        if imagined.reward_model is None:
            raise ConfigError("reward_model.audit_with_simulator needs a reward model to audit")
        return SimulatorJudgedEnv(imagined, sim, reward_coef=coef, judge="model")
    # The control: imagined observations, the simulator's verdict; the reward model (if any)
    # only recorded beside it.
    threshold, imagined.threshold = imagined.threshold, float("inf")
    env = SimulatorJudgedEnv(imagined, sim, reward_coef=coef)
    if imagined.reward_model is not None:
        env.model_threshold = threshold
    return env


def verdict_line(env: Env, inputs: Inputs) -> str | None:
    """One line for the run's log: who judges success in `env` and at what threshold (None in
    the real simulator, where success is the simulator's own)."""
    judged = isinstance(env, SimulatorJudgedEnv)
    imagined = env.imagined if judged or isinstance(env, VerifiedEnv) else env
    if not isinstance(imagined, ImaginedEnv):
        return None
    replay = "the simulator replaying each episode's actions (real steps)"
    if judged and env.judge == "simulator":
        return f"success judged by {replay}"
    held = imagined.success_frames
    line = (
        f"success judged by {inputs.reward_model} at threshold {imagined.threshold:.3f} "
        f"({imagined.threshold_source})"
        + (", on scores rounded to 0/1 (p > 0.5)" if imagined.round_scores else "")
        + (f", held {held} frames" if held > 1 else "")
        + (
            f", repeated by {imagined.confirm_draws} other world-model draw(s)"
            + (
                f" of {', '.join(map(str, inputs.confirm_world_models))}"
                if inputs.confirm_world_models
                else ""
            )
            if imagined.confirm_draws
            else ""
        )
    )
    if isinstance(env, VerifiedEnv):
        line = f"{line}; each call confirmed by the simulator replaying it (real steps)"
        if env.exact_first:
            line += f"; the first {env.exact_first} of {env.num_envs} envs judged by the simulator"
        if env.exact_by_task:
            line += (
                "; a task's envs judged by the simulator until the judge shows its recall "
                "there (reward_model.task_recall_floor)"
            )
        return line
    return f"{line}; audited by {replay}" if judged else line


def load_policy(inputs: Inputs, device: str, dtype: str = "float32"):
    """The base policy, with the asset's unnorm key. A published (prismatic) checkpoint, stored
    in bf16, loads in `dtype`: RL's weights' dtype (`training.param_dtype`: float32 master
    weights by default, training.bf16 turning on bf16 autocast); a wmrl policy as it was saved."""
    from wmrl_cli.policies.checkpoint import from_pretrained, is_prismatic, read_config

    dtype = dtype if is_prismatic(read_config(inputs.policy)) else None
    return from_pretrained(inputs.policy, device=device, dtype=dtype, unnorm_key=inputs.unnorm_key)


def build_imagined_env(
    cfg: RunConfig, num_envs: int, device: str, inputs: Inputs | None = None
) -> ImaginedEnv:
    from wmrl_cli.rewards.loading import load_reward_model

    inputs = inputs or resolve_inputs(cfg)
    entries, task_names = load_reset_set(cfg, inputs.reset_set)
    height, width = entries[0].reference.shape[:2]
    world_model = load_imagining_world_model(inputs.world_model, height, width, cfg, device)
    if cfg.compile_world_model:  # imagination only: nothing here trains the world model
        world_model.compile_for_imagination()
    reward_model = None
    if inputs.reward_model is not None:  # None: reward_model.source=simulator judges alone
        reward_model = load_reward_model(inputs.reward_model).to(device)
    threshold, source = judge_threshold(
        cfg.reward_model.success_threshold, reward_model, inputs.reward_model
    )
    # only where the reward model decides (not where the simulator judges or labels)
    confirm_draws = cfg.reward_model.confirm_draws if cfg.reward_model.source == "model" else 0
    confirm_paths = inputs.confirm_world_models if confirm_draws else []
    return ImaginedEnv(
        world_model,
        reward_model,
        entries,
        task_names,
        num_envs,
        cfg.algorithm.max_episode_steps,
        success_threshold=threshold,
        use_rel_reward=cfg.reward_model.use_rel_reward,
        reward_coef=cfg.reward_model.reward_coef,
        seed=cfg.simulator.seed,
        action_transform=world_model_actions(cfg),
        round_scores=cfg.reward_model.round_scores,
        zero_first_baseline=cfg.reward_model.first_step_baseline == "zero",
        noise_seed=cfg.world_model.noise_seed,
        kir_step_reset=cfg.algorithm.kir_step_reset,
        reward_task_ids=None
        if reward_model is None
        else reward_task_ids(cfg, reward_model.kind, inputs.reward_model),
        threshold_source=source,
        success_frames=cfg.reward_model.success_frames,
        # only where the reward model decides (not where the simulator judges or labels)
        confirm_draws=confirm_draws,
        confirm_models=[
            load_imagining_world_model(path, height, width, cfg, device) for path in confirm_paths
        ],
    )


def world_model_actions(cfg: RunConfig) -> Callable[[np.ndarray], np.ndarray] | None:
    """The policy -> world-model action conversion: RLinf feeds its LIBERO world models the
    actions the real LIBERO env gets (gripper flipped to LIBERO's sign); Meta-World: none."""
    if cfg.simulator.name == "libero":
        from wmrl_cli.sims.libero_suites import to_libero_actions

        return to_libero_actions
    return None


def real_eval_callback(cfg: RunConfig, run_dir: Path, rank: int = 0, ranks: int = 1):
    """Evaluate in the real simulator (`simulator.name`): success_once overall and per task
    (eval/*); None when algorithm.eval_trials is 0. With eval.save_video, the episodes' mp4s
    and each task's grid under eval/videos/step_N (`step_video_dir`; on several ranks the grid
    holds the first rank's episodes). Called on every one of `ranks` ranks at once: each runs
    its share of the episodes and every rank gets the whole report (the one a single rank
    would make), which the first writes. No rank waits alone for another's evaluation (NCCL's
    watchdog stops a rank that waits longer than `training.dist_timeout_minutes`)."""
    from wmrl_cli.evaluation.policy_eval import evaluate_with_config, step_video_dir
    from wmrl_cli.files import atomic_write_text
    from wmrl_cli.policies.registry import LearnedPolicy

    if not cfg.algorithm.eval_trials:
        return None
    sim_cfg = resolve_simulator(cfg.simulator)
    simulator = evaluation_simulator(cfg)
    gather = None
    if ranks > 1:
        from accelerate.utils import gather_object as gather

    videos = cfg.eval.save_video

    def evaluate(model, step: int) -> dict[str, float]:
        policy = LearnedPolicy(model, top_k=cfg.policy.top_k, seed=sim_cfg.seed)
        trials = cfg.algorithm.eval_trials
        video_dir = step_video_dir(run_dir, step) if videos else None
        with simulator(sim_cfg, render_every_step=videos) as sim:
            report = evaluate_with_config(
                sim, policy, sim_cfg, cfg, trials, video_dir, shard=(rank, ranks), gather=gather
            )
        model.train()
        if rank == 0:
            atomic_write_text(run_dir / "eval" / f"step_{step:06d}.json", report.to_json())
        out = {"eval/success_once": report.overall}
        out.update({f"eval/success_once/{k}": v for k, v in report.per_task.items()})
        return out

    return evaluate
