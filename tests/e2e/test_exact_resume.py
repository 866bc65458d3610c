"""Exact resume (issue 15): a training command killed with SIGKILL and started again ends with
the weights (sha256 of the safetensors) and metrics.jsonl of an uninterrupted run, and no step
logged twice.

Each run is a subprocess (tests/helpers/kill_at.py kills it at a chosen call: before the first
checkpoint, so the rerun starts over from cached data, or right after a checkpoint, so it
resumes from it); the uninterrupted run is the plain command.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers.episodes import visible_success_episode
from tests.helpers.resume_check import (
    assert_same_run,
    co_evolve_args,
    co_evolve_models,
    metrics,
    run,
    sft_args,
    train_reward_args,
    train_wm_args,
)
from wmrl_cli.coevolve.stage_cache import StageCache
from wmrl_cli.data.episodes import EpisodeStore


# the suite's 15-minute budget (2026-11-29: 15:54 on 2 cores); a kill then a rerun that matches
# stays in the default suite as test_random_kill's train-wm case and train-policy's resume tests
@pytest.mark.slow
def test_sft_killed_then_rerun_matches_uninterrupted(tmp_path) -> None:
    """Demonstrations collected and cached, killed before the first checkpoint (the rerun
    starts over from the cached demos), killed again right after it (the rerun resumes)."""

    run(sft_args(tmp_path / "a"))
    save = "wmrl_cli.jobs.sft:save_checkpoint"
    run(sft_args(tmp_path / "b"), f"{save} before 1")
    assert (tmp_path / "b" / "demos" / "index.json").is_file()
    assert not (tmp_path / "b" / "checkpoints").exists()
    run(sft_args(tmp_path / "b"), f"{save} after 1")
    done = run(sft_args(tmp_path / "b"))
    assert "resuming behaviour cloning from step 2" in done.stdout
    assert_same_run(tmp_path / "a", tmp_path / "b", "policy")
    assert [row["step"] for row in metrics(tmp_path / "b")] == [1, 2, 3, 4]


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
def test_train_reward_killed_then_rerun_matches_uninterrupted(tmp_path) -> None:
    eps = tmp_path / "eps"
    store = EpisodeStore(eps)
    store.add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(20)])

    run(train_reward_args(eps, tmp_path / "a"))
    # Killed after training, before calibration: its loss rows are in metrics.jsonl.
    score = "wmrl_cli.training.reward_trainer:score_frames"
    run(train_reward_args(eps, tmp_path / "b"), f"{score} before 1")
    assert len(metrics(tmp_path / "b")) == 2
    run(train_reward_args(eps, tmp_path / "b"))
    assert_same_run(tmp_path / "a", tmp_path / "b", "reward_model")


# 42 s; train-wm's resume stays in CI through tests/e2e/test_random_kill.py[train-wm]
@pytest.mark.slow
def test_train_wm_killed_then_rerun_matches_uninterrupted(tmp_path, expert_episodes) -> None:
    """Killed after the autoencoder (before the windows are encoded: the rerun starts over),
    then right after the denoiser's first checkpoint (the rerun resumes from it). The
    autoencoder's rows (steps 1-3) overlap the denoiser's (1-4) and survive the resume."""
    eps = tmp_path / "eps"
    EpisodeStore(eps).add(expert_episodes)

    run(train_wm_args(eps, tmp_path / "a"))
    trainer = "wmrl_cli.training.world_model_trainer"
    run(train_wm_args(eps, tmp_path / "b"), f"{trainer}:WorldModelTrainer.cache_latents before 1")
    assert not (tmp_path / "b" / "checkpoints").exists()
    run(train_wm_args(eps, tmp_path / "b"), f"{trainer}:save_checkpoint after 1")
    done = run(train_wm_args(eps, tmp_path / "b"))
    assert "resuming world-model training from step 2" in done.stdout
    assert_same_run(tmp_path / "a", tmp_path / "b", "world_model")
    rows = metrics(tmp_path / "b")
    assert [r["step"] for r in rows if "train/wm/autoencoder_loss" in r] == [3]
    # TensorBoard too: the resume's purge of steps > 2 spares the autoencoder's step 3.
    events = EventAccumulator(str(tmp_path / "b" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/wm/autoencoder_loss")] == [3]
    assert [e.step for e in events.Scalars("train/wm/loss")] == [4]
    # Once more on the finished run: validated again, nothing logged twice, the same weights.
    again = run(train_wm_args(eps, tmp_path / "b"))
    assert "resuming world-model training from step 4" in again.stdout
    assert_same_run(tmp_path / "a", tmp_path / "b", "world_model")


@pytest.mark.slow  # three smoke pipelines: about two minutes
def test_co_evolve_killed_in_the_world_model_stage_then_rerun_matches_uninterrupted(tmp_path):
    """Killed after the world-model stage's autoencoder: the rerun skips the finished stages
    (sft, evaluation, rollouts: no random numbers drawn) and trains the world model over from
    scratch; every stage's weights and metrics match the uninterrupted pipeline's."""

    a, b = tmp_path / "a", tmp_path / "b"
    run(co_evolve_args(a))
    trainer = "wmrl_cli.training.world_model_trainer"
    run(co_evolve_args(b), f"{trainer}:WorldModelTrainer.cache_latents before 1")
    killed = json.loads((b / "stages.json").read_text())
    assert "sft" in killed and "world_model" not in killed
    run(co_evolve_args(b))
    for stage, model in co_evolve_models(a).items():
        assert_same_run(a / stage, b / stage, model)
    report_a, report_b = (json.loads((r / "report.json").read_text()) for r in (a, b))
    assert report_a["success"] == report_b["success"]


def _draws() -> list[float]:
    return [*torch.rand(2).tolist(), *np.random.rand(2).tolist(), random.random()]


def test_co_evolve_seeds_each_stage_from_the_run_seed_and_its_name(tmp_path) -> None:
    """A stage run again from scratch (the earlier stages skipped, having consumed no random
    numbers in this process) draws what it drew in the uninterrupted pipeline."""
    first = StageCache(tmp_path / "a", seed=7)
    (tmp_path / "a").mkdir()
    first.run("sft", lambda: [_draws() for _ in range(3)])
    straight = first.run("world_model", _draws)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "stages.json").write_text(json.dumps({"sft": first.state["sft"]}))
    torch.manual_seed(123)  # whatever state the process is in
    again = StageCache(tmp_path / "b", seed=7)
    assert again.run("sft", _draws) == first.state["sft"]["result"]  # skipped
    assert again.run("world_model", _draws) == straight
    other_seed = StageCache(tmp_path / "c", seed=8)
    (tmp_path / "c").mkdir()
    assert other_seed.run("world_model", _draws) != straight
    assert first.run("reward_model", _draws) != straight  # another stage, other draws
