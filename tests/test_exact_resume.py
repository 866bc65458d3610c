"""Exact resume (issue 15): a training command killed with SIGKILL and started again ends with
the weights (sha256 of the safetensors) and metrics.jsonl of an uninterrupted run, and no step
logged twice.

Each run is a subprocess (tests/kill_at.py kills it at a chosen call: before the first
checkpoint, so the rerun starts over from cached data, or right after a checkpoint, so it
resumes from it); the uninterrupted run is the plain command.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.test_sft import TINY
from tests.test_train_reward import visible_success_episode
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.pace import Pipeline

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl"}


def _run(args: list[str], *kill_points: str) -> subprocess.CompletedProcess:
    """`wmrl ARGS`, killed at `kill_points` ("MODULE:ATTR before|after N", see kill_at.py)."""
    points = [part for point in kill_points for part in point.split()]
    cmd = [sys.executable, "-m", "tests.kill_at", *points, "--", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    expected = -signal.SIGKILL if kill_points else 0
    assert proc.returncode == expected, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _weights(directory: Path) -> dict[str, str]:
    files = sorted(directory.rglob("*.safetensors"))
    assert files, f"no weights in {directory}"
    return {str(f.relative_to(directory)): _sha256(f) for f in files}


def _metrics(run: Path) -> list[dict]:
    """metrics.jsonl without wall-clock times."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def _assert_same_run(straight: Path, resumed: Path, model: str) -> None:
    assert _weights(straight / model) == _weights(resumed / model)
    a, b = _metrics(straight), _metrics(resumed)
    assert a == b
    keys = [(row["step"], tuple(sorted(row))) for row in b]
    assert len(keys) == len(set(keys)), "a step was logged twice"


def test_sft_killed_then_rerun_matches_uninterrupted(tmp_path) -> None:
    """Demonstrations collected and cached, killed before the first checkpoint (the rerun
    starts over from the cached demos), killed again right after it (the rerun resumes)."""

    def sft(out: Path) -> list[str]:
        return [
            "sft", "--suite", "mw2", "--demos-per-task", "1", "--steps", "4",
            "--num-workers", "0", "--set", "simulator.max_steps=120",
            "--set", "simulator.num_envs=2", "--set", "sft.save_every=2",
            "--out", str(out), *TINY,
        ]  # fmt: skip

    _run(sft(tmp_path / "a"))
    save = "wmrl_cli.training.sft:save_checkpoint"
    _run(sft(tmp_path / "b"), f"{save} before 1")
    assert (tmp_path / "b" / "demos" / "index.json").is_file()
    assert not (tmp_path / "b" / "checkpoints").exists()
    _run(sft(tmp_path / "b"), f"{save} after 1")
    done = _run(sft(tmp_path / "b"))
    assert "resuming behaviour cloning from step 2" in done.stdout
    _assert_same_run(tmp_path / "a", tmp_path / "b", "policy")
    assert [row["step"] for row in _metrics(tmp_path / "b")] == [1, 2, 3, 4]


def test_train_reward_killed_then_rerun_matches_uninterrupted(tmp_path) -> None:
    store = EpisodeStore(tmp_path / "eps")
    store.add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(20)])

    def train(out: Path) -> list[str]:
        return [
            "train-reward", "--data", str(tmp_path / "eps"), "--out", str(out),
            "--steps", "40", "--width", "4", "--set", "reward_model.batch_size=8",
        ]  # fmt: skip

    _run(train(tmp_path / "a"))
    # Killed after training, before calibration: its loss rows are in metrics.jsonl.
    _run(train(tmp_path / "b"), "wmrl_cli.training.reward_trainer:score_frames before 1")
    assert len(_metrics(tmp_path / "b")) == 2
    _run(train(tmp_path / "b"))
    _assert_same_run(tmp_path / "a", tmp_path / "b", "reward_model")


