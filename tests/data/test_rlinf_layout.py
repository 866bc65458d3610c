"""RLinf reset layout export/import, the safe unpickler and KIR keyframe selection."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.episodes import make_episode
from wmrl_cli.config.schema import KirConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.kir import Keyframe, select_keyframes
from wmrl_cli.data.reset_set import (
    export_rlinf,
    load_rlinf_reset_set,
    read_rlinf_file,
    reset_set_from_store,
)
from wmrl_cli.errors import UnsafeFileError
from wmrl_cli.files.safe_npy import load_npy


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.fixture
def store(tmp_path):
    store = EpisodeStore(tmp_path / "store")
    store.add([make_episode(0, length=20, success_at=18), make_episode(1, success_at=None)])
    return store


def test_export_reads_identically_with_numpy_and_safe_loader(store, tmp_path) -> None:
    keys = [Keyframe(0, 12, "before_success:1"), Keyframe(0, 8, "before_success:2")]
    written = export_rlinf(store, tmp_path / "out", keys)
    names = sorted(p.name for p in written)
    assert names == ["traj0.npy", "traj0_kir.npy", "traj0_kir1.npy", "traj1.npy"]
    for path in written:
        trusted = np.load(path, allow_pickle=True)
        safe = load_npy(path)
        assert trusted.dtype == object and len(trusted) == len(safe)
        assert all(_same(a, b) for a, b in zip(trusted, safe))


def test_kir_file_layout(store, tmp_path) -> None:
    export_rlinf(store, tmp_path / "out", [Keyframe(0, 8, "before_success:3")])
    frames = load_npy(tmp_path / "out" / "dataset" / "traj0_kir.npy")
    episode = store.load(0)
    # reference frame, then the keyframe's 4 preceding frames and the keyframe itself
    assert [f["step"] for f in frames] == [0, 4, 5, 6, 7, 8]
    assert np.array_equal(frames[0]["image"], episode.frames[0])
    assert np.array_equal(frames[-1]["image"], episode.frames[8])
    assert np.array_equal(frames[-1]["delta_action"], episode.actions[7])
    assert frames[0]["delta_action"].tolist() == [0, 0, 0, -1]
    assert np.array_equal(frames[-1]["sim_state"], episode.sim_states[8])
    entry = read_rlinf_file(tmp_path / "out" / "dataset" / "traj0_kir.npy")
    assert entry.context.shape == (4, 8, 8, 3) and entry.context_actions.shape == (4, 4)
    assert np.array_equal(entry.context, episode.frames[5:9])
    assert np.array_equal(entry.context_actions, episode.actions[4:8])
    assert entry.step == 8 and entry.instruction == "do task 0" and entry.is_keyframe


def test_reset_set_kir_switch_and_initial_entries(store, tmp_path) -> None:
    export_rlinf(store, tmp_path / "out", [Keyframe(0, 8, "stall")])
    with_kir = load_rlinf_reset_set(tmp_path / "out", enable_kir=True)
    without = load_rlinf_reset_set(tmp_path / "out", enable_kir=False)
    assert [e.source for e in without] == ["traj0.npy", "traj1.npy"]
    assert len(with_kir) == 3
    first = without[0]
    assert first.context.shape == (4, 8, 8, 3) and not first.is_keyframe
    assert (first.context == first.reference).all()
    assert first.context_actions[:, -1].tolist() == [-1] * 4


def test_reset_set_from_store_matches_rlinf_import(store, tmp_path) -> None:
    keys = [Keyframe(0, 12, "before_success:1")]
    export_rlinf(store, tmp_path / "out", keys)
    from_store = reset_set_from_store(store, [0, 1], keys)
    imported = load_rlinf_reset_set(tmp_path / "out")
    by_source = {e.source: e for e in imported}
    pairs = [
        (from_store[0], by_source["traj0.npy"]),
        (from_store[1], by_source["traj0_kir.npy"]),
        (from_store[2], by_source["traj1.npy"]),
    ]
    for a, b in pairs:
        assert np.array_equal(a.context, b.context) and np.array_equal(a.reference, b.reference)
        assert np.array_equal(a.context_actions, b.context_actions) and a.step == b.step


def test_safe_loader_refuses_code(tmp_path) -> None:
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = np.empty(1, dtype=object)
    evil[0] = {"image": Exploit()}
    np.save(tmp_path / "traj0.npy", evil, allow_pickle=True)
    with pytest.raises(UnsafeFileError, match="refused global"):
        load_npy(tmp_path / "traj0.npy")
    assert not marker.exists()


def test_safe_loader_plain_arrays_and_garbage(tmp_path) -> None:
    np.save(tmp_path / "plain.npy", np.arange(6).reshape(2, 3))
    assert load_npy(tmp_path / "plain.npy").tolist() == [[0, 1, 2], [3, 4, 5]]
    (tmp_path / "junk.npy").write_bytes(b"not numpy at all")
    with pytest.raises(Exception, match="not a .npy file"):
        load_npy(tmp_path / "junk.npy")


def test_kir_rule() -> None:
    cfg = KirConfig(chunks_before_success=[1, 2, 4], stall_threshold=1.0, max_stall_keyframes=1)
    ok = make_episode(0, length=20, success_at=18)  # success in the chunk starting at step 16
    steps = [k.step for k in select_keyframes(ok, 0, cfg)]
    assert steps == [16, 12, 4]  # k=1,2,4 chunks before; k=4 -> step 4 = min_context
    failed = make_episode(1, length=20, success_at=None)
    failed.frames[8:] = failed.frames[8]  # the robot stops moving after step 8
    assert [(k.step, k.reason) for k in select_keyframes(failed, 1, cfg)] == [(12, "stall")]
