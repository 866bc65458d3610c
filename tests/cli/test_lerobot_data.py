"""LeRobotDataset v3 through the commands: a dataset made by lerobot's own code
(tests/fixtures/lerobot_v3_tiny, tests/fixtures/lerobot_reference.py) trains a world model, a
reward model and a policy at a tiny size; `wmrl rollout --format lerobot` and `wmrl convert`
write datasets that pass the format's schema check; a dataset lacking what is needed is one
line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers import ROOT
from tests.helpers.output import one_error_line
from tests.helpers.sft import TINY
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.lerobot.check import check_dataset

runner = CliRunner()
FIXTURE = ROOT / "tests" / "fixtures" / "lerobot_v3_tiny"


@pytest.fixture()
def cache(tmp_path) -> list[str]:
    """Converted datasets kept in the test's folder."""
    return ["--set", f"lerobot.cache_dir={tmp_path / 'cache'}"]


def test_lerobot_dataset_trains_world_model_reward_model_and_policy(tmp_path, cache) -> None:
    wm = runner.invoke(
        app,
        [
            "train-wm", "--data", str(FIXTURE), "--out", str(tmp_path / "wm"),
            "--vae-steps", "2", "--steps", "2", "--set", "simulator.image_size=32",
            "--set", "world_model.batch_size=2", "--set", "world_model.val_every=2",
            "--set", "world_model.val_episodes=1", "--set", "world_model.val_horizon=4",
            "--set", "world_model.window_stride=16", "--set", "world_model.num_inference_steps=1",
            "--set", "num_threads=1", *cache,
        ],
    )  # fmt: skip
    assert wm.exit_code == 0, wm.output
    assert "LeRobot dataset" in wm.output and (tmp_path / "wm" / "world_model").is_dir()
    rm = runner.invoke(
        app,
        [
            "train-reward", "--data", str(FIXTURE), "--out", str(tmp_path / "rm"),
            "--steps", "4", "--width", "4", "--set", "reward_model.batch_size=8",
            "--set", "simulator.image_size=32", *cache,
        ],
    )  # fmt: skip
    assert rm.exit_code == 0, rm.output
    assert (tmp_path / "rm" / "reward_model" / "reward_metrics.json").is_file()
    sft = runner.invoke(
        app, ["sft", "--data", str(FIXTURE), "--steps", "2", "--out", str(tmp_path / "sft"), *TINY]
    )  # fmt: skip
    assert sft.exit_code == 0, sft.output
    # the dataset's action statistics (meta/stats.json) are the policy's
    stats = json.loads((FIXTURE / "meta" / "stats.json").read_text())["action"]
    policy = json.loads((tmp_path / "sft" / "policy" / "dataset_statistics.json").read_text())
    (entry,) = policy.values()
    assert entry["action"]["q01"] == stats["q01"] and entry["action"]["q99"] == stats["q99"]
    # one conversion per setting: the three commands shared the 32x32 one
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_rollout_format_lerobot_passes_the_schema_check(tmp_path) -> None:
    out = tmp_path / "ds"
    args = [
        "rollout", "--policy", "expert", "--suite", "mw3", "--episodes-per-task", "1",
        "--image-size", "32", "--num-envs", "3", "--num-workers", "0",
        "--set", "simulator.max_steps=16", "--out", str(out), "--format", "lerobot",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert check_dataset(out) == []
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 3 and info["total_frames"] == 48 and info["fps"] == 20
    assert info["features"]["observation.images.corner"]["shape"] == [32, 32, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # the store's temporary folder went
    # an existing dataset is refused, then replaced with --overwrite
    again = runner.invoke(app, args)
    one_error_line(again, 2, "--overwrite")
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0
    one_error_line(runner.invoke(app, [*args, "--kir"]), 2, "drop --kir")


def test_convert_round_trip(tmp_path, expert_episodes) -> None:
    """A store -> LeRobot v3 -> a store: the frames an action was taken from, the actions and
    the success flags come back (the video's frames within H.264's loss)."""
    store = EpisodeStore(tmp_path / "store")
    store.add(expert_episodes)
    first = runner.invoke(app, ["convert", str(tmp_path / "store"), str(tmp_path / "ds")])
    assert first.exit_code == 0, first.output
    assert check_dataset(tmp_path / "ds") == []
    size = str(expert_episodes[0].frames.shape[1])
    back = runner.invoke(
        app,
        ["convert", str(tmp_path / "ds"), str(tmp_path / "back"), "--set", f"lerobot.fps={20}",
         "--set", f"simulator.image_size={size}"],
    )  # fmt: skip
    assert back.exit_code == 0, back.output
    for source, copy in zip(expert_episodes, EpisodeStore.open(tmp_path / "back")):
        # one action fewer: the last row's action leads to a frame no row holds
        assert copy.length == source.length - 1
        np.testing.assert_array_equal(copy.actions, source.actions[:-1])
        assert copy.success[-1] == source.success[-2:].any()
        np.testing.assert_array_equal(copy.success[:-1], source.success[:-2])
        error = np.abs(copy.frames.astype(int) - source.frames[: copy.length + 1]).mean()
        assert error < 6.0, error  # yuv420p at 32x32
        assert copy.instruction == source.instruction


@pytest.mark.parametrize(
    ("sets", "fragments"),
    [
        (["lerobot.camera=wrist"], ["no camera 'wrist'", "observation.images.front"]),
        (["lerobot.action_key=act"], ["no feature 'act'", "lerobot.action_key"]),
        (["lerobot.success=episode:done"], ["no episode column 'done'"]),
        (["lerobot.fps=3"], ["lerobot.fps=3 must divide", "(10)"]),
    ],
)
def test_what_a_dataset_lacks_is_one_line(tmp_path, cache, sets, fragments) -> None:
    args = ["train-reward", "--data", str(FIXTURE), "--out", str(tmp_path / "rm"), *cache]
    result = runner.invoke(app, [*args, *(a for s in sets for a in ("--set", s))])
    one_error_line(result, 2, *fragments)
    assert not (tmp_path / "rm").exists()


def test_a_dataset_without_success_names_the_settings(tmp_path, cache) -> None:
    data = tmp_path / "nosuccess"
    shutil.copytree(FIXTURE, data)
    info = json.loads((data / "meta" / "info.json").read_text())
    for key in ("next.success", "next.reward"):
        del info["features"][key]
    (data / "meta" / "info.json").write_text(json.dumps(info))
    result = runner.invoke(app, ["train-reward", "--data", str(data), *cache])
    one_error_line(result, 2, "no success in the dataset", "lerobot.success=last_frame")


def test_a_hub_dataset_is_fetched_and_read(tmp_path, hub, cache) -> None:
    """OWNER/NAME on the (loopback) Hub: meta/ first, then the data and the chosen camera's
    videos, through huggingface_hub's dataset endpoints."""
    from tests.helpers.hub_server import write_repo

    files = {p.relative_to(FIXTURE).as_posix(): p for p in FIXTURE.rglob("*") if p.is_file()}
    files = {rel: path.read_bytes() for rel, path in files.items()}
    files["videos/observation.images.side/chunk-000/file-000.mp4"] = b"another camera"
    write_repo(hub.root, "robots/tiny", files)
    out = tmp_path / "store"
    result = runner.invoke(
        app,
        ["convert", "robots/tiny", str(out), "--set", "lerobot.camera=front", *cache],
    )
    assert result.exit_code == 0, result.output
    assert len(EpisodeStore.open(out)) == 5
    fetched = {r.path for r in hub.content_requests()}
    assert not any("observation.images.side" in path for path in fetched)
    missing = runner.invoke(app, ["convert", "robots/none", str(tmp_path / "x"), *cache])
    one_error_line(missing, 1, "robots/none")
