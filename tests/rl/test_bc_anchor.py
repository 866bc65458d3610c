"""RL's behaviour-cloning anchor (`rl/bc_anchor.py`): counter-based batches of real successes."""

from __future__ import annotations

import numpy as np

from tests.helpers.episodes import make_episode
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.rl.bc_anchor import RealSuccessAnchor


def anchor(root, rank: int = 0, world: int = 1) -> RealSuccessAnchor:
    store = root / "s"
    if not store.exists():
        EpisodeStore(store).add([make_episode(t, length=20, seed=t) for t in range(3)])
    return RealSuccessAnchor.from_store(store, 4, 8, seed=7, rank=rank, world=world)


def test_a_batch_depends_on_step_optimizer_step_and_rank_only(tmp_path) -> None:
    a = anchor(tmp_path)
    frames, prompts, chunks = a.batch(3, 0)
    again = anchor(tmp_path).batch(3, 0)  # a resumed run draws the same
    np.testing.assert_array_equal(frames.numpy(), again[0].numpy())
    assert prompts == again[1]
    assert frames.shape == (8, 8, 8, 3) and chunks.shape == (8, 4, 4)
    for other in (a.batch(4, 0), a.batch(3, 1), anchor(tmp_path, rank=1).batch(3, 0)):
        assert not np.array_equal(frames.numpy(), other[0].numpy())


def test_ranks_split_the_batch(tmp_path) -> None:
    frames, prompts, _ = anchor(tmp_path, rank=1, world=2).batch(0, 0)
    assert len(frames) == len(prompts) == 4


def test_each_sample_pairs_a_frame_with_its_episodes_instruction_and_actions(tmp_path) -> None:
    a = anchor(tmp_path)
    frames, prompts, chunks = a.batch(0, 0)
    episodes = {e.instruction: e for e in EpisodeStore.open(tmp_path / "s")}
    for frame, prompt, chunk in zip(frames.numpy(), prompts, chunks.numpy()):
        episode = episodes[prompt]
        t = next(t for t in range(episode.length) if np.array_equal(episode.frames[t], frame))
        np.testing.assert_array_equal(chunk[0], episode.actions[t])


def test_bc_tasks_draw_from_the_named_tasks_alone(tmp_path) -> None:
    anchor(tmp_path)  # the store
    named = RealSuccessAnchor.from_store(
        tmp_path / "s", 4, 32, seed=7, rank=0, world=1, tasks=["task0", "task2"]
    )
    _, prompts, _ = named.batch(0, 0)
    assert set(prompts) == {"do task 0", "do task 2"}
