"""The imagined env judged by the real simulator (`reward_model.source=simulator`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.helpers.sims import small_sim_config
from tests.helpers.train_policy import args
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.reset_set import reset_set_from_store
from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.envs.simulator_judged import SimulatorJudgedEnv
from wmrl_cli.errors import WmrlError
from wmrl_cli.jobs.imagine_policy import start_ids
from wmrl_cli.sims.metaworld_sim import MetaWorldSim
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig

runner = CliRunner()


@pytest.fixture(scope="module")
def judged_parts(tmp_path_factory, expert_episodes):
    """The mw3 expert episodes (recorded with seeds 7, 8, 9) as a reset set, and an untrained
    tiny world model at their 32x32."""
    store = EpisodeStore(tmp_path_factory.mktemp("judged"))
    store.add(expert_episodes)
    entries = reset_set_from_store(store, [0, 1, 2], [])
    torch.manual_seed(0)
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.action_dim = 4
    config.num_inference_steps = 1
    config.height = config.width = 32
    return OpenSoraWorldModel(config).eval(), entries


def test_the_simulator_replays_from_each_entry_and_decides_success(
    judged_parts, expert_episodes
) -> None:
    world_model, entries = judged_parts
    imagined = ImaginedEnv(
        world_model, None, entries, ["a", "b", "c"], 3, 120, success_threshold=float("inf")
    )
    # A simulator seeded unlike the recording: the entries' own seeds must restore the goals.
    sim = MetaWorldSim(small_sim_config(max_steps=120, seed=12345, terminate_on_success=True))
    env = SimulatorJudgedEnv(imagined, sim, reward_coef=5.0)
    try:
        obs = env.reset([0, 1, 2])
        first_success = [int(np.argmax(e.success)) for e in expert_episodes]
        assert all(e.success.any() for e in expert_episodes)
        length = max(first_success) + 1
        actions = np.zeros((3, length + (-length) % 8, 4), np.float32)
        for i, e in enumerate(expert_episodes):
            actions[i, : e.length] = e.actions[: actions.shape[1]]
        total, ended_at = np.zeros(3), np.full(3, -1)
        for k in range(actions.shape[1] // 8):
            result = env.chunk_step(actions[:, k * 8 : (k + 1) * 8])
            # The policy sees the world model's frames; the simulator's never leave the env.
            assert np.array_equal(result.obs.images, result.frames[:, -1])
            total += result.rewards.sum(1)
            for i in np.flatnonzero(result.success.any(1)):
                ended_at[i] = k * 8 + int(np.argmax(result.success[i]))
                assert result.terminated[i, -1] or result.terminated[i].any()
        # Each recorded episode's actions succeed in the replay at the step they did when
        # recorded, once, earning reward_coef.
        assert ended_at.tolist() == first_success
        assert total.tolist() == [5.0, 5.0, 5.0]
        assert obs.images.shape == (3, 32, 32, 3)
    finally:
        env.close()


def test_the_audit_keeps_the_models_verdict_and_records_the_simulators(
    judged_parts, expert_episodes
) -> None:
    """judge="model": a reward model that never fires (threshold above every score) keeps every
    episode running and unsuccessful, while the expert's recorded actions succeed in the
    simulator beside it, at the steps they did when recorded."""
    world_model, entries = judged_parts
    imagined = ImaginedEnv(
        world_model, None, entries, ["a", "b", "c"], 3, 120, success_threshold=float("inf")
    )
    sim = MetaWorldSim(small_sim_config(max_steps=121, terminate_on_success=True))
    env = SimulatorJudgedEnv(imagined, sim, judge="model")
    # The trainer reseeds the world model's noise each step through `env.generator`: a wrapper
    # without it would leave the stream running on, and the audited run would not be the same.
    assert env.generator is imagined.generator
    actions = np.zeros((3, 120, 4), np.float32)
    for i, e in enumerate(expert_episodes):
        actions[i, : min(e.length, 120)] = e.actions[:120]
    try:
        env.reset([0, 1, 2])
        real_first = np.full(3, -1)
        for k in range(120 // 8):
            result = env.chunk_step(actions[:, k * 8 : (k + 1) * 8])
            assert not result.success.any() and not result.terminated.any()
            assert result.rewards.sum() == 0.0
            truth = result.info["real_success"]
            for i in np.flatnonzero(truth.any(1) & (real_first < 0)):
                real_first[i] = k * 8 + int(np.argmax(truth[i]))
        assert real_first.tolist() == [int(np.argmax(e.success)) for e in expert_episodes]
    finally:
        env.close()


class _ConstantJudge:
    """A single-frame judge that gives every frame `score` and keeps what it was shown."""

    kind = "constant"

    def __init__(self, score: float) -> None:
        self.score, self.seen = score, []

    def to(self, device):
        return self

    def predict(self, frames, task_ids=None):
        self.seen.append(np.asarray(frames))
        return torch.full(np.asarray(frames).shape[:2], self.score)


@pytest.mark.parametrize("score", [1.0, 0.0])
def test_the_audit_scores_the_simulators_frame_where_the_judge_calls(
    judged_parts, expert_episodes, score
) -> None:
    """A false call is the judge's error when it passes the real frame too, the world model's
    when it does not: the audit scores the simulator's chunk-end frame, not the imagined one."""
    world_model, entries = judged_parts
    judge = _ConstantJudge(score)
    imagined = ImaginedEnv(world_model, judge, entries, ["a", "b", "c"], 3, 120,
                           success_threshold=0.5)  # fmt: skip
    sim = MetaWorldSim(small_sim_config(max_steps=121, terminate_on_success=True))
    env = SimulatorJudgedEnv(imagined, sim, judge="model")
    try:
        env.reset([0, 1, 2])
        first = np.stack([e.actions[:8] for e in expert_episodes])
        result = env.chunk_step(first)
        real_frame = judge.seen[-1]
        assert real_frame.shape == (3, 1, 32, 32, 3)
        assert not np.array_equal(real_frame[:, 0], result.frames[:, -1])  # not imagined
        assert result.info["real_frame_passes"].tolist() == [score >= 0.5] * 3
        assert result.success.any(1).tolist() == [score >= 0.5] * 3
        assert not result.info["real_success"].any()  # no expert succeeds in 8 steps
    finally:
        env.close()


