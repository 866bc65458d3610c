"""The closed loop: a policy and an env alternate chunk by chunk until every episode ends.

Works for any env behind the interface (real or imagined) and records complete episodes,
with the simulator state at every chunk boundary when the env provides one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from wmrl_cli.data.episodes import Episode
from wmrl_cli.envs.interface import Env, Policy


def iter_episodes(
    env: Env,
    policy: Policy,
    init_ids: list[int],
    *,
    chunk_size: int,
    seed_of: Callable[[int], int],
    sample: bool = True,
    temperature: float = 1.6,
    suite: str = "",
) -> Iterator[Episode]:
    """Run one episode per init id, `env.num_envs` at a time, yielding each as it ends.

    chunk_size is the episode's chunk (where sim states are recorded); the policy may act in
    shorter chunks (scripted experts act one step at a time).
    """
    batch = env.num_envs
    for start in range(0, len(init_ids), batch):
        ids = list(init_ids[start : start + batch])
        n_real = len(ids)
        ids += [ids[-1]] * (batch - n_real)  # pad the last batch; padded envs are dropped
        for episode in _run_batch(env, policy, ids, chunk_size, sample, temperature)[:n_real]:
            episode.seed = seed_of(episode.init_id)
            episode.suite = suite
            episode.policy = policy.name
            yield episode


def _run_batch(
    env: Env,
    policy: Policy,
    init_ids: list[int],
    chunk_size: int,
    sample: bool,
    temperature: float,
) -> list[Episode]:
    obs = env.reset(init_ids)
    b = len(init_ids)
    start_episodes = getattr(policy, "start_episodes", None)
    if start_episodes is not None:  # per-episode policy state (perturbation processes)
        start_episodes(init_ids)
    frames: list[list[np.ndarray]] = [[obs.images[i]] for i in range(b)]
    actions: list[list[np.ndarray]] = [[] for _ in range(b)]
    rewards: list[list[float]] = [[] for _ in range(b)]
    success: list[list[bool]] = [[] for _ in range(b)]
    perturbed: list[list[bool]] = [[] for _ in range(b)]
    flagged = False  # whether the policy reports perturbed steps
    states: list[dict[int, np.ndarray]] = [{} for _ in range(b)]
    if obs.sim_states is not None:
        for i in range(b):
            states[i][0] = obs.sim_states[i]
    done = np.zeros(b, dtype=bool)
    while not done.all():
        out = policy.act(obs, sample=sample, temperature=temperature)
        result = env.chunk_step(out.actions)
        valid = result.info.get("valid", ~np.zeros_like(result.rewards, dtype=bool))
        executed = result.info.get("executed_actions", out.actions)
        flagged |= out.perturbed is not None
        flags = out.perturbed if out.perturbed is not None else np.zeros(valid.shape, bool)
        for i in np.flatnonzero(~done):
            for t in np.flatnonzero(valid[i]):
                frames[i].append(result.frames[i, t])
                actions[i].append(executed[i, t])
                rewards[i].append(float(result.rewards[i, t]))
                success[i].append(bool(result.success[i, t]))
                perturbed[i].append(bool(flags[i, t]))
            steps = len(actions[i])
            if result.obs.sim_states is not None and steps % chunk_size == 0:
                states[i][steps] = result.obs.sim_states[i]
        done |= (result.terminated | result.truncated).any(axis=1)
        obs = result.obs
    task_names = getattr(env, "task_names", [])
    return [
        Episode(
            task_id=int(obs.task_ids[i]),
            task_name=task_names[int(obs.task_ids[i])] if task_names else str(obs.task_ids[i]),
            instruction=obs.instructions[i],
            seed=0,
            init_id=int(init_ids[i]),
            frames=np.stack(frames[i]),
            actions=np.asarray(actions[i], dtype=np.float32).reshape(len(actions[i]), -1),
            rewards=np.asarray(rewards[i], dtype=np.float32),
            success=np.asarray(success[i], dtype=bool),
            chunk_size=chunk_size,
            sim_states=states[i],
            perturbed=np.asarray(perturbed[i], dtype=bool) if flagged else None,
        )
        for i in range(b)
    ]
