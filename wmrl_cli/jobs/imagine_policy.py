"""A policy's own imagined episodes, labelled by the simulator (`wmrl rollout --world-model WM
--policy P --reset-set STORE`): the data a judge of RL in imagination should learn from.

The policy acts on the world model's frames, chunk by chunk, from the reset set's starts, as in
RL in imagination; every chunk it takes is also executed in the real simulator from the start's
stored state and seed. The episode keeps the imagined frames and the simulator's success flags,
so a reward model trained on it learns whether the policy's imagined rollout succeeds for real.
A judge trained on recorded actions' open-loop rollouts ranks these episodes far worse
(docs/results.md#labelled-imagined-episodes).

The simulator never ends an episode here (success flags hold as long as the task stays solved,
frames after a success are positives too); the imagined env truncates it at
`algorithm.max_episode_steps`. The replay is real interaction: `EpisodeStore.real_steps` counts
these episodes (docs/formats.md, `imagined.labels`).

Assembled from the config: the env (RL's imagined env judged by a simulator that never ends an
episode: `build_labelling_env`), the policy, the starts. Co-evolve's `labelled` stages call
`imagine_policy`, and `wmrl rollout --world-model --policy --reset-set` calls it through
`imagine_policy_rollouts` (the output and inputs checked, the store's config written);
`imagine_policy_store` runs the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import SIMULATOR_LABELS, Episode, EpisodeStore
from wmrl_cli.envs.interface import Env, Policy
from wmrl_cli.envs.reset_sampler import task_ids
from wmrl_cli.envs.runner import iter_episodes
from wmrl_cli.envs.simulator_judged import SimulatorJudgedEnv
from wmrl_cli.errors import ConfigError
from wmrl_cli.jobs.assembly import build_imagined_env
from wmrl_cli.jobs.collect_rollouts import RolloutSummary, check_output_store, stored_summary
from wmrl_cli.jobs.inputs import Inputs, check_train_tasks, resolve_inputs
from wmrl_cli.logging import progress_task
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
    `algorithm.max_episode_steps` (`imagine_policy_store`). No reward model is loaded."""
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
    `world_model.reset_set`'s starts (of the tasks in `algorithm.train_tasks` where set: the
    tasks RL draws its starts from), labelled by the simulator, added to `out`: the one call
    behind `wmrl rollout --world-model --policy --reset-set` and co-evolve's labelled reward
    data. Sampling (world model noise, the policy's actions, the order of starts) is seeded by
    `simulator.seed`; the number written."""
    from wmrl_cli.policies.registry import load_learned_policy
    from wmrl_cli.runtime import seed_everything

    device = "cuda" if torch.cuda.is_available() else "cpu"
    seed = cfg.simulator.seed
    env = build_labelling_env(cfg, cfg.simulator.num_envs, device, inputs)
    try:
        tasks = cfg.algorithm.train_tasks
        only = None if tasks is None else task_ids(tasks, env.task_names)
        ids = start_ids(env.entry_task_ids, per_task, seed, only)
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


def imagine_policy_rollouts(
    cfg: RunConfig, append: bool = False, overwrite: bool = False
) -> RolloutSummary:
    """`imagine_policy` into the store in `cfg.output_dir` (`append`: added to it, `overwrite`:
    replacing it), `rollout.episodes_per_task` episodes per task. The output and the inputs are
    checked before anything is written."""
    from wmrl_cli.run_dirs import prepare_run_dir
    from wmrl_cli.runtime import configure_threads

    out = Path(cfg.output_dir)
    check_output_store(out, append, imagined=True, overwrite=overwrite)
    inputs = resolve_labelling_inputs(cfg)
    check_train_tasks(cfg, inputs.reset_set)
    configure_threads(cfg.num_threads)
    prepare_run_dir(cfg, "rollout", overwrite=overwrite)  # the store's config.yaml
    store = EpisodeStore(out)
    imagine_policy(cfg, store, cfg.rollout.episodes_per_task, inputs)
    return stored_summary(store)


def start_ids(
    entry_task_ids: list[int], per_task: int, seed: int, tasks: Sequence[int] | None = None
) -> list[int]:
    """`per_task` reset entries of every task that has one (of `tasks` where given), each
    task's entries taken in a seeded order and reused round-robin when it has fewer; grouped by
    task. Every task's order is drawn either way, so a subset's starts are the whole set's."""
    if per_task < 1:
        raise ConfigError(f"--episodes-per-task must be at least 1, got {per_task}")
    rng = np.random.default_rng(seed)
    by_task: dict[int, list[int]] = {}
    for entry, task in enumerate(entry_task_ids):
        by_task.setdefault(task, []).append(entry)
    ids: list[int] = []
    for task in sorted(by_task):
        order = rng.permutation(by_task[task])
        if tasks is None or task in tasks:
            ids += [int(order[i % len(order)]) for i in range(per_task)]
    return ids


def imagine_policy_store(
    env: Env,
    policy: Policy,
    init_ids: list[int],
    out: EpisodeStore,
    provenance: dict[str, str],
    *,
    chunk_size: int,
    temperature: float,
    sample: bool = True,
    seed_of: Callable[[int], int],
    progress: bool = True,
) -> int:
    """Run `policy` in `env` (an imagined env judged by a non-terminating simulator:
    `build_labelling_env`) from `init_ids`, adding each finished episode
    to `out` with `provenance`; the number written."""
    labelled = {**provenance, "labels": SIMULATOR_LABELS}
    written = 0
    batches = -(-len(init_ids) // env.num_envs)
    with progress_task("imagined policy rollouts", batches, progress) as advance:
        pending: list[Episode] = []
        for episode in iter_episodes(
            env,
            policy,
            init_ids,
            chunk_size=chunk_size,
            seed_of=seed_of,
            sample=sample,
            temperature=temperature,
        ):
            episode.sim_states = {}  # the frames are imagined: no state matches them
            episode.imagined = dict(labelled, reset_entry=episode.init_id)
            pending.append(episode)
            if len(pending) == env.num_envs or written + len(pending) == len(init_ids):
                out.add(pending)  # batch by batch, each atomically
                written += len(pending)
                pending = []
                advance()
    return written


def provenance_of(world_model: str, policy: str, reset_set: str) -> dict[str, str]:
    """Where the episodes came from: paths absolute; a policy asset by its name."""
    return {
        "world_model": str(Path(world_model).resolve()),
        "policy": str(Path(policy).resolve()) if Path(policy).exists() else policy,
        "reset_set": str(Path(reset_set).resolve()),
    }