def test_entries_without_simulator_state_are_refused(judged_parts) -> None:
    world_model, entries = judged_parts
    stateless = [entries[0].__class__(**{**entries[0].__dict__, "sim_state": None})]
    imagined = ImaginedEnv(world_model, None, stateless, ["a"], 1, 16)
    with pytest.raises(WmrlError, match="stored simulator state"):
        SimulatorJudgedEnv(imagined, object())


def _rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").open()]


def test_train_policy_judged_by_the_simulator_counts_real_steps(assets, tmp_path) -> None:
    judged = ["--set", "reward_model.source=simulator"]
    with_rm = args(assets, tmp_path / "with-rm", 2, algo="grpo")
    at = with_rm.index("--reward-model")
    without_rm = args(assets, tmp_path / "judged", 2, algo="grpo")
    del without_rm[at : at + 2]
    result = runner.invoke(app, [*without_rm, *judged])
    assert result.exit_code == 0, result.output
    rows = _rows(tmp_path / "judged")
    lengths = [4 * r["env/episode_len"] for r in rows]
    assert [r["env/real_steps"] for r in rows] == list(np.cumsum(lengths))
    assert "time/simulator" in rows[0] and "env/model_agreement" not in rows[0]
    assert "success judged by the simulator replaying each episode's actions" in result.output

    # With a reward model too, its verdict on the same episodes is logged beside the truth.
    result = runner.invoke(app, [*with_rm, *judged])
    assert result.exit_code == 0, result.output
    row = _rows(tmp_path / "with-rm")[-1]
    parts = row["env/model_false_success"] + row["env/model_missed_success"]
    assert row["env/model_agreement"] == pytest.approx(1.0 - parts)
    assert (tmp_path / "with-rm" / "judge_audit.json").is_file()
    assert not (tmp_path / "judged" / "judge_audit.json").exists()  # one verdict: no audit


