"""`wmrl rollout` and `wmrl eval` end to end on a small Meta-World suite."""

from __future__ import annotations

import json

import imageio.v2 as imageio
import numpy as np
from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.reset_set import load_rlinf_reset_set
from wmrl_cli.files.safe_npy import load_npy

runner = CliRunner()
SMALL = ["--suite", "mw3", "--image-size", "32", "--num-envs", "3", "--num-workers", "0"]


def test_rollout_kir_export(tmp_path) -> None:
    out = tmp_path / "demos"
    args = [
        "rollout",
        "--out",
        str(out),
        "--policy",
        "expert",
        "-n",
        "1",
        "--kir",
        "--export-rlinf",
        *SMALL,
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    store = EpisodeStore.open(out)
    assert len(store) == 3 and (out / "config.yaml").is_file()
    kir = json.loads((out / "kir.json").read_text())
    assert kir["keyframes"] and kir["rule"]["chunks_before_success"] == [1, 2, 4]
    files = sorted(p.name for p in (out / "dataset").glob("*.npy"))
    assert {"traj0.npy", "traj1.npy", "traj2.npy", "traj0_kir.npy"} <= set(files)
    for name in files:
        trusted = np.load(out / "dataset" / name, allow_pickle=True)
        safe = load_npy(out / "dataset" / name)
        for a, b in zip(trusted, safe):
            assert a.keys() == b.keys()
            assert all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
    assert len(load_rlinf_reset_set(out)) == len(files)

    # A second rollout into the same store is refused unless appended; appending adds new seeds.
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--append" in again.output
    appended = runner.invoke(app, [*args, "--append", "--policy", "random"])
    assert appended.exit_code == 0, appended.output
    index = EpisodeStore.open(out).index
    assert len(index) == 6 and len({m["seed"] for m in index}) == 6


def test_eval_expert_with_video(tmp_path) -> None:
    run = tmp_path / "eval"
    result = runner.invoke(
        app, ["eval", "--policy", "expert", "-n", "1", "--save-video", "--out", str(run), *SMALL]
    )
    assert result.exit_code == 0, result.output
    report = json.loads((run / "report.json").read_text())
    assert report["overall"] == 1.0 and len(report["episodes"]) == 3
    videos = sorted((run / "videos").glob("*.mp4"))
    assert len(videos) == 6  # one per episode + one grid per task
    reader = imageio.get_reader(run / report["episodes"][0]["video"])
    frame = reader.get_data(0)
    assert frame.shape == (128, 128, 3) and reader.count_frames() > 10
    assert (run / "report.md").read_text().count("100.0%") == 4


def test_eval_random_policy_and_bad_policy(tmp_path) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            "--policy",
            "random",
            "-n",
            "1",
            "--set",
            "simulator.max_steps=16",
            "--out",
            str(tmp_path),
            *SMALL,
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "report.json").read_text())["overall"] == 0.0
    bad = runner.invoke(app, ["eval", "--policy", str(tmp_path / "missing")])
    assert bad.exit_code == 1 and "unknown policy" in bad.output


def test_eval_against_a_baseline_pairs_episodes(tmp_path) -> None:
    expert = tmp_path / "expert"
    result = runner.invoke(
        app, ["eval", "--policy", "expert", "-n", "1", "--out", str(expert), *SMALL]
    )
    assert result.exit_code == 0, result.output
    random = tmp_path / "random"
    limit = ["--set", "simulator.max_steps=16"]
    args = ["eval", "--policy", "random", "-n", "1", *limit, *SMALL, "--baseline", str(expert)]
    result = runner.invoke(app, [*args, "--out", str(random)])
    assert result.exit_code == 0, result.output
    comparison = json.loads((random / "report.json").read_text())["baseline"]
    overall = comparison["overall"]
    assert overall["episodes"] == 3 and overall["rate_a"] == 1.0 and overall["rate_b"] == 0.0
    assert overall["difference"] == overall["low"] == overall["high"] == -1.0
    assert len(comparison["per_task"]) == 3
    assert "-100.0 [-100.0, -100.0]" in (random / "report.md").read_text()
    # bad baselines: one line, nothing written
    (tmp_path / "notes.txt").write_text("not a report")
    bad = runner.invoke(
        app, [*args[:-1], str(tmp_path / "notes.txt"), "--out", str(tmp_path / "bad")]
    )
    assert bad.exit_code == 1 and "not a policy evaluation report" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "bad").exists()
    other_suite = [a if a != "mw3" else "mw2" for a in args]
    bad = runner.invoke(app, [*other_suite, "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 1 and "evaluated mw3, this run mw2" in bad.output
    assert not (tmp_path / "bad").exists()
