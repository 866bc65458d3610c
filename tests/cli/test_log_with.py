"""--log-with: the same scalars to W&B (offline here) as to TensorBoard and metrics.jsonl, the
evaluation videos and the co-evolve report's plots as media in both, one line for a tracker that
is unknown or not installed, and nothing imported where none is chosen."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers import ROOT
from tests.helpers.output import one_error_line
from wmrl_cli.cli.app import app
from wmrl_cli.trackers import parse_log_with

runner = CliRunner()


def test_log_with_names_the_trackers() -> None:
    assert parse_log_with("tensorboard") == (True, [])
    assert parse_log_with("wandb, tensorboard") == (True, ["wandb"])
    assert parse_log_with("trackio,wandb") == (False, ["wandb", "trackio"])


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("mlflow", "expected a comma-separated list"), ("", "expected a comma-separated list")],
)
def test_an_unknown_tracker_is_one_line(tmp_path, value, fragment) -> None:
    result = runner.invoke(app, ["sft", "--log-with", value, "--out", str(tmp_path / "r")])
    one_error_line(result, 2, fragment)
    assert not (tmp_path / "r").exists()


def test_a_tracker_not_installed_is_one_line(tmp_path, monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "wandb" else real(n, *a)
    )
    result = runner.invoke(app, ["sft", "--log-with", "wandb", "--out", str(tmp_path / "r")])
    one_error_line(result, 2, "wandb is not installed", "pip install wandb")
    assert not (tmp_path / "r").exists()


def test_no_tracker_package_is_imported_where_none_is_chosen(tmp_path) -> None:
    """Scalars, a video and an image to TensorBoard alone: no tracker package is imported."""
    png = tmp_path / "plot.png"
    png.write_bytes(_png())
    code = (
        "import sys; from pathlib import Path; import numpy as np\n"
        "from wmrl_cli.logging import MetricsLogger\n"
        f"log = MetricsLogger(Path({str(tmp_path / 'run')!r}))\n"
        "log.log({'train/loss': 1.0}, 1)\n"
        "log.log_video('eval/video', np.zeros((2, 4, 8, 8, 3), np.uint8), 1)\n"
        f"log.log_image('report/plot', Path({str(png)!r}), 1); log.close()\n"
        "assert not {'wandb', 'trackio'} & set(sys.modules), 'a tracker was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_an_offline_wandb_run_holds_the_scalars_tensorboard_does(tmp_path, monkeypatch) -> None:
    """MetricsLogger with W&B (offline: nothing leaves the machine): every scalar of every step
    in the run's W&B records, under the names TensorBoard and metrics.jsonl use."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    from wmrl_cli.logging import MetricsLogger

    run = tmp_path / "run"
    log = MetricsLogger(run, True, trackers=["wandb"], config={"training": {"lr": 0.25}})
    for step in (1, 2, 3):
        log.log({"train/loss": 1.0 / (step + 1), "env/real_steps": 1000 * step}, step)
    log.close()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (records,) = list((run / "wandb").glob("offline-run-*/run-*.wandb"))
    # protobuf records, keys and values as JSON text; W&B's service process may still be
    # writing them when finish() has returned (seen once in a loaded suite)
    for _ in range(60):
        data = records.read_bytes()
        if b"train/loss" in data and b"0.25" in data:
            break
        time.sleep(0.5)
    for row in rows:
        for key, value in row.items():
            if key != "step":  # W&B writes 1000.0 as 1000
                shown = json.dumps(int(value) if float(value).is_integer() else value)
                assert key.encode() in data and shown.encode() in data, (key, value)
    assert b"0.25" in data  # the run's configuration
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"train/loss", "env/real_steps"}


def _png(side: int = 8) -> bytes:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (side, side), "red").save(out, format="PNG")
    return out.getvalue()