def test_train_policy_audited_by_the_simulator_logs_the_truth(assets, tmp_path) -> None:
    audit = ["--set", "reward_model.audit_with_simulator=true"]
    result = runner.invoke(app, [*args(assets, tmp_path / "audited", 2, algo="grpo"), *audit])
    assert result.exit_code == 0, result.output
    row = _rows(tmp_path / "audited")[-1]
    # The reward model's verdict is what RL trained on; the simulator's is recorded beside it.
    assert row["env/model_success_once"] == pytest.approx(row["env/success_once"])
    assert 0.0 <= row["env/real_success_once"] <= 1.0
    parts = row["env/model_false_success"] + row["env/model_missed_success"]
    assert row["env/model_agreement"] == pytest.approx(1.0 - parts)
    # A single-frame judge: each false call is split by the judge's verdict on the real frame.
    split = row["env/model_false_success_on_real_frame"]
    split += row["env/model_false_success_imagined_only"]
    assert split == pytest.approx(row["env/model_false_success"])
    assert row["env/real_steps"] > 0  # the audit's replays are real steps
    assert "grpo in imagination" in result.output  # the policy sees imagined frames
    assert "audited by the simulator replaying" in result.output
    # Per task over the whole run: the tally holds every training episode once, and its rates
    # are the per-step metrics' means (every step has the same number of episodes).
    rows = _rows(tmp_path / "audited")
    overall = json.loads((tmp_path / "audited" / "judge_audit.json").read_text())["overall"]
    assert overall["episodes"] == 2 * 4
    assert overall["judged_rate"] == pytest.approx(np.mean([r["env/success_once"] for r in rows]))
    real = np.mean([r["env/real_success_once"] for r in rows])
    assert overall["real_rate"] == pytest.approx(real)
    assert overall["fp_on_real_frame"] + overall["fp_imagined_only"] == overall["fp"]
    assert "the judge on the policy's own training episodes" in result.output


def test_co_evolve_rl_stage_is_audited_like_train_policy(assets, tmp_path) -> None:
    """co-evolve's RL stage builds its env as train-policy does: the audit is not dropped."""
    from tests.helpers.train_policy import options
    from wmrl_cli.coevolve.stages import rl
    from wmrl_cli.config import resolve_config

    sets = options(tmp_path / "unused", 2, "grpo", 4, eval_trials=0)
    overrides = [value for flag, value in zip(sets[::2], sets[1::2]) if flag == "--set"]
    cfg = resolve_config(overrides=[*overrides, "reward_model.audit_with_simulator=true"])
    cfg.training.steps = 2
    out = tmp_path / "stage1"
    rl(cfg, out, str(assets / "sft"), str(assets / "wm"), str(assets / "rm"),
       str(assets / "demos"), real_steps=100)  # fmt: skip
    rows = _rows(out)
    assert len(rows) == 2 and all("env/real_success_once" in r for r in rows)
    assert rows[-1]["env/model_success_once"] == pytest.approx(rows[-1]["env/success_once"])
    assert rows[0]["env/real_steps"] > 100  # the audit's replays count beyond the data's


def test_simulator_source_is_refused_in_the_simulator(assets, tmp_path) -> None:
    from tests.helpers.train_policy import sim_args

    base = sim_args(assets, tmp_path / "x", 1)
    result = runner.invoke(app, [*base, "--set", "reward_model.source=simulator"])
    assert result.exit_code == 2 and "reward_model.source" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, [*base, "--set", "reward_model.audit_with_simulator=true"])
    assert result.exit_code == 2 and "audit_with_simulator" in result.output
    assert "Traceback" not in result.output


