"""train-policy's tiny inputs and options: a tiny SFT policy, an untrained tiny OpenSora world
model and ResNet reward model at 32x32, the expert episodes of mw3 as the reset set (the
`assets` fixture of tests/conftest.py builds them with `write_assets`), and the command lines
of a run in the imagined env (`args`) or in the in-process simulator (`sim_args`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.helpers.sft import run_sft
from wmrl_cli.config import resolve_config
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.rewards.loading import save_reward_model
from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
from wmrl_cli.world_models.factory import build_world_model


def write_assets(root: Path, episodes: list) -> Path:
    """root/demos (the episodes), root/sft (a 2-step tiny policy), root/wm and root/rm."""
    store = root / "demos"
    EpisodeStore(store).add(episodes)
    sft = run_sft(root / "sft", store, 2)
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


def options(out, steps, algo, envs, eval_trials):
    """The options every train-policy run of these tests shares: mw3 at 32x32 in-process,
    episodes of at most 16 steps, groups of 2."""
    return [
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
        f"algorithm.eval_trials={eval_trials}",
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


def model_args(root) -> list[str]:
    """The tiny policy, world model and reward model of `assets`, as options."""
    return [
        *("--policy", str(root / "sft")),
        *("--world-model", str(root / "wm")),
        *("--reward-model", str(root / "rm")),
    ]


def args(root, out, steps, algo="ppo", envs=4):
    """train-policy in the tiny imagined env."""
    return [
        "train-policy",
        *model_args(root),
        "--reset-set",
        str(root / "demos"),
        *options(out, steps, algo, envs, eval_trials=1),
    ]


def sim_args(root, out, steps, algo="grpo", envs=4, eval_trials=0):
    """train-policy in the in-process mw3 simulator (the policy is the only input)."""
    return [
        "train-policy",
        "--env",
        "simulator",
        "--policy",
        str(root / "sft"),
        *options(out, steps, algo, envs, eval_trials),
    ]


def metrics(path):
    """The rows of a metrics.jsonl without wall-clock times."""
    rows = [json.loads(line) for line in path.open()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]
