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
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from wmrl_cli.data.episodes import SIMULATOR_LABELS, Episode, EpisodeStore
from wmrl_cli.envs.interface import Env, Policy
from wmrl_cli.envs.runner import iter_episodes
from wmrl_cli.errors import ConfigError
from wmrl_cli.logging import progress_task


def start_ids(entry_task_ids: list[int], per_task: int, seed: int) -> list[int]:
    """`per_task` reset entries of every task that has one, each task's entries taken in a
    seeded order and reused round-robin when it has fewer; grouped by task."""
    if per_task < 1:
        raise ConfigError(f"--episodes-per-task must be at least 1, got {per_task}")
    rng = np.random.default_rng(seed)
    by_task: dict[int, list[int]] = {}
    for entry, task in enumerate(entry_task_ids):
        by_task.setdefault(task, []).append(entry)
    ids: list[int] = []
    for task in sorted(by_task):
        order = rng.permutation(by_task[task])
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
    `rl.labelled_rollouts.build_labelling_env`) from `init_ids`, adding each finished episode
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