def test_keyframes_past_the_episode_limit_truncate_like_the_imagined_env(
    tmp_path, expert_episodes
) -> None:
    """A keyframe recorded at step 96 with a 64-step limit: one chunk, then truncation, as in
    the imagined env (the simulator, built with a longer limit, never truncates first)."""
    from wmrl_cli.data.kir import Keyframe

    store = EpisodeStore(tmp_path / "store")
    store.add(expert_episodes)
    entries = reset_set_from_store(store, [0], [Keyframe(0, 96, "stall")])
    torch.manual_seed(0)
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.action_dim, config.num_inference_steps = 4, 1
    config.height = config.width = 32
    imagined = ImaginedEnv(
        OpenSoraWorldModel(config).eval(),
        None,
        entries,
        ["a"],
        2,
        64,
        success_threshold=float("inf"),
    )
    sim = MetaWorldSim(small_sim_config(max_steps=64 + 96 + 1, terminate_on_success=True), 2)
    env = SimulatorJudgedEnv(imagined, sim)
    try:
        env.reset([0, 1])  # the episode's start, its keyframe
        still = np.zeros((2, 8, 4), np.float32)
        first = env.chunk_step(still)
        assert first.truncated[:, -1].tolist() == [False, True]
        assert first.info["valid"].all()
        second = env.chunk_step(still)
        assert not second.info["valid"][1].any() and not second.truncated[1].any()
    finally:
        env.close()


def _labelled_rollout(assets, out, *extra):
    return runner.invoke(
        app,
        [
            "rollout",
            "--world-model",
            str(assets / "wm"),
            "--policy",
            str(assets / "sft"),
            "--reset-set",
            str(assets / "demos"),
            "--suite",
            "mw3",
            "--out",
            str(out),
            "--num-envs",
            "2",
            "--set",
            "simulator.image_size=32",
            "--set",
            "simulator.num_workers=0",
            "--set",
            "algorithm.max_episode_steps=16",
            "--set",
            "world_model.num_inference_steps=1",
            *extra,
        ],
    )


def test_policy_imagined_rollouts_are_labelled_by_the_simulator(assets, tmp_path) -> None:
    """`wmrl rollout --world-model --policy --reset-set`: imagined frames, and success flags
    that are the simulator's for the same actions from the same start."""
    out = tmp_path / "labelled"
    result = _labelled_rollout(assets, out, "-n", "2")
    assert result.exit_code == 0, result.output
    store = EpisodeStore.open(out)
    demos = EpisodeStore.open(assets / "demos")
    assert len(store) == 6 and store.imagined  # 2 per task, from the 3 tasks' starts
    assert store.real_steps() == sum(int(m["length"]) for m in store.index)  # replayed: real
    sim = MetaWorldSim(small_sim_config(max_steps=17, num_envs=1, terminate_on_success=False))
    try:
        for episode in store:
            source = demos.load(episode.imagined["reset_entry"])
            assert episode.imagined["labels"] == "simulator" and not episode.sim_states
            assert episode.imagined["policy"] == str((assets / "sft").resolve())
            assert episode.length == 16 and episode.task_id == source.task_id
            assert np.array_equal(episode.frames[0], source.frames[0])  # the real start
            assert not np.array_equal(episode.frames[1:], source.frames[1:17])  # imagined
            sim.reset([source.task_id], [source.sim_states[0]], seeds=[source.seed])
            flags = [sim.chunk_step(episode.actions[None, k : k + 8]) for k in (0, 8)]
            replayed = np.concatenate([f.success[0] for f in flags])
            assert np.array_equal(episode.success, replayed)
    finally:
        sim.close()


def test_start_ids_of_some_tasks_are_the_whole_sets_starts_of_those() -> None:
    entry_tasks = [0, 1, 2, 0, 1, 2, 0, 1, 2, 2]
    whole = start_ids(entry_tasks, 4, seed=7)
    assert [entry_tasks[i] for i in whole] == [0] * 4 + [1] * 4 + [2] * 4
    assert start_ids(entry_tasks, 4, seed=7, tasks=[2]) == whole[8:]
    assert start_ids(entry_tasks, 4, seed=7, tasks=[0, 2]) == whole[:4] + whole[8:]


