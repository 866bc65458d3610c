"""Verified imagination (`reward_model.source=verified`): the judge calls, the simulator
confirms each call by replaying it, and only the replays cost real steps."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.helpers.sims import small_sim_config
from tests.helpers.train_policy import args, sim_args
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.reset_set import reset_set_from_store
from wmrl_cli.envs.interface import ChunkResult, Obs
from wmrl_cli.envs.verified import VerifiedEnv
from wmrl_cli.errors import WmrlError
from wmrl_cli.sims.metaworld_sim import MetaWorldSim

runner = CliRunner()
CHUNK = 8


class CallingEnv:
    """An imagined env whose judge calls a success at given steps (None: never), whatever the
    actions: the verdict under test is the replay's."""

    reward_model = object()
    use_rel_reward = False
    reward_coef = 5.0
    action_dim = 4
    generator = None
    success_frames = 1  # a call on the frame itself

    def __init__(self, entries, call_at: list[int | tuple[int, ...] | None]) -> None:
        self.reset_set, self.call_at = entries, call_at
        self.num_envs = len(call_at)
        self.resumed: list[int] = []
        self.task_names = ["a", "b", "c"]
        self.entry_task_ids = [e.task_id for e in entries]

    def pop_timings(self) -> dict[str, float]:
        return {}

    def _obs(self) -> Obs:
        images = np.zeros((self.num_envs, 32, 32, 3), np.uint8)
        return Obs(images=images, instructions=[""] * self.num_envs, task_ids=np.zeros(3, int))

    def reset(self, init_ids, sim_states=None) -> Obs:
        self.t = 0
        return self._obs()

    def resume(self, i: int) -> bool:  # a refuted call goes on (refuted_calls=continue)
        self.resumed.append(i)
        return False

    def chunk_step(self, actions) -> ChunkResult:
        b = self.num_envs
        success = np.zeros((b, CHUNK), bool)
        for i, steps in enumerate(self.call_at):
            for at in () if steps is None else (steps,) if isinstance(steps, int) else steps:
                if self.t <= at < self.t + CHUNK:
                    success[i, at - self.t] = True
                    break
        self.t += CHUNK
        rewards = np.zeros((b, CHUNK), np.float32)
        rewards[success.any(1), -1] = 5.0
        return ChunkResult(
            obs=self._obs(),
            frames=np.zeros((b, CHUNK, 32, 32, 3), np.uint8),
            rewards=rewards,
            terminated=success.copy(),
            truncated=np.zeros((b, CHUNK), bool),
            success=success,
            info={"valid": np.ones((b, CHUNK), bool)},
        )


@pytest.fixture(scope="module")
def entries(tmp_path_factory, expert_episodes):
    """The mw3 expert episodes (recorded with their seeds and states) as a reset set."""
    store = EpisodeStore(tmp_path_factory.mktemp("verified"))
    store.add(expert_episodes)
    return reset_set_from_store(store, [0, 1, 2], [])


