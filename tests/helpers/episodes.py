"""Hand-made episodes: random frames and actions of a given length and success step, and
frames whose success is visible (a bright square from the success step on)."""

from __future__ import annotations

import numpy as np

from wmrl_cli.data.episodes import Episode


def make_episode(task_id: int, length: int = 10, success_at: int | None = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    success = np.zeros(length, dtype=bool)
    if success_at is not None:
        success[success_at - 1 :] = True
    return Episode(
        task_id=task_id,
        task_name=f"task{task_id}",
        instruction=f"do task {task_id}",
        seed=seed,
        init_id=task_id,
        chunk_size=4,
        frames=rng.integers(0, 255, (length + 1, 8, 8, 3), dtype=np.uint8),
        actions=rng.normal(size=(length, 4)).astype(np.float32),
        rewards=rng.normal(size=length).astype(np.float32),
        success=success,
        sim_states={s: rng.normal(size=20) for s in range(0, length + 1, 4)},
    )


def visible_success_episode(i: int, succeed: bool) -> Episode:
    """Dark noisy frames; from the success step on, a bright square appears (a 'door open')."""
    rng = np.random.default_rng(i)
    length = 12
    frames = rng.integers(0, 60, (length + 1, 16, 16, 3), dtype=np.uint8)
    success = np.zeros(length, dtype=bool)
    if succeed:
        success[8:] = True
        frames[9:, 4:12, 4:12] = 230
    return Episode(
        task_id=i % 2,
        task_name=f"t{i % 2}",
        instruction="x",
        seed=i,
        init_id=i,
        frames=frames,
        actions=np.zeros((length, 4), np.float32),
        rewards=np.zeros(length, np.float32),
        success=success,
        chunk_size=4,
    )
