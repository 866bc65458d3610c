"""`wmrl train-policy`: GRPO/PPO in a tiny imagined env, metrics, resume and two ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from tests.test_sft import TINY
from wmrl_cli.cli.app import app
from wmrl_cli.config import resolve_config
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.rewards.loading import save_reward_model
from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
from wmrl_cli.training.world_model_trainer import build_world_model

runner = CliRunner()

REFERENCE_METRICS = [
    "train/actor/approx_kl",
    "train/actor/clip_fraction",
    "train/actor/clipped_ratio",
    "train/actor/grad_norm",
    "train/actor/lr",
    "train/actor/policy_loss",
    "train/critic/value_loss",
    "train/critic/value_clip_ratio",
    "train/critic/explained_variance",
    "train/entropy_loss",
    "train/loss",
    "rollout/advantages_max",
    "rollout/advantages_mean",
    "rollout/advantages_min",
    "rollout/rewards",
    "env/episode_len",
    "env/return",
    "env/reward",
    "env/success_once",
]


@pytest.fixture(scope="module")
def assets(tmp_path_factory, expert_episodes):
    """A tiny SFT policy, an untrained tiny OpenSora world model and ResNet reward model at
    32x32, and the expert episodes as the reset set."""
    root = tmp_path_factory.mktemp("rl")
    store = root / "demos"
    EpisodeStore(store).add(expert_episodes)
    sft = runner.invoke(
        app,
        [
            "sft",
            "--suite",
            "mw3",
            "--data",
            str(store),
            "--steps",
            "2",
            "--out",
            str(root / "sft"),
            *TINY,
        ],
    )
    assert sft.exit_code == 0, sft.output
    cfg = resolve_config(
        overrides=[
            "world_model.backend=opensora",
            "simulator.image_size=32",
            "world_model.num_inference_steps=1",
        ]
    )
    torch.manual_seed(0)
    build_world_model(cfg, action_dim=4).save_pretrained(root / "wm" / "world_model")
    save_reward_model(
        build_resnet_reward_model(ResnetRewConfig(width=4, threshold=0.5)),
        root / "rm" / "reward_model",
    )
    return root


def args(root, out, steps, algo="ppo", envs=4):
    return [
        "train-policy",
        "--policy",
        str(root / "sft"),
        "--world-model",
        str(root / "wm"),
        "--reward-model",
        str(root / "rm"),
        "--reset-set",
        str(root / "demos"),
        "--steps",
        str(steps),
        "--out",
        str(out),
        "--set",
        f"algorithm.name={algo}",
        "--set",
        f"algorithm.num_envs={envs}",
        "--set",
        "algorithm.group_size=2",
        "--set",
        "algorithm.max_episode_steps=16",
        "--set",
        "algorithm.minibatch_trajectories=2",
        "--set",
        "algorithm.eval_trials=1",
        "--set",
        "simulator.suite=mw3",
        "--set",
        "simulator.num_envs=3",
        "--set",
        "simulator.num_workers=0",
        "--set",
        "simulator.image_size=32",
        "--set",
        "simulator.max_steps=16",
        "--set",
        "num_threads=1",
        "--set",
        "training.save_every=1",
        "--set",
        "training.lr=1e-3",
        "--set",
        "training.adam_eps=1e-8",
    ]


def test_ppo_logs_every_reference_metric(assets, tmp_path) -> None:
    result = runner.invoke(app, args(assets, tmp_path / "run", 2))
    assert result.exit_code == 0, result.output
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    missing = [name for name in REFERENCE_METRICS if name not in tags]
    assert not missing, missing
    assert {
        "eval/success_once",
        "time/rollout",
        "time/world_model",
        "time/reward",
        "time/update",
    } <= tags
    assert (tmp_path / "run" / "policy" / "config.json").is_file()
    assert json.loads((tmp_path / "run" / "eval" / "step_000002.json").read_text())["suite"]


def _metrics(path):
    rows = [json.loads(line) for line in path.open()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


@pytest.mark.parametrize("extra", [[], ["--set", "training.lora_rank=4"]], ids=["full", "lora"])
def test_resume_after_kill_matches_uninterrupted(assets, tmp_path, monkeypatch, extra) -> None:
    straight = runner.invoke(app, [*args(assets, tmp_path / "a", 3), *extra])
    assert straight.exit_code == 0, straight.output

    import wmrl_cli.rl.trainer as trainer

    real_save = trainer.save_checkpoint

    def save_then_die(run_dir, step, *a, **k):
        real_save(run_dir, step, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "save_checkpoint", save_then_die)
    killed = runner.invoke(app, [*args(assets, tmp_path / "b", 3), *extra])
    assert killed.exit_code == 130
    monkeypatch.setattr(trainer, "save_checkpoint", real_save)
    resumed = runner.invoke(app, [*args(assets, tmp_path / "b", 3), *extra])
    assert resumed.exit_code == 0 and "resuming policy training from step_000001" in resumed.output
    a, b = _metrics(tmp_path / "a" / "metrics.jsonl"), _metrics(tmp_path / "b" / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3]
    for x, y in zip(a[1:], b[1:]):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], rel=1e-6, abs=1e-7), key


def test_two_ranks_stay_in_sync(assets, tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "wmrl_cli",
        *args(assets, tmp_path / "ddp", 2, envs=8),
        "--num-processes",
        "2",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ranks = [
        json.loads((tmp_path / "ddp" / "ranks" / f"rank_{r}.json").read_text()) for r in (0, 1)
    ]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]
    assert ranks[0]["init_ids"] != ranks[1]["init_ids"]  # each rank owns its own envs
    logged = _metrics(tmp_path / "ddp" / "metrics.jsonl")[-1]
    for key in ("env/episode_len", "train/actor/policy_loss", "rollout/advantages_mean"):
        mean = (ranks[0]["last_metrics"][key] + ranks[1]["last_metrics"][key]) / 2
        assert logged[key] == pytest.approx(mean, rel=1e-6, abs=1e-7), key


def test_grpo_runs_with_group_filtering(assets, tmp_path) -> None:
    result = runner.invoke(
        app,
        [
            *args(assets, tmp_path / "grpo", 1, algo="grpo"),
            "--set",
            "reward_model.success_threshold=0.0",
        ],
    )
    assert result.exit_code == 0, result.output
    row = json.loads((tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()[-1])
    # threshold 0: every imagined episode succeeds in its first chunk, every group has equal
    # outcomes, and group filtering drops them all.
    assert row["env/success_once"] == 1.0 and row["env/episode_len"] == 8.0
    assert row["rollout/kept_groups_fraction"] == 0.0 and row["train/actor/policy_loss"] == 0.0