def test_only_the_calls_the_simulator_confirms_are_paid(entries, expert_episodes) -> None:
    first = [int(np.argmax(e.success)) for e in expert_episodes]
    # env 0: the expert's actions, called where it succeeded (a true call); env 1: no motion,
    # called at step 9 (a false call); env 2: never called (never replayed)
    imagined = CallingEnv(entries, [first[0], 9, None])
    sim = MetaWorldSim(
        small_sim_config(max_steps=200, seed=12345, terminate_on_success=True), num_envs=1
    )
    env = VerifiedEnv(imagined, sim)
    try:
        env.reset([0, 1, 2])
        expert = expert_episodes[0].actions
        steps = max(first[0], 9) + 1
        chunks = steps + (-steps) % CHUNK
        actions = np.zeros((3, chunks, 4), np.float32)
        actions[0, : min(len(expert), chunks)] = expert[:chunks]
        total, success = np.zeros(3), np.zeros(3, bool)
        for k in range(chunks // CHUNK):
            result = env.chunk_step(actions[:, k * CHUNK : (k + 1) * CHUNK])
            total += result.rewards.sum(1)
            success |= result.success.any(1)
            assert (result.info["called"] >= result.success).all()
        assert total.tolist() == [5.0, 0.0, 0.0]
        assert success.tolist() == [True, False, False]
        # real steps: each call replayed up to its step, nothing for the uncalled episode
        assert env.pop_real_steps() == (first[0] + 1) + (9 + 1)
        metrics = env.pop_metrics()
        assert metrics["verify/calls"] == 2.0
        assert metrics["verify/call_rate"] == pytest.approx(2 / 3)
        assert metrics["verify/confirmed_fraction"] == pytest.approx(0.5)
        assert env.pop_real_steps() == 0 and env.pop_metrics()["verify/calls"] == 0.0
        # each call kept as an imagined episode up to its call, labelled by its replay
        true, false = sorted(env.pop_calls(), key=lambda c: c.init_id)
        assert [c.imagined["call"] for c in (true, false)] == ["confirmed", "false"]
        assert true.imagined["labels"] == "verified_call" and true.imagined["start_step"] == 0
        assert (true.init_id, true.length, false.init_id, false.length) == (0, first[0] + 1, 1, 10)
        assert true.success_step == first[0] + 1 and not false.success.any()
        assert true.frames.shape == (first[0] + 2, 32, 32, 3)
        np.testing.assert_array_equal(true.actions, expert[: first[0] + 1])
        assert env.pop_calls() == []
        env.keep_calls = False  # nothing held: no frames, no calls
        env.reset([0, 1, 2])
        env.chunk_step(actions[:, :CHUNK])
        assert env._frames == [[], [], []] and env.pop_calls() == []
    finally:
        env.close()


@pytest.mark.parametrize("refuted", ["end", "continue"])
def test_a_refuted_call_ends_its_episode_or_goes_on_to_the_next_call(
    entries, expert_episodes, refuted
) -> None:
    """env 0: the expert's actions, called early (step 2, refuted) and again at its success;
    env 1: no motion, called at steps 2 and 9, both refuted; env 2: the expert's, called one
    step before its success in the same chunk (refuted, the success found after the call) and
    again a chunk later. Ending, only the first calls are replayed, each to its step; going on,
    each replay goes on from where the last stopped, running its chunk to the end."""
    first = [int(np.argmax(e.success)) for e in expert_episodes]
    assert first[0] >= CHUNK and first[0] % CHUNK > 0  # an early chunk; a step before, same chunk
    calls = [(2, first[0]), (2, 9), (first[0] - 1, first[0] + CHUNK)]
    imagined = CallingEnv(entries, calls)
    sim = MetaWorldSim(
        small_sim_config(max_steps=200, seed=12345, terminate_on_success=True), num_envs=1
    )
    env = VerifiedEnv(imagined, sim, refuted_calls=refuted)
    try:
        env.reset([0, 0, 1])
        env._entries[2] = env._entries[0]  # env 2 replays the expert's episode too
        chunks = -(-(first[0] + CHUNK + 1) // CHUNK) * CHUNK
        actions = np.zeros((3, chunks, 4), np.float32)
        expert = expert_episodes[0].actions[:chunks]
        actions[0, : len(expert)] = actions[2, : len(expert)] = expert
        total, ended = np.zeros(3), np.zeros(3, bool)
        for k in range(chunks // CHUNK):
            result = env.chunk_step(actions[:, k * CHUNK : (k + 1) * CHUNK])
            total += result.rewards.sum(1) * ~ended
            ended |= result.terminated.any(1)
        steps = env.pop_real_steps()
        kept = env.pop_calls()
        if refuted == "end":
            assert total.tolist() == [0.0, 0.0, 0.0] and ended.all()
            assert steps == 3 + 3 + first[0]  # each first call replayed to its step
            assert imagined.resumed == []
            return
        assert total.tolist() == [5.0, 0.0, 5.0]
        assert ended.tolist() == [True, False, True]
        # env 0: to the end of step 2's chunk, then on to its success; env 1: two whole chunks;
        # env 2: its chunk to the success after the call, nothing for the call that is paid
        assert steps == (first[0] + 1) + 2 * CHUNK + (first[0] + 1)
        assert sorted(imagined.resumed) == [0, 1, 1, 2]
        metrics = env.pop_metrics()
        assert metrics["verify/calls"] == 6.0 and metrics["verify/confirmed_fraction"] == 2 / 6
        # the confirmed calls labelled at the episode's success, not at the last replay's start
        confirmed = [c for c in kept if c.imagined["call"] == "confirmed"]
        assert [c.success_step for c in confirmed] == [first[0] + 1] * 2
        assert [c.length for c in confirmed] == [first[0] + 1, first[0] + CHUNK + 1]
    finally:
        env.close()


def test_exact_envs_are_paid_the_simulators_successes_the_judge_did_not_call(
    entries, expert_episodes
) -> None:
    first = [int(np.argmax(e.success)) for e in expert_episodes]
    # env 0 (exact): the expert's actions, never called; env 1 (exact): the expert's actions,
    # called only after its real success; env 2 (exact): no motion, called at step 9; env 3:
    # the expert's actions, never called, not exact (unpaid, as without the floor)
    imagined = CallingEnv([entries[0], entries[0], entries[1], entries[0]], [None] * 4)
    imagined.call_at = [None, first[0] + 3, 9, None]
    config = small_sim_config(max_steps=200, seed=12345, terminate_on_success=True)
    sim, exact = MetaWorldSim(config, num_envs=1), MetaWorldSim(config, num_envs=3)
    env = VerifiedEnv(imagined, sim, exact_sim=exact)
    try:
        env.reset([0, 0, 1, 0])
        steps = first[0] + 4
        chunks = steps + (-steps) % CHUNK
        actions = np.zeros((4, chunks, 4), np.float32)
        expert = expert_episodes[0].actions[:chunks]
        for i in (0, 1, 3):
            actions[i, : len(expert)] = expert
        total, success, valid = np.zeros(4), np.zeros(4, bool), np.zeros(4, int)
        for k in range(chunks // CHUNK):
            result = env.chunk_step(actions[:, k * CHUNK : (k + 1) * CHUNK])
            total += result.rewards.sum(1)
            success |= result.success.any(1)
            valid += result.info["valid"].sum(1)
        assert total.tolist() == [5.0, 5.0, 0.0, 0.0]
        assert success.tolist() == [True, True, False, False]
        # the exact episodes end at the simulator's success or at the false call
        assert valid[:3].tolist() == [first[0] + 1, first[0] + 1, 10]
        metrics = env.pop_metrics()
        assert metrics["verify/exact_uncalled"] == 1.0  # env 0; env 1's call was confirmed
        assert metrics["verify/calls"] == 2.0 and metrics["verify/confirmed_fraction"] == 0.5
        # the false call's whole chunk runs in the simulator; no step after its episode ends
        exact_steps = 2 * (first[0] + 1) + 2 * CHUNK
        assert metrics["verify/exact_real_steps"] == exact_steps
        assert env.pop_real_steps_by_kind() == {"calls": 0, "exact": exact_steps}  # no replay
        assert env.pop_real_steps() == 0  # popped
        calls = sorted(env.pop_calls(), key=lambda c: c.imagined["call"])
        assert [c.imagined["call"] for c in calls] == ["confirmed", "false"]
        assert calls[0].success_step == first[0] + 1 and calls[0].length == first[0] + 4
    finally:
        env.close()


def test_an_exact_episode_goes_on_past_a_refuted_call_to_its_success(
    entries, expert_episodes
) -> None:
    """`refuted_calls=continue` in exactly judged envs: env 0, the expert's actions, called
    early (step 2) and again within the hold after its success, is paid at the success, which
    counts as called for the per-task floor; env 1, no motion, called at steps 2 and 9, goes on
    to the end of the rollout unpaid. Each chunk's refuted calls are kept as one false call."""
    first = [int(np.argmax(e.success)) for e in expert_episodes]
    after = first[0] + 1  # the judge's call after the success, within its hold
    imagined = CallingEnv([entries[0], entries[1]], [(2, after), (2, 9)])
    imagined.success_frames = 8
    config = small_sim_config(max_steps=200, seed=12345, terminate_on_success=True)
    sim, exact = MetaWorldSim(config, num_envs=1), MetaWorldSim(config, num_envs=2)
    env = VerifiedEnv(imagined, sim, exact_sim=exact, refuted_calls="continue")
    try:
        env.reset([0, 1])
        chunks = -(-(after + CHUNK + 1) // CHUNK) * CHUNK
        actions = np.zeros((2, chunks, 4), np.float32)
        expert = expert_episodes[0].actions[:chunks]
        actions[0, : len(expert)] = expert
        total, valid = np.zeros(2), np.zeros(2, int)
        for k in range(chunks // CHUNK):
            result = env.chunk_step(actions[:, k * CHUNK : (k + 1) * CHUNK])
            total += result.rewards.sum(1)
            valid += result.info["valid"].sum(1)
        assert total.tolist() == [5.0, 0.0]
        assert valid.tolist() == [first[0] + 1, chunks]  # env 1 ran every step, unended
        counts = env.pop_task_recall()
        assert counts[0, :2].tolist() == [1, 0]  # env 0's success: called within the hold
        metrics = env.pop_metrics()
        assert metrics["verify/exact_uncalled"] == 0.0
        assert metrics["verify/exact_real_steps"] == first[0] + 1 + chunks
        calls = env.pop_calls()
        # env 0: its early call and its call after the success; env 1: one a chunk
        assert sorted(c.imagined["call"] for c in calls) == ["confirmed", *["false"] * 3]
        assert 0 in imagined.resumed and 1 in imagined.resumed
    finally:
        env.close()


def test_the_per_task_floor_judges_exactly_the_tasks_whose_recall_is_unshown(
    entries, expert_episodes
) -> None:
    first = [int(np.argmax(e.success)) for e in expert_episodes]
    late = (first[0] // CHUNK + 1) * CHUNK + 2  # in the chunk after the real success's
    # envs 0-2: task 0, the expert's actions, never called / called in the next chunk, within
    # the judge's hold / called too late; env 3: task 1, no motion, a false call at step 9
    imagined = CallingEnv([entries[0], entries[1]], [None, late, late + 20, 9])
    imagined.success_frames = 8  # the judge holds 8 frames: calls come up to 15 steps late
    config = small_sim_config(max_steps=200, seed=12345, terminate_on_success=True)
    sim, exact = MetaWorldSim(config, num_envs=1), MetaWorldSim(config, num_envs=4)
    env = VerifiedEnv(imagined, sim, exact_sim=exact, exact_first=0, exact_by_task=True)
    chunks = late + 20 + CHUNK - (late + 20) % CHUNK
    actions = np.zeros((4, chunks, 4), np.float32)
    expert = expert_episodes[0].actions[:chunks]
    for i in range(3):
        actions[i, : len(expert)] = expert

    def episode() -> np.ndarray:
        env.reset([0, 0, 0, 1])
        total = np.zeros(4)
        for k in range(chunks // CHUNK):
            total += env.chunk_step(actions[:, k * CHUNK : (k + 1) * CHUNK]).rewards.sum(1)
        return total

    try:
        # every task is judged exactly until its recall is shown
        assert episode().tolist() == [5.0, 5.0, 5.0, 0.0]
        metrics = env.pop_metrics()
        assert metrics["verify/exact_episodes"] == 4.0 and metrics["verify/exact_uncalled"] == 3
        # task 0: one success called within the judge's hold, two not; the exact episodes
        assert env.pop_task_recall().tolist() == [[1, 2, 3], [0, 0, 1], [0, 0, 0]]
        # task 0 trusted: its uncalled success goes unpaid, its calls are replayed
        env.set_exact_tasks(np.array([False, True, True]))
        assert episode().tolist() == [0.0, 5.0, 5.0, 0.0]
        metrics = env.pop_metrics()
        assert metrics["verify/exact_episodes"] == 1.0 and metrics["verify/exact_uncalled"] == 0
        assert metrics["verify/exact_real_steps"] == 2 * CHUNK  # env 3's chunks alone
        replays = 2 * (first[0] + 1)  # envs 1 and 2, each up to the simulator's success
        assert metrics["verify/real_steps"] == 2 * CHUNK + replays
        assert env.pop_task_recall().tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 0]]
    finally:
        env.close()


def test_a_success_still_awaiting_its_call_when_the_rollout_stops_counts_as_missed(
    entries, expert_episodes
) -> None:
    # the rollout stops once the simulator has ended every episode: no chunk comes for the
    # judge's late call, and a floor errs towards judging exactly
    first = int(np.argmax(expert_episodes[0].success))
    imagined = CallingEnv([entries[0]], [None])
    imagined.success_frames = 8
    config = small_sim_config(max_steps=200, seed=12345, terminate_on_success=True)
    sim, exact = MetaWorldSim(config, num_envs=1), MetaWorldSim(config, num_envs=1)
    env = VerifiedEnv(imagined, sim, exact_sim=exact, exact_first=0, exact_by_task=True)
    try:
        env.reset([0])
        chunks = first // CHUNK + 1  # up to the chunk of the real success
        actions = np.zeros((1, chunks * CHUNK, 4), np.float32)
        expert = expert_episodes[0].actions[: chunks * CHUNK]
        actions[0, : len(expert)] = expert
        for k in range(chunks):
            result = env.chunk_step(actions[:, k * CHUNK : (k + 1) * CHUNK])
        assert result.terminated.any()  # ended by the simulator, its call awaited
        assert env.pop_task_recall().tolist() == [[0, 1, 1], [0, 0, 0], [0, 0, 0]]
        env.reset([0])  # nothing left awaiting: the next reset counts no success
        assert env.pop_task_recall().tolist() == [[0, 0, 1], [0, 0, 0], [0, 0, 0]]
    finally:
        env.close()


@pytest.mark.parametrize(
    ("counts", "exact"),
    [
        ([[0, 0, 0]], [True]),  # nothing seen: exact
        ([[4, 0, 9]], [True]),  # called every one, but fewer than the evidence
        ([[3, 2, 9]], [False]),  # 3 of 5 called: 0.6 >= the floor
        ([[2, 3, 9]], [True]),  # 2 of 5: below it
        ([[5, 0, 9], [0, 9, 20]], [False, True]),
        ([[0, 0, 40]], [True]),  # no success in 40 episodes: exact without a probe
    ],
)
def test_a_task_leaves_exact_judging_once_its_recall_reaches_the_floor(counts, exact) -> None:
    from wmrl_cli.envs.verified import TaskRecall, below_recall_floor

    assert below_recall_floor(np.array(counts), 0.5, 5).tolist() == exact
    recall = TaskRecall([f"t{i}" for i in range(len(counts))], 0.5, 5)
    recall.add(np.array(counts))
    restored = TaskRecall(recall.task_names, 0.5, 5)
    restored.load_state_dict(json.loads(json.dumps(recall.state_dict())))
    assert restored.exact_tasks().tolist() == exact


@pytest.mark.parametrize(
    ("counts", "exact"),
    [
        ([[0, 0, 31]], [True]),  # no success yet, fewer episodes than the probe
        ([[0, 0, 32]], [False]),  # 32 exactly judged episodes and no success: nothing to pay
        ([[0, 1, 500]], [True]),  # one success seen, uncalled: the judge has a recall to show
        ([[1, 0, 32], [0, 0, 32]], [True, False]),  # one called: still short of the evidence
    ],
)
def test_a_task_nothing_succeeds_at_leaves_the_floor_after_its_probe(counts, exact) -> None:
    from wmrl_cli.envs.verified import TaskRecall, below_recall_floor

    assert below_recall_floor(np.array(counts), 0.5, 5, probe=32).tolist() == exact
    recall = TaskRecall([f"t{i}" for i in range(len(counts))], 0.5, 5, probe=32)
    recall.add(np.array(counts))
    assert recall.exact_tasks().tolist() == exact


def test_a_checkpoint_without_episode_counts_loads() -> None:
    """Runs checkpointed before the exact episodes were counted hold [T, 2]: loaded with none."""
    from wmrl_cli.envs.verified import TaskRecall

    recall = TaskRecall(["a", "b"], 0.5, 5, probe=1)
    recall.load_state_dict({"task_names": ["a", "b"], "counts": [[3, 2], [0, 0]]})
    assert recall.counts.tolist() == [[3, 2, 0], [0, 0, 0]]
    assert recall.exact_tasks().tolist() == [False, True]


@pytest.mark.parametrize("probe", [0, 4])
def test_train_policy_with_a_per_task_floor_carries_its_evidence(assets, tmp_path, probe) -> None:
    """No success is called or seen in 2 tiny steps. Without a probe every task of mw3 stays
    exact; with one, a task leaves the floor once `probe` of its exactly judged episodes held
    no success, and its episodes stop counting."""
    out = tmp_path / "per-task"
    floor = ["--set", "reward_model.source=verified", "--set", "reward_model.task_recall_floor=0.5"]
    floor += ["--set", f"reward_model.task_recall_probe={probe}"]
    result = runner.invoke(app, [*args(assets, out, 2, algo="grpo"), *floor])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert all(row["verify/exact_called"] == row["verify/exact_missed"] == 0 for row in rows)
    for row in rows:  # every exactly judged episode's steps are the simulator's own
        assert row["verify/exact_real_steps"] <= row["verify/real_steps"]
    state = json.loads(next(out.glob("checkpoints/*/training_state/state.json")).read_text())
    counts = np.array(state["extra"]["task_recall"]["counts"])
    assert counts[:, :2].sum() == 0  # no success seen
    assert counts[:, 2].sum() == sum(row["verify/exact_episodes"] for row in rows)
    if probe == 0:
        assert [row["verify/exact_tasks"] for row in rows] == [3.0, 3.0]
        assert rows[0]["verify/exact_episodes"] == 4 * rows[0]["rollout/epochs"]  # 4 envs
    else:
        assert rows[-1]["verify/exact_tasks"] == float((counts[:, 2] < probe).sum())
        assert rows[-1]["verify/exact_tasks"] < 3  # a task left the floor


def test_a_start_the_simulator_cannot_restore_is_refused(entries) -> None:
    stateless = [entries[0].__class__(**{**entries[0].__dict__, "sim_state": None})]
    with pytest.raises(WmrlError, match="no stored simulator state"):
        VerifiedEnv(CallingEnv(stateless, [None]), object())


def test_train_policy_verified_counts_the_replays_real_steps(assets, tmp_path) -> None:
    out = tmp_path / "verified"
    verified = ["--set", "reward_model.source=verified"]
    result = runner.invoke(app, [*args(assets, out, 2, algo="grpo"), *verified])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert len(rows) == 2
    for row in rows:
        assert 0.0 <= row["verify/confirmed_fraction"] <= 1.0
        assert row["verify/calls"] == pytest.approx(row["verify/call_rate"] * 4)
    # env/real_steps: the replays alone, cumulative, all of the calls' kind
    assert rows[-1]["env/real_steps"] == sum(r["verify/real_steps"] for r in rows)
    assert rows[-1]["env/real_steps_calls"] == rows[-1]["env/real_steps"]
    assert rows[-1]["env/real_steps_exact"] == rows[-1]["env/real_steps_data"] == 0
    # every step's calls kept, labelled by their replays
    for step, row in enumerate(rows, start=1):
        calls = out / "verified_calls" / f"step_{step:06d}"
        kept = EpisodeStore.open(calls) if calls.is_dir() else []
        assert len(kept) == row["verify/calls"]
        assert not kept or kept.real_steps() == 0  # paid for in env/real_steps already
    assert "each call confirmed by the simulator replaying it" in result.output


def test_train_policy_with_a_recall_floor_counts_the_exact_groups_steps(assets, tmp_path) -> None:
    out = tmp_path / "floor"
    floor = ["--set", "reward_model.source=verified", "--set", "reward_model.exact_fraction=0.5"]
    result = runner.invoke(app, [*args(assets, out, 1, algo="grpo"), *floor])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert 0 < row["verify/exact_real_steps"] <= row["verify/real_steps"] == row["env/real_steps"]
    assert row["env/real_steps_exact"] == row["verify/exact_real_steps"]
    assert row["env/real_steps_calls"] == row["verify/real_steps"] - row["verify/exact_real_steps"]
    assert row["verify/exact_uncalled"] >= 0
    assert "the first 2 of 4 envs judged by the simulator" in result.output


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["reward_model.exact_fraction=0.5"], "it applies to reward_model.source=verified"),
        (["reward_model.task_recall_floor=0.5"], "it applies to reward_model.source=verified"),
        (
            ["reward_model.source=verified", "reward_model.task_recall_probe=8"],
            "'reward_model.task_recall_probe': it applies to a per-task recall floor",
        ),
        (
            ["reward_model.source=verified", "reward_model.exact_fraction=0.2"],
            "0.2 of the 2 groups a rollout has per rank rounds to none",
        ),
    ],
)
def test_a_recall_floor_it_cannot_apply_is_one_line(assets, tmp_path, settings, expected) -> None:
    sets = [arg for setting in settings for arg in ("--set", setting)]
    result = runner.invoke(app, [*args(assets, tmp_path / "bad", 1, algo="grpo"), *sets])
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (["reward_model.refuted_calls=continue"], "continue applies to reward_model.source="),
        (["reward_model.refuted_calls=later"], "refuted_calls"),
    ],
)  # fmt: skip
def test_refuted_calls_it_cannot_apply_is_one_line(assets, tmp_path, settings, expected) -> None:
    sets = [arg for setting in settings for arg in ("--set", setting)]
    result = runner.invoke(app, [*args(assets, tmp_path / "bad", 1, algo="grpo"), *sets])
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
    assert not (tmp_path / "bad").exists()


# the suite's 15-minute budget: the floor's variant runs both kinds of real step
@pytest.mark.parametrize("floor", [pytest.param(0.0, marks=pytest.mark.slow), 0.5])
def test_train_policy_verified_going_on_counts_every_replay(assets, tmp_path, floor) -> None:
    out = tmp_path / "going-on"
    going_on = ["reward_model.source=verified", "reward_model.refuted_calls=continue"]
    going_on = [
        a for v in [*going_on, f"reward_model.task_recall_floor={floor}"] for a in ("--set", v)
    ]
    result = runner.invoke(app, [*args(assets, out, 1, algo="grpo"), *going_on])
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    assert row["env/real_steps"] == row["verify/real_steps"]
    assert row["env/real_steps_calls"] + row["env/real_steps_exact"] == row["env/real_steps"]
    assert (row["env/real_steps_exact"] > 0) == (floor > 0)  # every task exact at first
    assert row["verify/calls"] >= 0 and 0.0 <= row["verify/confirmed_fraction"] <= 1.0


@pytest.mark.parametrize(
    ("fraction", "envs", "groups"), [(0.5, 8, 1), (0.25, 16, 1), (0.5, 24, 2), (1.0, 32, 4)]
)
def test_the_recall_floors_groups_round_half_up(fraction, envs, groups) -> None:
    from wmrl_cli.config import RunConfig
    from wmrl_cli.jobs.inputs import exact_groups

    cfg = RunConfig()
    cfg.reward_model.source, cfg.reward_model.exact_fraction = "verified", fraction
    cfg.algorithm.group_size = 8
    assert exact_groups(cfg, envs) == groups  # one rank's envs, in groups of 8


def test_the_judge_audit_of_a_run_with_a_recall_floor_replays_every_episode() -> None:
    from wmrl_cli.config import RunConfig
    from wmrl_cli.jobs.audit_policy import audit_config

    cfg = RunConfig()
    cfg.reward_model.path, cfg.reward_model.source = "rm", "verified"
    cfg.reward_model.exact_fraction = 0.25
    audited = audit_config(cfg)
    assert audited.reward_model.exact_fraction == 0.0 and audited.reward_model.source == "model"


def test_the_simulator_env_ignores_the_recall_floor(assets, tmp_path) -> None:
    # co-evolve passes its --set to every RL stage, its simulator control too
    argv = sim_args(assets, tmp_path / "sim", 1)
    result = runner.invoke(app, [*argv, "--set", "reward_model.exact_fraction=0.5"])
    assert result.exit_code == 0, result.output


def test_a_resume_drops_the_calls_of_later_steps(tmp_path) -> None:
    from wmrl_cli.rl.verified_calls import drop_calls_after

    for name in ("step_000002", "step_000003", "step_000004_rank1", "notes"):
        (tmp_path / "verified_calls" / name).mkdir(parents=True)
    drop_calls_after(tmp_path, 2)
    left = sorted(p.name for p in (tmp_path / "verified_calls").iterdir())
    assert left == ["notes", "step_000002"]


def test_verified_needs_a_reward_model(assets, tmp_path) -> None:
    argv = args(assets, tmp_path / "v", 1, algo="grpo")
    at = argv.index("--reward-model")
    del argv[at : at + 2]
    result = runner.invoke(app, [*argv, "--set", "reward_model.source=verified"])
    assert result.exit_code != 0
    assert "reward" in result.output and "Traceback" not in result.output
