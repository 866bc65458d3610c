"""`wmrl train-policy`: GRPO/PPO in a tiny imagined env, metrics, resume and two ranks."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from tests.helpers.train_policy import args, metrics, sim_args
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore

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


@pytest.mark.parametrize(
    "extra,where",
    [
        ([], "imagined"),
        (["--set", "training.lora_rank=4"], "imagined"),
        ([], "simulator"),
        (["--set", "algorithm.reset_sampling=varied_outcome"], "simulator"),
    ],
    ids=["full", "lora", "simulator", "simulator-varied-outcome"],
)
def test_resume_after_kill_matches_uninterrupted(assets, tmp_path, monkeypatch, extra, where):
    # the imagined runs are PPO (args' default); in the simulator too, value head included
    run_args = args if where == "imagined" else functools.partial(sim_args, algo="ppo")
    straight = runner.invoke(app, [*run_args(assets, tmp_path / "a", 3), *extra])
    assert straight.exit_code == 0, straight.output

    import wmrl_cli.rl.trainer as trainer

    real_save = trainer.save_checkpoint

    def save_then_die(run_dir, step, *a, **k):
        real_save(run_dir, step, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "save_checkpoint", save_then_die)
    killed = runner.invoke(app, [*run_args(assets, tmp_path / "b", 3), *extra])
    assert killed.exit_code == 130
    monkeypatch.setattr(trainer, "save_checkpoint", real_save)
    # the imagined full run resumes from `--out RUN --resume` alone: the recorded config names
    # the inputs; the others with the command that started them
    again = (
        ["train-policy", "--out", str(tmp_path / "b"), "--resume"]
        if where == "imagined" and not extra
        else [*run_args(assets, tmp_path / "b", 3), *extra]
    )
    resumed = runner.invoke(app, again)
    assert resumed.exit_code == 0 and "resuming policy training from step_000001" in resumed.output
    a, b = metrics(tmp_path / "a" / "metrics.jsonl"), metrics(tmp_path / "b" / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3]
    for x, y in zip(a[1:], b[1:]):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], rel=1e-6, abs=1e-7), key


# the simulator's variant in the slow suite (the 15-minute budget); test_distributed_eval and
# test_ranks run 2 simulator ranks in the default suite
@pytest.mark.parametrize(
    "where", ["imagined", "anchored", pytest.param("simulator", marks=pytest.mark.slow)]
)
def test_two_ranks_stay_in_sync(assets, tmp_path, where) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_args = sim_args if where == "simulator" else args
    # in the simulator, the reset sampler that learns from every rank's outcomes
    extra = ["--set", "algorithm.reset_sampling=varied_outcome"] if where == "simulator" else []
    if where == "anchored":  # the anchor's second backward per update, its batch split by rank
        extra = [*bc_options(assets / "demos"), "--set", "algorithm.bc_batch_size=16"]
    cmd = [
        sys.executable,
        "-m",
        "wmrl_cli",
        *run_args(assets, tmp_path / "ddp", 2, envs=8),
        *extra,
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
    assert ranks[0]["sampler"] == ranks[1]["sampler"]  # ... drawn from one shared state
    if where == "simulator":  # it saw all 8 episodes of both steps, decayed once per step
        assert sum(ranks[0]["sampler"]["trials"]) == pytest.approx(8 * 0.9 + 8)
    logged = metrics(tmp_path / "ddp" / "metrics.jsonl")[-1]
    keys = ["env/episode_len", "train/actor/policy_loss", "rollout/advantages_mean"]
    for key in [*keys, *(["train/bc/loss"] if where == "anchored" else [])]:
        mean = (ranks[0]["last_metrics"][key] + ranks[1]["last_metrics"][key]) / 2
        assert logged[key] == pytest.approx(mean, rel=1e-6, abs=1e-7), key
    # Real steps are summed over ranks: 8 episodes per RL step, whatever their lengths.
    rows = metrics(tmp_path / "ddp" / "metrics.jsonl")
    expected = np.cumsum([8 * r["env/episode_len"] for r in rows]) if where == "simulator" else 0
    assert np.array_equal([r["env/real_steps"] for r in rows], np.zeros(2) + expected)


# the suite's 15-minute budget (2026-11-29); a 2-rank failure said once stays in the default suite
# as test_faults_cli's Ctrl-C on two ranks and test_coevolve_ranks' failing stage
@pytest.mark.slow
def test_ranks_that_fail_alike_say_it_once(assets, tmp_path) -> None:
    damaged = tmp_path / "wm"
    shutil.copytree(assets / "wm", damaged)
    (damaged / "world_model" / "model.safetensors").write_bytes(b"not safetensors")
    cmd = [sys.executable, "-m", "wmrl_cli", *args(assets, tmp_path / "run", 1, envs=8)]
    cmd[cmd.index("--world-model") + 1] = str(damaged)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*cmd, "--num-processes", "2"], capture_output=True, text=True, env=env, timeout=300
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "weights are unreadable" in lines[0]
    assert not (tmp_path / "run").exists()


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


# -- RL in the real simulator (`--env simulator`) ------------------------------------------


def test_simulator_real_steps_are_the_simulator_steps_taken(assets, tmp_path, monkeypatch) -> None:
    from metaworld.sawyer_xyz_env import SawyerXYZEnv

    taken = {"steps": 0}
    real_step = SawyerXYZEnv.step

    def counted_step(self, action):
        taken["steps"] += 1
        return real_step(self, action)

    monkeypatch.setattr(SawyerXYZEnv, "step", counted_step)
    result = runner.invoke(app, sim_args(assets, tmp_path / "sim", 3))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "sim" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # Per RL step: the 4 episodes' lengths (env/episode_len is their mean); cumulative.
    lengths = [4 * r["env/episode_len"] for r in rows]
    assert [r["env/real_steps"] for r in rows] == list(np.cumsum(lengths))
    assert rows[-1]["env/real_steps"] == taken["steps"] > 0
    assert all(0 < r["env/episode_len"] <= 16 for r in rows)
    assert "time/simulator" in rows[0]


def test_imagined_runs_count_no_real_steps(assets, tmp_path) -> None:
    result = runner.invoke(app, args(assets, tmp_path / "img", 2, algo="grpo"))
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "img" / "metrics.jsonl").open()]
    assert [r["env/real_steps"] for r in rows] == [0.0, 0.0]
    assert "success judged by" in result.output and "audited" not in result.output


def test_simulator_groups_start_identically_and_earn_the_success_reward() -> None:
    from tests.helpers.sims import small_sim_config
    from wmrl_cli.envs.simulator_rl import SimulatorRLEnv
    from wmrl_cli.sims.experts import ExpertPolicy
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    cfg = small_sim_config(max_steps=120)
    with SimulatorRLEnv(MetaWorldSim(cfg, num_envs=4), 30, 3000, reward_coef=5.0) as env:
        assert env.reset_set[7] == 3007
        # Step slots away from their initial states first, then reset two groups.
        env.reset([0, 1, 2, 3])
        rng = np.random.default_rng(0)
        env.chunk_step(rng.uniform(-1, 1, (4, 5, 4)).astype(np.float32))
        obs = env.reset([5, 5, 9, 9])
        for a, b in ((0, 1), (2, 3)):
            assert np.array_equal(obs.sim_states[a], obs.sim_states[b])
            assert np.array_equal(obs.images[a], obs.images[b])
        assert not np.array_equal(obs.sim_states[0], obs.sim_states[2])
        assert list(obs.task_ids) == [3005 % 3, 3005 % 3, 3009 % 3, 3009 % 3]
        # The scripted expert succeeds: the reward is reward_coef on the success step only,
        # and the episode terminates there (masked GRPO stops at the first success).
        expert = ExpertPolicy(env.sim.suite)
        total = np.zeros(4)
        lengths = np.zeros(4, dtype=int)
        done = np.zeros(4, dtype=bool)
        while not done.all():
            result = env.chunk_step(expert.act(obs).actions[:, :1])
            valid = result.info["valid"][:, 0]
            total += result.rewards[:, 0]
            lengths += valid
            assert np.array_equal(result.rewards[:, 0] > 0, result.success[:, 0] & valid)
            done |= result.terminated[:, 0] | result.truncated[:, 0]
            obs = result.obs
        assert np.array_equal(total, np.full(4, 5.0)) and (lengths < 120).all()


def test_simulator_env_restores_groups_that_reset_apart() -> None:
    """A simulator whose resets differ per slot: every member gets its group's first state."""
    from wmrl_cli.envs.interface import Obs
    from wmrl_cli.envs.simulator_rl import SimulatorRLEnv

    class Drifting:
        num_envs, action_dim, task_names = 4, 4, ["t"]

        def __init__(self) -> None:
            self.calls: list[tuple[list[int], list | None]] = []

        def reset(self, init_ids, sim_states=None):
            self.calls.append((list(init_ids), sim_states))
            states = sim_states or [np.array([i, slot], float) for slot, i in enumerate(init_ids)]
            images = np.stack([np.full((2, 2, 3), s.sum(), np.uint8) for s in states])
            return Obs(images, ["x"] * 4, np.zeros(4, np.int64), sim_states=list(states))

    sim = Drifting()
    obs = SimulatorRLEnv(sim, 10, 100).reset([3, 3, 4, 4])
    assert [c[0] for c in sim.calls] == [[103, 103, 104, 104]] * 2
    assert [s.tolist() for s in obs.sim_states] == [[103, 0], [103, 0], [104, 2], [104, 2]]


