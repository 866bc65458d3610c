"""The seeds' workflow on real LIBERO episodes: `wmrl rollout --suite libero_*` (stored states
that replay exactly, KIR keyframes, the RLinf reset layout read back) and one full PACE cycle of
`wmrl co-evolve --preset wan-spatial-coevolve` / `opensora-spatial-coevolve` on tiny files in the
published layouts (tests/helpers/published_layouts.py).

The overrides shrink sizes and lengths only (frames of 64 pixels, 16-step episodes, one trial
per task, one RL step, a few fine-tuning steps); the pipeline, its stages and the presets'
settings are the ones a GPU run uses. Needs the `libero` extra and LIBERO's assets; skipped
with the reason otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers.published_layouts import (
    source_policy,
    write_opensora_libero,
    write_prismatic_dir,
    write_wan_libero,
)
from wmrl_cli.cli.app import app
from wmrl_cli.sims.libero_setup import LiberoUnavailable, check_libero
from wmrl_cli.sims.libero_suites import LIBERO_SUITES


def _libero_unavailable() -> str | None:
    try:
        check_libero()
    except LiberoUnavailable as exc:
        return str(exc)
    return None


_WHY = _libero_unavailable()
pytestmark = pytest.mark.skipif(
    _WHY is not None, reason=f"LIBERO cannot run here (pip install 'wmrl[libero]'): {_WHY}"
)

runner = CliRunner()
SIZE = 64
SUITE = LIBERO_SUITES["libero_spatial"]
POLICY = "openvla-oft-libero-spatial-traj1"
# Episodes of two chunks on 64-pixel frames, two envs in two simulator workers.
SIM = {
    "simulator.image_size": SIZE,
    "simulator.max_steps": 16,
    "simulator.num_envs": 2,
    "simulator.num_workers": 2,
    "num_threads": 1,
}


def sets(overrides: dict) -> list[str]:
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """The LIBERO presets train with bf16 autocast; Accelerate keeps one process-wide state."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def write_policy_asset(assets: Path) -> Path:
    """The OpenVLA-OFT SFT policy in its published layout (bf16 prismatic shards), with a
    tokenizer that knows every LIBERO-Spatial instruction."""
    import torch

    policy = source_policy(SUITE.instructions, unnorm_key="libero_spatial_no_noops")
    return write_prismatic_dir(policy, assets / POLICY, shards=2, dtype=torch.bfloat16)


def test_libero_rollout_states_replay_exactly_and_export(tmp_path: Path) -> None:
    from wmrl_cli.config import resolve_config
    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.data.reset_set import reset_set_from_store
    from wmrl_cli.envs.simulator_rl import StoredStartsSimulatorEnv
    from wmrl_cli.jobs.assembly import rl_simulator
    from wmrl_cli.jobs.inputs import load_reset_set
    from wmrl_cli.sims.libero_suites import from_libero_actions

    assets, out = tmp_path / "assets", tmp_path / "rollouts"
    write_policy_asset(assets)
    base = ["rollout", "--suite", "libero_spatial", "-n", "1", "--out", str(out)]
    expert = runner.invoke(app, base)
    assert expert.exit_code == 1 and "LIBERO has no scripted expert" in expert.output
    assert not out.exists()

    args = [*base, "--policy", POLICY, "--assets-dir", str(assets), "--kir", "--export-rlinf"]
    result = runner.invoke(app, [*args, *sets(SIM), "--set", "rollout.kir.stall_threshold=255"])
    assert result.exit_code == 0, result.output
    store = EpisodeStore.open(out)
    assert [m["task_id"] for m in store.index] == list(range(10))
    assert [m["instruction"] for m in store.index] == SUITE.instructions
    assert {m["suite"] for m in store.index} == {"libero_spatial"}
    episode = store.load(3)
    assert episode.frames.shape == (17, SIZE, SIZE, 3) and episode.actions.shape == (16, 7)
    assert sorted(episode.sim_states) == [0, 8, 16]
    assert set(np.unique(episode.actions[:, 6])) <= {-1.0, 1.0}  # LIBERO's gripper, executed
    keyframes = json.loads((out / "kir.json").read_text())["keyframes"]
    assert keyframes and all(k["step"] in (8, 16) for k in keyframes)  # every chunk stalls

    # RLinf's reset layout, read back as train-policy reads it: LIBERO task ids from the
    # instructions, the first frames, and the keyframes' stored states.
    cfg = resolve_config("wan-spatial-grpo")
    entries, names = load_reset_set(cfg, out / "dataset")
    starts = [e for e in entries if not e.is_keyframe]
    assert [e.task_id for e in starts] == list(range(10)) and names == SUITE.as_suite().task_names
    assert np.array_equal(starts[3].context[-1], episode.frames[0])
    kir = [e for e in entries if e.is_keyframe]
    assert len(kir) == len(keyframes) and all(e.sim_state is not None for e in kir)

    # The stored states restore the episode exactly: started from its stored start (every
    # start, since no seed reproduces a LIBERO start) or its keyframe at step 8, the recorded
    # actions (LIBERO's, given back in the policy's gripper convention) give the recorded
    # frames bit for bit.
    cfg.simulator = cfg.simulator.model_copy(update={"image_size": SIZE, "num_workers": 0})
    store_entries = reset_set_from_store(store, [3], [], 4)
    store_entries.append(reset_set_from_store(store, [3], [], 4)[0])
    store_entries[1].step, store_entries[1].sim_state = 8, episode.sim_states[8]
    with StoredStartsSimulatorEnv(
        rl_simulator(cfg, 2, max_steps=64), store_entries, names, max_steps=32
    ) as env:
        env.reset([0, 1])
        replayed = env.chunk_step(from_libero_actions(episode.actions.reshape(2, 8, 7)))
    assert np.array_equal(replayed.frames[0], episode.frames[1:9])
    assert np.array_equal(replayed.frames[1], episode.frames[9:17])


