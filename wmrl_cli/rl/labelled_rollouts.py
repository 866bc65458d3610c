"""The policy's own imagined episodes, labelled by the simulator, assembled from the config:
the env (RL's imagined env judged by a simulator that never ends an episode), the policy, the
starts. `wmrl rollout --world-model --policy --reset-set` and co-evolve's `labelled` stages
call `imagine_policy`; envs/imagined_policy.py runs the loop."""

from __future__ import annotations

from dataclasses import replace

import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.envs.simulator_judged import SimulatorJudgedEnv
from wmrl_cli.rl.assembly import build_imagined_env
from wmrl_cli.rl.inputs import Inputs, resolve_inputs
from wmrl_cli.sims.backends import resolve_simulator, simulator_class


def _judged_by_simulator(cfg: RunConfig) -> RunConfig:
    """A copy of `cfg` without a reward model: the simulator labels the episodes."""
    cfg = cfg.model_copy(deep=True)
    cfg.reward_model.path, cfg.reward_model.source = None, "simulator"
    return cfg


def resolve_labelling_inputs(cfg: RunConfig) -> Inputs:
    """The policy, world model and reset set of labelled imagined rollouts (no reward model:
    the simulator labels them)."""
    return resolve_inputs(_judged_by_simulator(cfg))


def build_labelling_env(
    cfg: RunConfig, num_envs: int, device: str, inputs: Inputs | None = None
) -> SimulatorJudgedEnv:
    """The imagined env of RL, judged by a simulator that never ends an episode: imagined
    frames, the simulator's success flags for the same actions, truncation at
    `algorithm.max_episode_steps` (envs/imagined_policy.py). No reward model is loaded."""
    cfg = _judged_by_simulator(cfg)
    inputs = resolve_inputs(cfg) if inputs is None else replace(inputs, reward_model=None)
    imagined = build_imagined_env(cfg, num_envs, device, inputs)
    imagined.threshold = float("inf")  # only the simulator decides success
    horizon = cfg.algorithm.max_episode_steps + max(e.step for e in imagined.reset_set)
    sim_cfg = resolve_simulator(cfg.simulator).model_copy(
        update={"max_steps": min(horizon + 1, 10_000), "terminate_on_success": False}
    )
    sim = simulator_class(sim_cfg)(sim_cfg, num_envs, render_every_step=False)
    return SimulatorJudgedEnv(imagined, sim, reward_coef=cfg.reward_model.reward_coef)


def imagine_policy(cfg: RunConfig, out: EpisodeStore, per_task: int, inputs: Inputs) -> int:
    """`per_task` imagined episodes per task of `policy.name` in `world_model.path` from
    `world_model.reset_set`'s starts, labelled by the simulator, added to `out`: the one call
    behind `wmrl rollout --world-model --policy --reset-set` and co-evolve's labelled reward
    data. Sampling (world model noise, the policy's actions, the order of starts) is seeded by
    `simulator.seed`; the number written."""
    from wmrl_cli.envs.imagined_policy import imagine_policy_store, provenance_of, start_ids
    from wmrl_cli.policies.registry import load_learned_policy
    from wmrl_cli.runtime import seed_everything

    device = "cuda" if torch.cuda.is_available() else "cpu"
    seed = cfg.simulator.seed
    env = build_labelling_env(cfg, cfg.simulator.num_envs, device, inputs)
    try:
        ids = start_ids(env.entry_task_ids, per_task, seed)
        policy = load_learned_policy(
            inputs.policy, top_k=cfg.policy.top_k, seed=seed, device=device
        )
        seed_everything(seed)
        entries = env.reset_set
        return imagine_policy_store(
            env,
            policy,
            ids,
            out,
            provenance_of(str(inputs.world_model), str(cfg.policy.name), str(inputs.reset_set)),
            chunk_size=cfg.simulator.chunk_size,
            temperature=cfg.policy.temperature,
            sample=not cfg.policy.greedy,
            seed_of=lambda i: int(entries[i].seed),
            progress=cfg.logging.progress,
        )
    finally:
        env.close()