def test_stored_starts_restore_the_recorded_scene_and_count_steps_as_imagination(
    expert_episodes,
) -> None:
    """`--env simulator --reset-set STORE`: an entry starts in its recorded state (the recorded
    frame, the recorded actions reach the recorded success), and a keyframe entry counts its
    steps from the recorded step, so it is truncated where the imagined env truncates it."""
    from tests.helpers.sims import small_sim_config
    from wmrl_cli.data.kir import Keyframe
    from wmrl_cli.data.reset_set import reset_set_from_store
    from wmrl_cli.envs.simulator_rl import StoredStartsSimulatorEnv
    from wmrl_cli.sims.metaworld_sim import MetaWorldSim

    class Store:  # the two lookups reset_set_from_store makes
        def load(self, i):
            return expert_episodes[i]

    episode = expert_episodes[1]
    entries = reset_set_from_store(Store(), [1], [Keyframe(1, 8, "stall")])
    assert [e.step for e in entries] == [0, 8]
    cfg = small_sim_config(max_steps=200, terminate_on_success=True, seed=123)  # seeds: entries'
    with StoredStartsSimulatorEnv(MetaWorldSim(cfg, num_envs=2), entries, ["a"] * 3, 16) as env:
        obs = env.reset([0, 1])
        assert np.array_equal(obs.images[0], episode.frames[0])
        assert np.array_equal(obs.images[1], episode.frames[8])
        # the keyframe entry ends after one chunk (8 + 8 >= 16), the start after two
        first = env.chunk_step(np.stack([episode.actions[:8], episode.actions[8:16]]))
        assert first.truncated[:, -1].tolist() == [False, True]
        assert not first.success.any()
        second = env.chunk_step(np.stack([episode.actions[8:16], episode.actions[16:24]]))
        assert second.truncated[:, -1].tolist() == [True, False]
        assert not second.info["valid"][1].any()
        # from the start with no step limit, the recorded actions succeed where they did
        env.max_steps = 10_000
        env.reset([0, 0])
        chunks = [episode.actions[t : t + 8] for t in range(0, episode.length, 8)]
        successes = [env.chunk_step(np.stack([c, c])).success[0] for c in chunks]
    first_success = np.concatenate(successes).argmax()
    assert np.concatenate(successes).any() and first_success == episode.length - 1


