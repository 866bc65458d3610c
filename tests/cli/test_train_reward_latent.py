"""`wmrl train-reward --kind latent --world-model WM`: a success head on the world model's
frozen VAE latents, trained, calibrated, saved self-contained, evaluated and fine-tuned as the
other reward models are."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from tests.helpers.episodes import visible_success_episode
from tests.helpers.world_models import tiny_opensora
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.rewards.loading import load_reward_model

runner = CliRunner()
OPTIONS = ["--width", "4", "--set", "reward_model.batch_size=16", "--set", "reward_model.lr=0.003"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Episodes whose success is visible (16x16) and a tiny OpenSora world model at 16x16."""
    root = tmp_path_factory.mktemp("latent")
    EpisodeStore(root / "eps").add(
        [visible_success_episode(i, succeed=i % 3 != 0) for i in range(20)]
    )
    EpisodeStore(root / "held").add(
        [visible_success_episode(100 + i, succeed=i % 2 == 0) for i in range(6)]
    )
    world_model = tiny_opensora(16)
    world_model.save_pretrained(root / "wm" / "world_model")
    return root, world_model


def _encoder_equals_world_models(model, world_model) -> bool:
    world = world_model.vae.state_dict()
    own = model.encoder_state_dict()
    return bool(own) and all(torch.equal(v, world[k]) for k, v in own.items())


def test_train_reward_trains_a_latent_judge(inputs) -> None:
    root, world_model = inputs
    out = root / "run"
    args = ["train-reward", "--data", str(root / "eps"), "--out", str(out), "--kind", "latent"]
    result = runner.invoke(
        app, [*args, "--world-model", str(root / "wm"), "--steps", "60", *OPTIONS]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "reward_model" / "reward_metrics.json").read_text())
    assert metrics["best_f1"]["f1"] >= 0.9, metrics
    record = json.loads((out / "run.json").read_text())
    assert record["inputs"]["world_model"]["path"] == str(root / "wm")
    model = load_reward_model(out / "reward_model")
    assert model.kind == "latent" and model.config.width == 4 and model.config.num_tasks == 2
    assert model.threshold == metrics["best_f1"]["threshold"]
    assert _encoder_equals_world_models(model, world_model)  # frozen through training
    scores = model.predict(visible_success_episode(99, succeed=True).frames[None], [1])[0]
    assert scores.shape == (13,)
    assert (scores[9:] >= model.threshold).all() and (scores[:9] < model.threshold).all()

    # scored and calibrated on other episodes by `wmrl eval --reward-model`
    report_dir = root / "eval"
    evaluated = runner.invoke(
        app,
        ["eval", "--reward-model", str(out), "--data", str(root / "held"), "-o", str(report_dir)],
    )
    assert evaluated.exit_code == 0, evaluated.output
    report = json.loads((report_dir / "report.json").read_text())
    assert report["episodes"] == 6 and report["frame_level"]["f1"] >= 0.8, report

    # --init fine-tunes it: kind, sizes and the frozen encoder kept
    tuned = root / "tuned"
    args = ["train-reward", "--data", str(root / "eps"), "--out", str(tuned), "--steps", "5"]
    result = runner.invoke(app, [*args, "--init", str(out), "--set", "reward_model.batch_size=8"])
    assert result.exit_code == 0, result.output
    again = load_reward_model(tuned / "reward_model")
    assert again.kind == "latent" and again.config.width == 4
    assert _encoder_equals_world_models(again, world_model)
    assert not torch.equal(again.head[0].weight, model.head[0].weight)
    for extra, said in (
        (["--world-model", str(root / "wm")], "--world-model builds a new latent judge"),
        (["--width", "8"], "--width 8, but --init"),
    ):
        refused = runner.invoke(app, [*args, "--init", str(out), "--overwrite", *extra])
        assert refused.exit_code == 2 and said in refused.output, refused.output


def test_latent_needs_a_world_model_in_one_line(inputs) -> None:
    root, _ = inputs
    base = ["train-reward", "--data", str(root / "eps"), "--steps", "2"]
    for extra, said in (
        (["--kind", "latent"], "--kind latent needs --world-model WM"),
        (["--world-model", str(root / "wm")], "--world-model is for --kind latent"),
        (["--kind", "latent", "--world-model", str(root / "none")], "does not exist"),
        (["--kind", "latent", "--world-model", str(root / "eps")], "no world model here"),
    ):
        out = root / f"refused{len(said)}"
        result = runner.invoke(app, [*base, "--out", str(out), *extra])
        assert result.exit_code in (1, 2) and said in result.output, result.output
        assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
        assert not out.exists()
        if "needs --world-model" in said:
            assert result.exit_code == 2
