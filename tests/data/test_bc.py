"""Behaviour-cloning samples (`data/bc.py`): a frame, its instruction, the chunk from it on."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.episodes import make_episode
from wmrl_cli.data.bc import build_bc_dataset
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError


def test_samples_are_every_step_of_the_successful_episodes_with_the_last_action_repeated(
    tmp_path,
) -> None:
    won, lost = make_episode(0, length=6, seed=1), make_episode(1, success_at=None, seed=2)
    store = EpisodeStore(tmp_path / "s")
    store.add([won, lost])
    data = build_bc_dataset(store, chunk=3)
    assert len(data) == 6 and data.instructions == [won.instruction]
    np.testing.assert_array_equal(data.frames, won.frames[:6])
    np.testing.assert_array_equal(data.chunks[0], won.actions[0:3])
    np.testing.assert_array_equal(data.chunks[5], won.actions[[5, 5, 5]])  # past the end
    assert len(build_bc_dataset(store, chunk=3, only_success=False)) == 6 + 10


def test_a_store_without_a_success_has_nothing_to_clone(tmp_path) -> None:
    store = EpisodeStore(tmp_path / "s")
    store.add([make_episode(0, success_at=None)])
    with pytest.raises(WmrlError, match="no successful episodes"):
        build_bc_dataset(store, chunk=2)


def test_tasks_keep_the_named_tasks_successes_alone(tmp_path) -> None:
    """algorithm.bc_tasks: the anchor clones the tasks whose imagined loop is broken only."""
    store = EpisodeStore(tmp_path / "s")
    store.add([make_episode(0, length=6, seed=1), make_episode(1, length=8, seed=2)])
    data = build_bc_dataset(store, chunk=2, tasks=["task1"])
    assert len(data) == 8 and data.instructions == ["do task 1"]
    with pytest.raises(WmrlError, match="no successful episodes of tasks task7 to clone"):
        build_bc_dataset(store, chunk=2, tasks=["task7"])