def test_simulator_from_a_reset_set_runs_and_counts_real_steps(assets, tmp_path) -> None:
    out = tmp_path / "stored"
    result = runner.invoke(app, [*sim_args(assets, out, 2), "--reset-set", str(assets / "demos")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    lengths = [4 * r["env/episode_len"] for r in rows]
    assert [r["env/real_steps"] for r in rows] == list(np.cumsum(lengths))
    assert all(0 < r["env/episode_len"] <= 16 for r in rows)


def test_simulator_rejects_imagined_inputs_and_overlapping_seeds(assets, tmp_path) -> None:
    base = sim_args(assets, tmp_path / "x", 1)
    wm = runner.invoke(app, [*base, "--world-model", str(assets / "wm")])
    assert wm.exit_code == 2 and "world_model.path" in wm.output and "Traceback" not in wm.output
    overlap = runner.invoke(
        app, [*base, "--set", "algorithm.eval_trials=2", "--set", "algorithm.sim_init_offset=3"]
    )
    assert overlap.exit_code == 2 and "sim_init_offset" in overlap.output
    assert not (tmp_path / "x").exists()


def test_rlinf_schedule_and_options_run(assets, tmp_path, monkeypatch) -> None:
    """The seeds' options (docs/parity.md) together: 2 rollout epochs of 4 envs and 2 optimizer
    steps per update epoch, RLinf's aggregation, reward band, rounded scores, fixed noise."""
    steps = []
    adamw_step = torch.optim.AdamW.step
    monkeypatch.setattr(
        torch.optim.AdamW,
        "step",
        lambda self, *a, **k: steps.append(1) or adamw_step(self, *a, **k),
    )
    rlinf = {
        "algorithm.rollout_epochs": 2,
        "algorithm.optimizer_steps": 2,
        "algorithm.aggregation": "masked_mean_ratio",
        "algorithm.filter_band": "[0.0, 5.0]",
        "algorithm.kir_step_reset": "true",
        "algorithm.kir_context": "last_frames",
        "reward_model.round_scores": "true",
        "reward_model.first_step_baseline": "zero",
        "reward_model.use_rel_reward": "true",
        "world_model.noise_seed": 0,
    }
    extra = [x for key, value in rlinf.items() for x in ("--set", f"{key}={value}")]
    out = tmp_path / "rlinf"
    result = runner.invoke(app, [*args(assets, out, 1, algo="grpo"), *extra])
    assert result.exit_code == 0, result.output
    assert len(steps) == 2  # one update epoch cut into 2 optimizer steps
    summary = json.loads((out / "ranks" / "rank_0.json").read_text())
    assert len(summary["init_ids"][0]) == 8  # 2 rollout epochs x 4 envs
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["rollout/kept_groups_fraction"] == 1.0  # every mean return lies in [0, 5]


def test_kl_anchor_is_zero_until_the_policy_moves(assets, tmp_path) -> None:
    """algorithm.kl_coef > 0: a k3 penalty to the policy as given (it was accepted but ignored
    before). At the first update the policy is its own reference; after it, it is not."""
    result = runner.invoke(
        app,
        [
            *sim_args(assets, tmp_path / "kl", 2, algo="ppo"),
            "--set",
            "algorithm.kl_coef=0.5",
            "--set",
            "training.lr=1e-3",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "kl" / "metrics.jsonl").open()]
    assert rows[0]["train/actor/kl_loss"] == 0.0
    assert rows[1]["train/actor/kl_loss"] > 0.0


@pytest.mark.parametrize("kl", [0.0, 0.5], ids=["no-anchor", "kl-anchor"])
def test_a_resumed_run_loads_the_base_only_for_its_kl_anchor(assets, tmp_path, monkeypatch, kl):
    """A resumed run trains its checkpoint's policy: the base policy loads only as the KL
    anchor (once held beside the trained policy for the whole run: a second 7.5 B policy at
    full size), and the anchored run's metrics match an uninterrupted one's."""
    import wmrl_cli.jobs.train_policy as train_policy

    options = ["--set", f"algorithm.kl_coef={kl}"]
    straight = runner.invoke(app, [*sim_args(assets, tmp_path / "a", 2, algo="ppo"), *options])
    assert straight.exit_code == 0, straight.output
    first = runner.invoke(app, [*sim_args(assets, tmp_path / "b", 1, algo="ppo"), *options])
    assert first.exit_code == 0, first.output
    loads = []
    real_load = train_policy.load_policy

    def counted(*a, **k):
        loads.append(a[1:])
        return real_load(*a, **k)

    monkeypatch.setattr(train_policy, "load_policy", counted)
    resumed = runner.invoke(app, [*sim_args(assets, tmp_path / "b", 2, algo="ppo"), *options])
    assert resumed.exit_code == 0 and "resuming policy training" in resumed.output
    assert loads == ([("cpu", "float32")] if kl else [])
    a, b = metrics(tmp_path / "a" / "metrics.jsonl"), metrics(tmp_path / "b" / "metrics.jsonl")
    assert (a[1].get("train/actor/kl_loss", 0.0) > 0) == (kl > 0)
    for key in a[1]:
        assert a[1][key] == pytest.approx(b[1][key], rel=1e-6, abs=1e-7), key


@pytest.mark.parametrize(("band", "epochs"), [("[0.0, 5.0]", 1), ("[100.0, 200.0]", 3)])
def test_dynamic_sampling_draws_until_groups_pass_the_filter(assets, tmp_path, band, epochs):
    """algorithm.min_kept_groups (DAPO/WMPO dynamic sampling): rollouts are added while too few
    groups pass the filter, up to max_rollout_epochs. A band every group passes stops after
    the first rollout; one no group can pass draws the maximum."""
    out = tmp_path / "dyn"
    extra = {
        "algorithm.min_kept_groups": 1,
        "algorithm.max_rollout_epochs": 3,
        "algorithm.filter_band": band,
        "algorithm.eval_trials": 0,
    }
    sets = [x for key, value in extra.items() for x in ("--set", f"{key}={value}")]
    result = runner.invoke(app, [*args(assets, out, 1, algo="grpo"), *sets])
    assert result.exit_code == 0, result.output
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["rollout/epochs"] == epochs
    summary = json.loads((out / "ranks" / "rank_0.json").read_text())
    assert len(summary["init_ids"][0]) == 4 * epochs  # each rollout drew 4 fresh envs


def test_dynamic_sampling_needs_the_grpo_filter(assets, tmp_path) -> None:
    base = args(assets, tmp_path / "x", 1, algo="ppo")
    result = runner.invoke(app, [*base, "--set", "algorithm.min_kept_groups=2"])
    assert result.exit_code == 2 and "min_kept_groups" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "x").exists()


def test_train_tasks_restrict_rls_starts_and_reject_unknown_names(assets, tmp_path) -> None:
    index = EpisodeStore.open(assets / "demos").index
    task = index[0]["task_name"]
    out = tmp_path / "one-task"
    result = runner.invoke(
        app, [*args(assets, out, 1, algo="grpo"), "--set", f"algorithm.train_tasks=[{task}]"]
    )
    assert result.exit_code == 0, result.output
    drawn = json.loads((out / "ranks" / "rank_0.json").read_text())["init_ids"]
    assert {index[i]["task_name"] for ids in drawn for i in ids} == {task}
    bad = runner.invoke(
        app, [*args(assets, tmp_path / "x", 1), "--set", "algorithm.train_tasks=[no-such-task]"]
    )
    assert bad.exit_code == 2 and "unknown task 'no-such-task'" in bad.output
    assert "Traceback" not in bad.output and not (tmp_path / "x").exists()


def bc_options(store) -> list[str]:
    return ["--set", "algorithm.bc_coef=10.0", "--set", f"algorithm.bc_data={store}"]


def test_bc_anchor_clones_the_stores_successes_at_every_update(assets, tmp_path) -> None:
    """algorithm.bc_coef > 0 (DAPG's demonstration term): each optimizer step also clones
    steps of bc_data's successful episodes, here the expert's, so their negative log-likelihood
    falls step by step while the GRPO loss alone leaves no train/bc metric."""
    sets = ["--set", "algorithm.bc_batch_size=256", "--set", "algorithm.eval_trials=0"]
    out = tmp_path / "bc"
    result = runner.invoke(
        app, [*args(assets, out, 3, algo="grpo"), *sets, *bc_options(assets / "demos")]
    )
    assert result.exit_code == 0, result.output
    losses = [row["train/bc/loss"] for row in metrics(out / "metrics.jsonl")]
    assert losses[2] < losses[1] < losses[0], losses
    plain = runner.invoke(app, [*args(assets, tmp_path / "plain", 1, algo="grpo"), *sets])
    assert plain.exit_code == 0, plain.output
    assert "train/bc/loss" not in metrics(tmp_path / "plain" / "metrics.jsonl")[0]


def test_bc_anchor_resumes_with_the_batches_an_uninterrupted_run_draws(
    assets, tmp_path, monkeypatch
) -> None:
    extra = bc_options(assets / "demos")
    straight = runner.invoke(app, [*args(assets, tmp_path / "a", 2, algo="grpo"), *extra])
    assert straight.exit_code == 0, straight.output
    first = runner.invoke(app, [*args(assets, tmp_path / "b", 1, algo="grpo"), *extra])
    assert first.exit_code == 0, first.output
    resumed = runner.invoke(app, [*args(assets, tmp_path / "b", 2, algo="grpo"), *extra])
    assert resumed.exit_code == 0 and "resuming policy training" in resumed.output
    a, b = metrics(tmp_path / "a" / "metrics.jsonl"), metrics(tmp_path / "b" / "metrics.jsonl")
    assert a[1]["train/bc/loss"] == pytest.approx(b[1]["train/bc/loss"], rel=1e-6)
    assert a[1]["train/loss"] == pytest.approx(b[1]["train/loss"], rel=1e-6, abs=1e-7)


def test_bc_anchor_refuses_a_missing_or_successless_store(assets, tmp_path) -> None:
    failed = [e for e in EpisodeStore.open(assets / "demos")]
    for episode in failed:
        episode.success[:] = False
    EpisodeStore(tmp_path / "no-success").add(failed)
    no_task = ["--set", "algorithm.bc_tasks=[no-such-task]"]
    cases = {  # the options, and the option the one line names
        "no-data": (["--set", "algorithm.bc_coef=1.0"], "bc_data"),
        "missing": (bc_options(tmp_path / "nowhere"), "bc_data"),
        "no-success": (bc_options(tmp_path / "no-success"), "bc_data"),
        "no-such-task": ([*bc_options(assets / "demos"), *no_task], "bc_tasks"),
    }
    for name, (extra, option) in cases.items():
        out = tmp_path / "runs" / name
        result = runner.invoke(app, [*args(assets, out, 1, algo="grpo"), *extra])
        assert result.exit_code == 2, (name, result.output)
        assert option in result.output and "Traceback" not in result.output, name
        assert not out.exists(), name
    assert "'no-such-task'" in result.output


def test_keep_checkpoints_zero_keeps_every_step_for_a_learning_curve(assets, tmp_path) -> None:
    out = tmp_path / "curve"
    cmd = [*args(assets, out, 3, algo="grpo"), "--set", "training.keep_checkpoints=0"]
    result = runner.invoke(app, cmd)
    assert result.exit_code == 0, result.output
    steps = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert steps == ["step_000001", "step_000002", "step_000003"]
    assert all((out / "checkpoints" / s / "model" / "model.safetensors").is_file() for s in steps)


def test_save_checkpoint_keeps_the_newest(tmp_path) -> None:
    from wmrl_cli.training.checkpoints import save_checkpoint

    def save_model(path):
        path.mkdir(parents=True)

    for step in range(1, 5):
        save_checkpoint(tmp_path, step, save_model, [], keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == [
        "step_000003",
        "step_000004",
    ]
