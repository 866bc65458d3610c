"""wmrl_cli/data/lerobot: the schema check holds for a dataset lerobot's own code wrote, the
reader's alignment of frames, actions and success, and (slow) lerobot's own loader reading a
dataset wmrl wrote, in the throwaway venv of tests/fixtures/lerobot_reference.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT
from wmrl_cli.config.lerobot import LerobotConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.lerobot.check import check_dataset
from wmrl_cli.data.lerobot.reader import _labels, convert
from wmrl_cli.data.lerobot.writer import write_dataset

FIXTURE = ROOT / "tests" / "fixtures" / "lerobot_v3_tiny"
REFERENCE = ROOT / "tests" / "fixtures" / "lerobot_reference.py"


def test_the_check_passes_lerobots_own_dataset_and_names_a_fault(tmp_path) -> None:
    assert check_dataset(FIXTURE) == []
    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(FIXTURE, broken)
    info = json.loads((broken / "meta" / "info.json").read_text())
    info["total_frames"] += 1
    (broken / "meta" / "info.json").write_text(json.dumps(info))
    assert any("frame rows" in p for p in check_dataset(broken))


def test_labels_follow_the_frames_they_describe() -> None:
    kept = np.arange(5)
    # next.success: the value after each row's action; the last one's frame is not stored
    after = np.array([0, 0, 0, 0, 1], dtype=float)
    np.testing.assert_array_equal(_labels(after, kept, True), [0, 0, 0, 1])
    # a plain column describes its own row's frame
    np.testing.assert_array_equal(_labels(np.array([0, 0, 1, 0, 0.0]), kept, False), [0, 1, 0, 0])
    # every 2nd frame: a success between two kept frames counts for the later one
    np.testing.assert_array_equal(_labels(np.array([0, 1, 0, 0, 0.0]), kept[::2], True), [1, 0])


def test_the_fixture_reads_into_a_store(tmp_path) -> None:
    store = convert(FIXTURE, tmp_path / "store", LerobotConfig(), 32, 8)
    lengths = [12, 9, 10, 8, 11]
    assert [e["length"] for e in store.index] == [n - 1 for n in lengths]
    assert [e["success"] for e in store.index] == [True, True, True, True, False]
    first = store.load(0)
    assert first.frames.shape == (12, 32, 32, 3) and first.actions.shape == (11, 4)
    assert first.instruction == "push the block" and store.load(1).task_id == 1
    # the frames in order (the fixture's red channel brightens by 15 a frame)
    red = first.frames[..., 0].mean(axis=(1, 2))
    assert np.all(np.diff(red) > 10)
    stats = store.action_statistics()
    assert stats is not None and len(stats["action"]["q99"]) == 4


LEROBOT_PYTHON = Path(os.environ.get("WMRL_LEROBOT_PYTHON", "/tmp/lrvenv/bin/python"))


@pytest.mark.slow
@pytest.mark.skipif(not LEROBOT_PYTHON.is_file(), reason="no lerobot venv (see the reference)")
def test_lerobot_reads_what_wmrl_writes(tmp_path) -> None:
    store = convert(FIXTURE, tmp_path / "store", LerobotConfig(), 32, 8)
    write_dataset(store, tmp_path / "ds", 10, "front")
    done = subprocess.run(
        [str(LEROBOT_PYTHON), str(REFERENCE), "read", str(tmp_path / "ds")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    episodes = list(EpisodeStore.open(tmp_path / "store"))
    assert read["num_episodes"] == len(episodes)
    assert read["num_frames"] == sum(e.length for e in episodes)
    assert read["tasks"] == ["push the block", "open the drawer"]
    items = read["items"]
    rows = [(e, t) for e in episodes for t in range(e.length)]
    for item, (episode, t) in zip(items, rows):
        np.testing.assert_allclose(item["action"], episode.actions[t], rtol=1e-6)
        assert item["next.success"] == bool(episode.success[t])
        assert item["task"] == episode.instruction
        assert item["observation.images.front"]["shape"] == [3, 32, 32]
        mean = episode.frames[t].mean() / 255.0
        assert abs(item["observation.images.front"]["mean"] - mean) < 0.02