def test_train_wm_killed_then_rerun_matches_uninterrupted(tmp_path, expert_episodes) -> None:
    """Killed after the autoencoder (before the windows are encoded: the rerun starts over),
    then right after the denoiser's first checkpoint (the rerun resumes from it). The
    autoencoder's rows (steps 1-3) overlap the denoiser's (1-4) and survive the resume."""
    EpisodeStore(tmp_path / "eps").add(expert_episodes)

    def train(out: Path) -> list[str]:
        return [
            "train-wm", "--data", str(tmp_path / "eps"), "--out", str(out),
            "--vae-steps", "3", "--steps", "4",
            "--set", "simulator.image_size=32", "--set", "world_model.batch_size=2",
            "--set", "world_model.val_every=2", "--set", "world_model.save_every=2",
            "--set", "world_model.val_episodes=1", "--set", "world_model.val_horizon=8",
            "--set", "world_model.window_stride=16", "--set", "world_model.num_inference_steps=1",
            "--set", "num_threads=1",
        ]  # fmt: skip

    _run(train(tmp_path / "a"))
    trainer = "wmrl_cli.training.world_model_trainer"
    _run(train(tmp_path / "b"), f"{trainer}:WorldModelTrainer.cache_latents before 1")
    assert not (tmp_path / "b" / "checkpoints").exists()
    _run(train(tmp_path / "b"), f"{trainer}:save_checkpoint after 1")
    done = _run(train(tmp_path / "b"))
    assert "resuming world-model training from step 2" in done.stdout
    _assert_same_run(tmp_path / "a", tmp_path / "b", "world_model")
    rows = _metrics(tmp_path / "b")
    assert [r["step"] for r in rows if "train/wm/autoencoder_loss" in r] == [3]
    # TensorBoard too: the resume's purge of steps > 2 spares the autoencoder's step 3.
    events = EventAccumulator(str(tmp_path / "b" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/wm/autoencoder_loss")] == [3]
    assert [e.step for e in events.Scalars("train/wm/loss")] == [4]
    # Once more on the finished run: validated again, nothing logged twice, the same weights.
    again = _run(train(tmp_path / "b"))
    assert "resuming world-model training from step 4" in again.stdout
    _assert_same_run(tmp_path / "a", tmp_path / "b", "world_model")


@pytest.mark.slow  # three smoke pipelines: about two minutes
def test_co_evolve_killed_in_the_world_model_stage_then_rerun_matches_uninterrupted(tmp_path):
    """Killed after the world-model stage's autoencoder: the rerun skips the finished stages
    (sft, evaluation, rollouts: no random numbers drawn) and trains the world model over from
    scratch; every stage's weights and metrics match the uninterrupted pipeline's."""

    def co_evolve(out: Path) -> list[str]:
        return ["co-evolve", "--profile", "smoke", "--out", str(out)]

    a, b = tmp_path / "a", tmp_path / "b"
    _run(co_evolve(a))
    trainer = "wmrl_cli.training.world_model_trainer"
    _run(co_evolve(b), f"{trainer}:WorldModelTrainer.cache_latents before 1")
    killed = json.loads((b / "stages.json").read_text())
    assert "sft" in killed and "world_model" not in killed
    _run(co_evolve(b))
    models = {
        "sft": "policy", "wm_base": "world_model", "rm_base": "reward_model",
        "stage1": "policy", "wm_evo1": "world_model", "rm_evo1": "reward_model",
        "stage2": "policy", "frozen_control": "policy",
    }  # fmt: skip
    for stage, model in models.items():
        _assert_same_run(a / stage, b / stage, model)
    report_a, report_b = (json.loads((run / "report.json").read_text()) for run in (a, b))
    assert report_a["success"] == report_b["success"]


def _draws() -> list[float]:
    return [*torch.rand(2).tolist(), *np.random.rand(2).tolist(), random.random()]


def test_co_evolve_seeds_each_stage_from_the_run_seed_and_its_name(tmp_path) -> None:
    """A stage run again from scratch (the earlier stages skipped, having consumed no random
    numbers in this process) draws what it drew in the uninterrupted pipeline."""
    first = Pipeline(tmp_path / "a", seed=7)
    (tmp_path / "a").mkdir()
    first.run("sft", lambda: [_draws() for _ in range(3)])
    straight = first.run("world_model", _draws)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "stages.json").write_text(json.dumps({"sft": first.state["sft"]}))
    torch.manual_seed(123)  # whatever state the process is in
    again = Pipeline(tmp_path / "b", seed=7)
    assert again.run("sft", _draws) == first.state["sft"]["result"]  # skipped
    assert again.run("world_model", _draws) == straight
    other_seed = Pipeline(tmp_path / "c", seed=8)
    (tmp_path / "c").mkdir()
    assert other_seed.run("world_model", _draws) != straight
    assert first.run("reward_model", _draws) != straight  # another stage, other draws
