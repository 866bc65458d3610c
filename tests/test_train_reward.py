"""`wmrl train-reward` on episodes whose success is visible in the frame."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.rewards.loading import load_reward_model

runner = CliRunner()


def visible_success_episode(i: int, succeed: bool) -> Episode:
    """Dark noisy frames; from the success step on, a bright square appears (a 'door open')."""
    rng = np.random.default_rng(i)
    length = 12
    frames = rng.integers(0, 60, (length + 1, 16, 16, 3), dtype=np.uint8)
    success = np.zeros(length, dtype=bool)
    if succeed:
        success[8:] = True
        frames[9:, 4:12, 4:12] = 230
    return Episode(
        task_id=i % 2,
        task_name=f"t{i % 2}",
        instruction="x",
        seed=i,
        init_id=i,
        frames=frames,
        actions=np.zeros((length, 4), np.float32),
        rewards=np.zeros(length, np.float32),
        success=success,
        chunk_size=4,
    )


def test_train_reward_calibrates_and_saves(tmp_path) -> None:
    store = EpisodeStore(tmp_path / "eps")
    store.add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(20)])
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "train-reward",
            "--data",
            str(tmp_path / "eps"),
            "--out",
            str(out),
            "--steps",
            "40",
            "--width",
            "4",
            "--set",
            "reward_model.batch_size=16",
            "--kind",
            "taskemb_resnet",
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "reward_model" / "reward_metrics.json").read_text())
    assert metrics["best_f1"]["f1"] >= 0.9 and metrics["val_positive"] > 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    real = sum(e.length for e in store)
    assert {row["env/real_steps"] for row in rows} == {real} and real > 0
    model = load_reward_model(out / "reward_model")
    assert model.kind == "taskemb_resnet"
    assert model.threshold == metrics["best_f1"]["threshold"]
    episode = visible_success_episode(99, succeed=True)
    scores = model.predict(episode.frames[None], [1])[0].numpy()
    assert (scores[9:] >= model.threshold).all() and (scores[:9] < model.threshold).all()


def test_train_reward_needs_successes(tmp_path) -> None:
    store = EpisodeStore(tmp_path / "eps")
    store.add([visible_success_episode(i, succeed=False) for i in range(6)])
    result = runner.invoke(
        app,
        [
            "train-reward",
            "--data",
            str(tmp_path / "eps"),
            "--out",
            str(tmp_path / "run"),
            "--steps",
            "2",
        ],
    )
    assert result.exit_code == 1 and "no successful frame" in result.output
