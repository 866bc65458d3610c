"""`wmrl train-reward` on episodes whose success is visible in the frame."""

from __future__ import annotations

import json

import numpy as np
import torch
from typer.testing import CliRunner

from tests.helpers.episodes import visible_success_episode
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.rewards.loading import load_reward_model

runner = CliRunner()


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


def test_train_reward_scores_at_the_configured_image_size(tmp_path) -> None:
    """reward_model.image_size upsamples the 16x16 frames to 32x32 for training and scoring,
    and the saved model keeps the size."""
    store = EpisodeStore(tmp_path / "eps")
    store.add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(20)])
    out = tmp_path / "run"
    args = ["train-reward", "--data", str(tmp_path / "eps"), "--out", str(out)]
    args += ["--steps", "40", "--width", "4", "--set", "reward_model.batch_size=16"]
    result = runner.invoke(app, [*args, "--set", "reward_model.image_size=32"])
    assert result.exit_code == 0, result.output
    model = load_reward_model(out / "reward_model")
    assert model.config.image_size == 32
    frames = visible_success_episode(99, succeed=True).frames
    assert model.preprocess(torch.from_numpy(frames)).shape == (len(frames), 3, 32, 32)
    scores = model.predict(frames[None], [1])[0].numpy()
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


def test_eval_reward_model_on_stored_episodes(tmp_path) -> None:
    train = EpisodeStore(tmp_path / "eps")
    train.add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(20)])
    held_out = EpisodeStore(tmp_path / "held")
    held_out.add([visible_success_episode(100 + i, succeed=i % 2 == 0) for i in range(6)])
    run = tmp_path / "rm"
    trained = runner.invoke(app, ["train-reward", "--data", str(tmp_path / "eps"), "--out",
                                  str(run), "--steps", "40", "--width", "4",
                                  "--set", "reward_model.batch_size=16"])  # fmt: skip
    assert trained.exit_code == 0, trained.output
    out = tmp_path / "eval"
    args = ["eval", "--reward-model", str(run), "--data", str(tmp_path / "held"), "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["episodes"] == 6 and report["positive_frames"] == 3 * 4
    assert report["frame_level"]["f1"] >= 0.9
    assert report["episode_level"]["tp"] == 3 and report["episode_level"]["tn"] == 3
    # the imagined env's verdict, refit out of sample, and the episodes' ranking
    refit = report["episodes_cross_validated"]
    assert refit["tp"] + refit["fp"] + refit["fn"] + refit["tn"] == 6
    assert report["episode_auc"] == 1.0
    assert set(report["per_task"]) == {"t0", "t1"}
    assert "Wilson 95%" in (out / "report.md").read_text()
    for bad, message in (
        (["eval", "--reward-model", str(run)], "needs --data"),
        (
            [
                "eval",
                "--reward-model",
                str(run),
                "--data",
                str(tmp_path / "held"),
                "--policy",
                "expert",
            ],
            "drop --policy",
        ),  # fmt: skip
        (["eval", "--data", str(tmp_path / "held")], "--data applies only"),
    ):
        refused = runner.invoke(app, bad)
        assert refused.exit_code != 0 and message in refused.output, refused.output
        assert "Traceback" not in refused.output


def test_random_shift_translates_within_the_pad_and_keeps_shape() -> None:
    import torch

    from wmrl_cli.training.reward_trainer import random_shift

    images = torch.zeros(64, 1, 16, 16)
    images[:, :, 8, 8] = 1.0  # one bright pixel in the middle
    shifted = random_shift(images, 2, np.random.default_rng(0))
    assert shifted.shape == images.shape
    rows, cols = torch.nonzero(shifted[:, 0] == 1.0)[:, 1:].T
    assert (rows - 8).abs().max() <= 2 and (cols - 8).abs().max() <= 2
    assert len(set(zip(rows.tolist(), cols.tolist(), strict=True))) > 10  # offsets vary
    assert torch.equal(random_shift(images, 0, np.random.default_rng(0)), images)


def test_ranking_auc() -> None:
    from wmrl_cli.evaluation.reward_eval import ranking_auc

    positive = np.array([True, True, False, False])
    assert ranking_auc(np.array([0.9, 0.8, 0.1, 0.2]), positive) == 1.0
    assert ranking_auc(np.array([0.1, 0.2, 0.9, 0.8]), positive) == 0.0
    assert ranking_auc(np.array([0.5, 0.9, 0.5, 0.1]), positive) == 0.875  # one tie of four


def test_clip_rows_stay_within_their_episode() -> None:
    from wmrl_cli.training.reward_trainer import clip_rows

    rows = clip_rows(np.array([7, 7, 7, 3, 3]), window=3)
    assert rows.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [3, 3, 3], [3, 3, 4]]


def test_train_reward_trains_a_videomae_clip_judge(tmp_path) -> None:
    """--kind videomae trains WMPO's clip classifier at the size reward_model.videomae gives;
    its clips never cross episodes, its saved model scores each frame's clip, and it keeps
    the clip length the imagined env reads its history from."""
    store = EpisodeStore(tmp_path / "eps")
    store.add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(20)])
    out = tmp_path / "run"
    sizes = (
        "{hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 32,"
        " patch_size: 4, num_frames: 4}"
    )
    result = runner.invoke(
        app,
        [
            "train-reward", "--data", str(tmp_path / "eps"), "--out", str(out), "--steps", "60",
            "--kind", "videomae", "--set", f"reward_model.videomae={sizes}",
            "--set", "reward_model.image_size=16", "--set", "reward_model.batch_size=16",
            "--set", "reward_model.lr=0.003",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "reward_model" / "reward_metrics.json").read_text())
    assert metrics["best_f1"]["f1"] >= 0.9, metrics
    model = load_reward_model(out / "reward_model")
    assert model.kind == "videomae" and model.clip_length == 4
    assert model.config.image_size == 16 and model.config.hidden_size == 16
    scores = model.predict(visible_success_episode(99, succeed=True).frames[None])[0].numpy()
    assert (scores[9:] >= model.threshold).all() and (scores[:9] < model.threshold).all()
    failed = model.predict(visible_success_episode(98, succeed=False).frames[None])[0].numpy()
    assert (failed < model.threshold).all()


def test_videomae_sizes_on_a_resnet_are_one_line(tmp_path) -> None:
    store = EpisodeStore(tmp_path / "eps")
    store.add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(6)])
    for kind, sizes, said in (
        ("resnet", "{num_frames: 4}", "reward_model.videomae is set, but reward_model.kind"),
        ("videomae", "{frames: 4}", "unknown field(s) frames"),
    ):
        result = runner.invoke(
            app,
            [
                "train-reward", "--data", str(tmp_path / "eps"), "--out", str(tmp_path / kind),
                "--kind", kind, "--set", f"reward_model.videomae={sizes}",
            ],
        )  # fmt: skip
        assert result.exit_code != 0 and said in result.output, result.output
        assert "Traceback" not in result.output