def _coevolve(tmp_path: Path, preset: str, write_world, world: str) -> tuple[Path, list[str]]:
    assets, run = tmp_path / "assets", tmp_path / "run"
    write_world(assets / world, frame_size=SIZE)
    write_policy_asset(assets)
    shrink = {
        **SIM,
        "algorithm.num_envs": 4,
        "algorithm.group_size": 2,
        "algorithm.max_episode_steps": 16,
        "algorithm.rollout_epochs": 1,
        "algorithm.optimizer_steps": 1,
        "algorithm.minibatch_trajectories": 2,
        "training.steps": 1,
        "world_model.batch_size": 2,
        "world_model.warmup_steps": 1,
        "world_model.val_every": 2,
        "world_model.save_every": 2,
        "world_model.val_episodes": 1,
        "world_model.val_horizon": 8,
        "world_model.window_stride": 8,
        "world_model.num_inference_steps": 1,
        "reward_model.batch_size": 4,
        "coevolve.eval_trials": 1,
        "coevolve.evolved_rollouts_per_task": 1,
        "coevolve.refine_steps": 2,
        "coevolve.refine_reward_steps": 2,
        "coevolve.check_episodes": 1,
    }
    args = ["co-evolve", "--preset", preset, "--assets-dir", str(assets), "--out", str(run)]
    args += sets(shrink)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return run, args


STAGES = [
    "eval_base",
    "stage1",
    "eval_stage1",
    "evolved_rollouts1",
    "refine_wm1",
    "refine_rm1",
    "eval_wm_evo1",
    "stage2",
    "eval_stage2",
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "preset,write_world,world",
    [
        ("wan-spatial-coevolve", write_wan_libero, "wan-libero-spatial"),
        ("opensora-spatial-coevolve", write_opensora_libero, "opensora-libero-spatial"),
    ],
)
def test_one_coevolve_cycle_on_published_layouts(tmp_path, preset, write_world, world) -> None:
    from wmrl_cli.world_models.factory import saved_world_model

    run, args = _coevolve(tmp_path, preset, write_world, world)
    stages = json.loads((run / "stages.json").read_text())
    assert list(stages) == STAGES
    report = json.loads((run / "report.json").read_text())
    assert list(report["success"]) == ["base", "stage1", "stage2"]
    assert all(len(s["outcomes"]) == 10 for s in report["success"].values())  # 10 tasks x 1
    assert report["suite"] == "libero_spatial"
    # Real steps: LIBERO episodes of the evaluations and the evolved policy's rollouts.
    assert stages["evolved_rollouts1"]["real_steps"] == 10 * 16
    assert stages["stage1"]["real_steps"] == stages["stage2"]["real_steps"] == 0
    evolved = run / "data" / "evolved1"
    assert (evolved / "kir.json").is_file()
    # The published world model fine-tuned on the evolved rollouts (wmrl's format, the
    # published backend), checked on them in LIBERO, then RL in it from those rollouts.
    assert saved_world_model(run / "wm_evo1")[1] == world.split("-")[0]
    check = stages["eval_wm_evo1"]["result"]
    assert check["real_steps"] > 0 and check["rl_threshold"] == 0.9  # not recalibrated
    stage2 = (run / "stage2" / "config.yaml").read_text()
    assert f"reset_set: {evolved}" in stage2 and "path: " + str(run / "wm_evo1") in stage2
    # A tiny policy never succeeds in LIBERO: the reward model had no success to learn from
    # and the published one was kept (the report says so).
    rm = report["reward_models"]["rm_evo1"]
    assert rm["path"].endswith("resnet_rm.pth") and "no successful frame" in rm["kept"]
    assert "rm_evo1: not fine-tuned" in (run / "report.md").read_text()
    assert (run / "eval" / "stage2" / "videos").is_dir()

    # The same command again resumes: every stage is done.
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    for stage in STAGES:
        assert f"stage {stage}: done, skipped" in again.output
