"""`wmrl sft`: behaviour cloning end to end at a tiny size, resume, and evaluating the result."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from tests.helpers.sft import run_sft
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore

runner = CliRunner()


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory, expert_episodes):
    root = tmp_path_factory.mktemp("demos")
    EpisodeStore(root).add(expert_episodes)
    return root


def test_sft_resume_matches_uninterrupted_run(tmp_path, demo_store, monkeypatch) -> None:
    straight = run_sft(tmp_path / "a", demo_store, 4, "--set", "sft.save_every=2")
    assert straight.exit_code == 0, straight.output

    import wmrl_cli.jobs.sft as sft

    real_save = sft.save_checkpoint

    def save_then_die(run_dir, step, *args, **kwargs):
        real_save(run_dir, step, *args, **kwargs)
        raise KeyboardInterrupt  # the run is killed right after its first checkpoint

    monkeypatch.setattr(sft, "save_checkpoint", save_then_die)
    first = run_sft(tmp_path / "b", demo_store, 4, "--set", "sft.save_every=2")
    assert first.exit_code == 130, first.output
    assert not (tmp_path / "b" / "policy").exists()
    monkeypatch.setattr(sft, "save_checkpoint", real_save)
    resumed = run_sft(tmp_path / "b", demo_store, 4, "--set", "sft.save_every=2")
    assert resumed.exit_code == 0 and "resuming behaviour cloning from step 2" in resumed.output
    a = load_file(tmp_path / "a" / "policy" / "model.safetensors")
    b = load_file(tmp_path / "b" / "policy" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").open()]
    assert [row["step"] for row in losses] == [1, 2, 3, 4]
    assert all("train/sft/loss" in row for row in losses)
    # The real steps behind the run: its demonstrations' lengths, on every row.
    demos = sum(m["length"] for m in EpisodeStore.open(demo_store).index)
    assert {row["env/real_steps"] for row in losses} == {demos} and demos > 0
    assert (tmp_path / "a" / "tensorboard").is_dir()


def test_eval_and_rollout_with_learned_policy(tmp_path, demo_store) -> None:
    trained = run_sft(tmp_path / "run", demo_store, 2)
    assert trained.exit_code == 0, trained.output
    small = [
        "--suite",
        "mw3",
        "--image-size",
        "32",
        "--num-envs",
        "3",
        "--num-workers",
        "0",
        "--set",
        "simulator.max_steps=16",
        "-n",
        "1",
    ]
    result = runner.invoke(
        app,
        [
            "eval",
            "--policy",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "eval"),
            "--temperature",
            "1.0",
            *small,
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "eval" / "report.json").read_text())
    assert len(report["episodes"]) == 3 and all(e["length"] == 16 for e in report["episodes"])
    rolled = runner.invoke(
        app,
        [
            "rollout",
            "--policy",
            str(tmp_path / "run"),
            "--out",
            str(tmp_path / "rollouts"),
            "--greedy",
            *small,
        ],
    )
    assert rolled.exit_code == 0, rolled.output
    episode = EpisodeStore.open(tmp_path / "rollouts").load(0)
    assert episode.actions.shape == (16, 4) and sorted(episode.sim_states) == [0, 8, 16]


def test_sft_rejects_missing_data(tmp_path) -> None:
    result = runner.invoke(
        app, ["sft", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 1 and "not an episode store" in result.output
