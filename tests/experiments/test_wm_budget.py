"""experiments/world-model-budget/score_checkpoints.py on a toy train-wm run: a checkpoint is
scored with the EMA weights its run validates and saves (its last step scores as the saved
model does), each against the last named, and bad input is one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.helpers import ROOT
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore

SCRIPT = ROOT / "experiments" / "world-model-budget" / "score_checkpoints.py"


@pytest.fixture(scope="module")
def wm_run(tmp_path_factory, expert_episodes):
    root = tmp_path_factory.mktemp("wm-budget")
    EpisodeStore(root / "data").add(expert_episodes)
    sets = {
        "simulator.image_size": 32, "world_model.batch_size": 2, "world_model.save_every": 2,
        "world_model.val_every": 4, "world_model.val_episodes": 1, "world_model.val_horizon": 16,
        "world_model.window_stride": 16, "world_model.num_inference_steps": 1,
        "world_model.keep_checkpoints": 0, "world_model.ema_decay": 0.5, "num_threads": 1,
    }  # fmt: skip
    argv = ["train-wm", "--data", str(root / "data"), "--backend", "opensora", "--vae-steps",
            "2", "--steps", "4", "--out", str(root / "run")]  # fmt: skip
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == 0, done.output
    return root


def _score(wm_run, *extra: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(SCRIPT), "--run", str(wm_run / "run"), "--preset",
            str(wm_run / "run" / "config.yaml"), "--data", str(wm_run / "data"), "-n", "2",
            *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)


def test_checkpoints_score_with_their_ema_weights_against_the_last(wm_run, tmp_path) -> None:
    done = _score(wm_run, "--step", "2", "--step", "4", "--step", "final", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert list(scores) == ["2", "4", "final"] and scores["4"]["episodes"] == 3
    # step 4's checkpoint with its EMA weights is the model the run saved at step 4
    assert scores["4"]["per_episode"] == scores["final"]["per_episode"]
    assert scores["2"]["per_episode"] != scores["4"]["per_episode"]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| model | episodes | psnr@8 | action_gap@8 |")
    assert rows[1].startswith("| 2 | 3 | ") and " [" in rows[1]  # a difference and interval
    assert rows[3].startswith("| final | 3 | ") and " [" not in rows[3]


def test_another_saved_model_is_scored_after_the_steps(wm_run, tmp_path) -> None:
    saved = wm_run / "run" / "world_model"
    done = _score(wm_run, "--step", "2", "--model", f"saved={saved}", "--model",
                  f"saved-g1={saved}@g1", "--against", "saved", "--alternatives", "other,random",
                  "--out", str(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert list(scores) == ["2", "saved", "saved-g1"]
    assert "action_gap_random@32" in scores["2"]["per_episode"]
    assert "| action_gap_random@8 |" in done.stdout
    assert "Each against saved," in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| saved")]
    assert " [" not in rows[0] and " [" in rows[1]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--step", "3"), "step_000003: no such checkpoint"),
        (("--model", "no-equals"), "expected NAME=PATH"),
        (("--model", "a=nowhere"), "no such world model nowhere"),
        (("--step", "2", "--step", "2"), "names must differ"),
        ((), "nothing to score"),
        (("--step", "2", "--alternatives", "sideways"), "--alternatives"),
        (("--step", "ten"), "expected a checkpoint's step number or final"),
    ],
)
def test_bad_input_is_one_line_exit_2(wm_run, extra, message) -> None:
    done = _score(wm_run, *extra)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