def _offline_wandb(monkeypatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def _wandb_media(run) -> dict[str, list[str]]:
    """The media files of RUN's offline W&B run, by kind (images, videos), as paths under it."""
    (files,) = list((run / "wandb").glob("offline-run-*/files"))
    return {
        kind: sorted(
            str(p.relative_to(files / "media" / kind))
            for p in (files / "media" / kind).rglob("*.*")
        )
        for kind in ("images", "videos")
    }


def _tensorboard_images(run) -> dict[str, list[int]]:
    """TensorBoard's image tags under RUN/tensorboard, each with the steps it was logged at."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    return {tag: [e.step for e in events.Images(tag)] for tag in events.Tags()["images"]}


def test_a_video_of_frames_goes_to_tensorboard_and_wandb_at_its_step(tmp_path, monkeypatch) -> None:
    """train-wm's open-loop video (frames in memory): a GIF in TensorBoard and in W&B."""
    _offline_wandb(monkeypatch)
    from wmrl_cli.logging import MetricsLogger

    run = tmp_path / "run"
    frames = np.random.default_rng(0).integers(0, 255, (2, 5, 16, 16, 3), dtype=np.uint8)
    with MetricsLogger(run, True, trackers=["wandb"]) as log:
        log.log({"train/loss": 1.0}, 3)
        log.log_video("eval/wm/open_loop", frames, 3)
    assert _tensorboard_images(run) == {"eval/wm/open_loop": [3]}
    (video,) = _wandb_media(run)["videos"]
    assert video.startswith("eval/wm/open_loop_3_") and video.endswith(".gif"), video


def test_the_coevolve_report_media_go_to_tensorboard_and_wandb(tmp_path, monkeypatch) -> None:
    """co-evolve's success plot and a stage's evaluation grid (what the run made), in a tracker
    run of the co-evolve run's own: TensorBoard images and W&B media, at step 0."""
    _offline_wandb(monkeypatch)
    from wmrl_cli.coevolve.report import PLOT_FILE, log_report_media, plot_success
    from wmrl_cli.config import resolve_config
    from wmrl_cli.evaluation.videos import write_mp4

    run = tmp_path / "co"
    rates = {"per_task": {"reach": 0.5, "push": 0.0}, "overall": 0.25}
    plot_success({"base": rates, "stage1": rates}, run / PLOT_FILE, 2)
    write_mp4(
        run / "eval" / "stage1" / "videos" / "reach_grid.mp4", np.zeros((4, 16, 16, 3), np.uint8), 4
    )
    cfg = resolve_config()
    cfg.logging.trackers = ["wandb"]
    log_report_media(run, cfg, ["base", "stage1"], [])
    assert _tensorboard_images(run) == {
        "report/success_per_stage": [0],
        "eval/stage1/video/reach": [0],
    }
    media = _wandb_media(run)
    assert [p.split("_0_")[0] for p in media["images"]] == ["report/success_per_stage"]
    assert [p.split("_0_")[0] for p in media["videos"]] == ["eval/stage1/video/reach"]
    assert media["videos"][0].endswith(".mp4")  # the run's own mp4, as it is
    assert not (run / "metrics.jsonl").exists()


# About 50 s on 2 cores (a tiny simulator run and its evaluation); the media path it ends in
# (MetricsLogger.log_video of an mp4, trackers.log_media) is in the default suite's tests above.
@pytest.mark.slow
def test_train_policy_logs_its_evaluation_videos_as_media(assets, tmp_path, monkeypatch) -> None:
    """train-policy with eval.save_video and --log-with tensorboard,wandb: each task's grid of the
    in-run evaluation, at the evaluation's step, in TensorBoard and the offline W&B run."""
    _offline_wandb(monkeypatch)
    from tests.helpers.train_policy import sim_args

    run = tmp_path / "run"
    extra = ["--set", "eval.save_video=true", "--log-with", "tensorboard,wandb"]
    result = runner.invoke(app, [*sim_args(assets, run, 1, eval_trials=1), *extra])
    assert result.exit_code == 0, result.output
    grids = sorted((run / "eval" / "videos" / "step_000001").glob("*_grid.mp4"))
    tasks = [p.name.removesuffix("_grid.mp4") for p in grids]
    assert len(tasks) == 3, grids
    assert _tensorboard_images(run) == {f"eval/video/{task}": [1] for task in tasks}
    videos = _wandb_media(run)["videos"]
    assert sorted(p.split("_1_")[0] for p in videos) == [f"eval/video/{t}" for t in tasks]


def test_train_commands_take_log_with() -> None:
    for command in ("sft", "train-wm", "train-reward", "train-policy", "co-evolve"):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert "--log-with" in result.output, command