def test_labelled_rollouts_keep_to_algorithm_train_tasks(assets, tmp_path) -> None:
    """`--set algorithm.train_tasks=[...]`: only those tasks' episodes, from the starts the
    whole set draws for them (an experiment on a few tasks pairs with the full stage's)."""
    whole, some = tmp_path / "whole", tmp_path / "some"
    assert _labelled_rollout(assets, whole, "-n", "2").exit_code == 0
    names = [m["task_name"] for m in EpisodeStore.open(whole).index]
    kept = names[-1]
    result = _labelled_rollout(assets, some, "-n", "2", "--set", f"algorithm.train_tasks=[{kept}]")
    assert result.exit_code == 0, result.output
    starts = {m["task_name"]: [] for m in EpisodeStore.open(whole).index}
    for episode in EpisodeStore.open(whole):
        starts[episode.task_name].append(episode.imagined["reset_entry"])
    got = list(EpisodeStore.open(some))
    assert {e.task_name for e in got} == {kept}
    assert [e.imagined["reset_entry"] for e in got] == starts[kept]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--replay", "{demos}"], "drop --replay"),
        (["--horizon", "8"], "drop --horizon"),
        (["--set", "algorithm.train_tasks=[no-such-task]"], "unknown task 'no-such-task'"),
    ],
)
def test_policy_imagined_rollout_bad_input_is_one_line(assets, tmp_path, extra, message) -> None:
    out = tmp_path / "out"
    result = _labelled_rollout(assets, out, *(a.format(demos=assets / "demos") for a in extra))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], lines
    assert not out.exists()
    missing = runner.invoke(app, ["rollout", "--reset-set", str(assets / "demos"), "-o", str(out)])
    assert missing.exit_code == 2 and "add --world-model WM" in missing.output


class _RecordedActions:
    """A policy that acts out each start's recorded expert episode, chunk by chunk."""

    name = "recorded"

    def __init__(self, episodes) -> None:
        self.episodes, self.t = episodes, 0

    def start_episodes(self, init_ids) -> None:
        self.ids, self.t = list(init_ids), 0

    def act(self, obs, sample=True, temperature=1.0):
        from wmrl_cli.envs.interface import PolicyOutput

        chunk = np.zeros((len(self.ids), 8, 4), np.float32)
        for i, init_id in enumerate(self.ids):
            recorded = self.episodes[init_id].actions[self.t : self.t + 8]
            chunk[i, : len(recorded)] = recorded
        self.t += 8
        return PolicyOutput(actions=chunk)


def test_labels_hold_the_simulators_successes(judged_parts, expert_episodes, tmp_path) -> None:
    """The recorded expert actions, acted out in imagination: every episode is labelled a
    success from the step its recording first succeeded, on imagined frames."""
    from wmrl_cli.jobs.imagine_policy import imagine_policy_store

    world_model, entries = judged_parts
    imagined = ImaginedEnv(
        world_model, None, entries, ["a", "b", "c"], 3, 120, success_threshold=float("inf")
    )
    sim = MetaWorldSim(small_sim_config(max_steps=121, seed=12345, terminate_on_success=False))
    env = SimulatorJudgedEnv(imagined, sim)
    store = EpisodeStore(tmp_path / "labelled")
    try:
        written = imagine_policy_store(
            env,
            _RecordedActions(expert_episodes),
            [0, 1, 2],
            store,
            {"world_model": "wm", "policy": "recorded", "reset_set": "demos"},
            chunk_size=8,
            temperature=1.0,
            seed_of=lambda i: entries[i].seed,
            progress=False,
        )
    finally:
        env.close()
    assert written == 3
    for episode, recorded in zip(store, expert_episodes, strict=True):
        assert episode.length == 120 and episode.seed == recorded.seed
        first = int(np.argmax(recorded.success))
        assert episode.success_step == first + 1  # the simulator's flag, at the recorded step
        assert not np.array_equal(episode.frames[1 : first + 2], recorded.frames[1 : first + 2])
