"""Episode store: round trip, streaming, splits, no partial files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.episodes import make_episode
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError


def test_round_trip(tmp_path, expert_episodes) -> None:
    store = EpisodeStore(tmp_path / "store")
    store.add(expert_episodes)
    reopened = EpisodeStore.open(tmp_path / "store")
    assert len(reopened) == len(expert_episodes)
    for original, loaded in zip(expert_episodes, reopened):
        for key in ("frames", "actions", "rewards", "success"):
            assert np.array_equal(getattr(original, key), getattr(loaded, key))
            assert getattr(original, key).dtype == getattr(loaded, key).dtype
        assert loaded.sim_states.keys() == original.sim_states.keys()
        for step, state in original.sim_states.items():
            assert np.array_equal(state, loaded.sim_states[step])
        assert (loaded.instruction, loaded.seed, loaded.task_id) == (
            original.instruction,
            original.seed,
            original.task_id,
        )
    assert all(m["success"] for m in reopened.index)  # the expert solves mw3
    assert not list((tmp_path / "store").rglob("*.tmp"))


def test_files_hold_no_pickle(tmp_path) -> None:
    store = EpisodeStore(tmp_path)
    store.add([make_episode(0)])
    with np.load(tmp_path / store.index[0]["file"], allow_pickle=False) as data:
        assert set(data.files) >= {"frames", "actions", "rewards", "success", "sim_states"}
    assert json.loads((tmp_path / "index.json").read_text())["format"] == "wmrl-episodes"


def test_split_is_by_episode_stratified_and_deterministic(tmp_path) -> None:
    store = EpisodeStore(tmp_path)
    store.add([make_episode(t % 3, seed=i) for i, t in enumerate(range(12))])
    train, val = store.split(0.25, seed=1)
    assert sorted(train + val) == list(range(12)) and not set(train) & set(val)
    assert {store.index[i]["task_id"] for i in val} == {0, 1, 2}
    assert store.split(0.25, seed=1) == (train, val)


def test_open_rejects_non_store(tmp_path) -> None:
    with pytest.raises(WmrlError, match="not an episode store"):
        EpisodeStore.open(tmp_path)
    (tmp_path / "index.json").write_text("{}")
    with pytest.raises(WmrlError, match="not a wmrl episode index"):
        EpisodeStore.open(tmp_path)
