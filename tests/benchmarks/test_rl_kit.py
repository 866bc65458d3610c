"""benchmarks/gpu/rl_kit.py: the assets a model file reaches, and a reset set whose unread
frames are zeroed yet builds the same reset entries (the device run itself: docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from tests.helpers import ROOT
from tests.helpers.episodes import make_episode
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.kir import KIR_FILE, Keyframe, read_keyframes
from wmrl_cli.data.reset_set import reset_set_from_store


@pytest.fixture
def kit(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    import rl_kit

    return rl_kit


def test_the_assets_kept_are_those_the_model_files_reach(kit, tmp_path) -> None:
    pkg = tmp_path / "metaworld"
    (pkg / "assets" / "objects").mkdir(parents=True)
    (pkg / "assets" / "textures").mkdir()
    main = pkg / "assets" / "task.xml"
    main.write_text('<mujoco><include file="objects/parts.xml"/></mujoco>')
    (pkg / "assets" / "objects" / "parts.xml").write_text(
        '<mujoco><texture file="../textures/wood.png"/><mesh file="knob.stl"/></mujoco>'
    )
    for name in ("textures/wood.png", "textures/other.png", "objects/knob.stl"):
        (pkg / "assets" / name).write_bytes(b"x")
    kept = {p.relative_to(pkg.resolve()).as_posix() for p in kit.referenced_assets(pkg, [main])}
    assert kept == {
        "assets/task.xml",
        "assets/objects/parts.xml",
        "assets/textures/wood.png",
        "assets/objects/knob.stl",
    }


def test_the_blanked_reset_set_builds_the_same_entries(kit, tmp_path) -> None:
    store = EpisodeStore(tmp_path / "store")
    store.add([make_episode(t, length=24, seed=t) for t in (0, 1)])
    keys = [Keyframe(0, 16, "stall")]
    body = {"rule": {}, "keyframes": [{"episode_id": 0, "step": 16, "reason": "stall"}]}
    (tmp_path / "store" / KIR_FILE).write_text(json.dumps(body))
    kit.blank_unread_frames(tmp_path / "store", tmp_path / "blank", context_frames=4)
    blank = EpisodeStore.open(tmp_path / "blank")
    assert read_keyframes(tmp_path / "blank") == keys
    before = reset_set_from_store(EpisodeStore.open(tmp_path / "store"), [0, 1], keys)
    after = reset_set_from_store(blank, [0, 1], keys)
    assert len(before) == len(after) == 3
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a.context, b.context)
        np.testing.assert_array_equal(a.reference, b.reference)
        np.testing.assert_array_equal(a.sim_state, b.sim_state)
    frames = blank.load(0).frames
    assert frames[[0, 13, 14, 15, 16]].any(axis=(1, 2, 3)).all()  # start; keyframe's context
    assert not frames[[1, 5, 12, 17, 24]].any()  # read by no entry: zeroed


def test_the_device_script_needs_its_kit(tmp_path) -> None:
    script = ROOT / "benchmarks" / "gpu" / "rl_arm_device.sh"
    env = {**os.environ, "KIT": str(tmp_path / "no-kit")}  # nothing is installed or unpacked
    proc = subprocess.run(["bash", str(script), str(tmp_path), "0"], env=env, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 2 and "no-kit/config.yaml here" in proc.stderr


def _stage(tmp_path, **override) -> object:
    """A stage config whose inputs are folders here (the reset set a real store)."""
    for name in ("wm", "policy", "rm"):
        (tmp_path / name).mkdir()
    store = EpisodeStore(tmp_path / "store")
    store.add([make_episode(0, length=8, seed=0)])
    cfg = {
        "world_model": {"path": str(tmp_path / "wm"), "reset_set": str(tmp_path / "store")},
        "policy": {"name": str(tmp_path / "policy")},
        "reward_model": {"path": str(tmp_path / "rm")},
        "simulator": {"suite": "mw10"},
    }
    for key, value in override.items():
        section, field = key.split("__")
        cfg[section][field] = value
    path = tmp_path / "config.yaml"
    import yaml

    path.write_text(yaml.safe_dump(cfg))
    return path


def _old_kit(tmp_path):
    out = tmp_path / "kit"
    out.mkdir()
    (out / "config.yaml").write_text("the kit before\n")
    return out


def test_a_stage_config_without_its_inputs_is_one_line_and_the_old_kit_stays(
    kit, tmp_path, capsys
) -> None:
    stage = _stage(tmp_path, reward_model__path=str(tmp_path / "gone"))
    out = _old_kit(tmp_path)
    with pytest.raises(SystemExit) as exc:
        kit.main(["--stage", str(stage), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert "reward_model.path" in err and "expected a folder here" in err
    assert (out / "config.yaml").read_text() == "the kit before\n"
    (tmp_path / "bad.yaml").write_text("world_model: [unclosed\n")
    with pytest.raises(SystemExit):
        kit.main(["--stage", str(tmp_path / "bad.yaml"), "--out", str(out)])
    assert "not YAML" in capsys.readouterr().err


def test_a_failed_wheel_download_is_one_line_and_leaves_nothing_half_built(
    kit, tmp_path, capsys, monkeypatch
) -> None:
    stage = _stage(tmp_path)
    out = _old_kit(tmp_path)

    def offline(cmd, **kwargs):
        raise subprocess.CalledProcessError(1, cmd, stderr="ERROR: No matching distribution\n")

    monkeypatch.setattr(kit.subprocess, "run", offline)
    with pytest.raises(SystemExit) as exc:
        kit.main(["--stage", str(stage), "--out", str(out), "--wheels", str(tmp_path / "w")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert "pip download" in err and "No matching distribution" in err
    assert (out / "config.yaml").read_text() == "the kit before\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".kit")) == []
