"""The imagined env (world model + reward model + reset set) and group-aware reset sampling."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.helpers.episodes import make_episode
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.kir import Keyframe
from wmrl_cli.data.reset_set import reset_set_from_store
from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.envs.reset_sampler import GroupResetSampler
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    torch.manual_seed(0)
    store = EpisodeStore(tmp_path_factory.mktemp("eps"))
    episodes = [make_episode(i % 2, length=20, seed=i) for i in range(2)]
    for e in episodes:
        e.frames = np.repeat(np.repeat(e.frames, 8, axis=1), 8, axis=2)  # 8x8 -> 64x64
    store.add(episodes)
    resets = reset_set_from_store(store, [0, 1], [Keyframe(0, 8, "stall")])
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.action_dim = 4
    config.num_inference_steps = 2
    wm = OpenSoraWorldModel(config)
    reward = build_resnet_reward_model(ResnetRewConfig(width=4)).eval()
    return wm, reward, resets


def make_env(parts, **kwargs) -> ImaginedEnv:
    wm, reward, resets = parts
    defaults = dict(task_names=["a", "b"], num_envs=4, max_steps=16, success_threshold=1.0)
    defaults.update(kwargs)
    return ImaginedEnv(wm, reward, resets, **defaults)


def test_interface_shapes_and_truncation(parts) -> None:
    env = make_env(parts)
    obs = env.reset([0, 1, 2, 0])
    assert obs.images.shape == (4, 64, 64, 3) and obs.images.dtype == np.uint8
    assert obs.task_ids.tolist() == [0, 0, 1, 0]
    assert env._steps.tolist() == [0, 8, 0, 0]  # the keyframe entry starts at step 8
    first = env.chunk_step(np.zeros((4, 8, 4), np.float32))
    assert first.frames.shape == (4, 8, 64, 64, 3) and first.rewards.shape == (4, 8)
    assert first.truncated[:, -1].tolist() == [False, True, False, False]  # 8 + 8 >= 16
    second = env.chunk_step(np.zeros((4, 8, 4), np.float32))
    assert second.truncated[:, -1].tolist() == [True, False, True, True]
    assert not second.info["valid"][1].any()  # the done env is frozen
    assert np.array_equal(second.frames[1, 0], first.frames[1, -1])
    assert not second.success.any() and not second.terminated.any()


def test_success_terminates_with_sparse_or_relative_reward(parts) -> None:
    env = make_env(parts, success_threshold=0.0)
    env.reset([0, 1, 2, 0])
    result = env.chunk_step(np.zeros((4, 8, 4), np.float32))
    assert result.terminated[:, -1].all() and result.success.all()
    assert result.rewards[:, -1].tolist() == [5.0] * 4 and result.rewards[:, :-1].sum() == 0
    rel = make_env(parts, success_threshold=0.0, use_rel_reward=True, reward_coef=2.0)
    rel.reset([0, 1, 2, 0])
    out = rel.chunk_step(np.zeros((4, 8, 4), np.float32))
    # The relative rewards telescope: their sum is coef * (last score - score at reset).
    start = rel._score(np.stack([e.context[-1] for e in rel._entries])[:, None])[:, 0]
    np.testing.assert_allclose(
        out.rewards.sum(1), 2.0 * (out.info["scores"][:, -1] - start), rtol=1e-5, atol=1e-5
    )


def test_a_call_refuted_outside_resumes_its_episode(parts) -> None:
    """Verified imagination going on (`refuted_calls=continue`): a called env resumed steps the
    world model again, and is truncated at its last step as if never called."""
    env = make_env(parts, success_threshold=0.0)
    env.reset([0, 1, 2, 0])
    env.chunk_step(np.zeros((4, 8, 4), np.float32))  # every env calls: all done
    assert env._done.all()
    assert [env.resume(i) for i in (0, 1)] == [False, True]  # env 1 began at step 8: 16 reached
    second = env.chunk_step(np.zeros((4, 8, 4), np.float32))
    assert second.info["valid"].all(axis=1).tolist() == [True, False, False, False]
    assert second.success[0].all() and not second.success[1:].any()


def test_success_held_for_k_frames_counts_across_chunks(parts) -> None:
    """With success_frames k, a success is the k-th of k consecutive frames at the threshold,
    counted across chunks: no call in the first chunk of 8 at k=12, the call at the fourth
    frame of the second; k=4 calls the fourth frame of the first chunk."""
    zeros = np.zeros((4, 8, 4), np.float32)
    env = make_env(parts, success_threshold=0.0, success_frames=12)
    env.reset([0, 2, 0, 2])  # episode starts only: every env runs two chunks
    first = env.chunk_step(zeros)
    assert not first.success.any() and not first.terminated.any() and first.rewards.sum() == 0
    second = env.chunk_step(zeros)
    assert second.success[:, 3:].all() and not second.success[:, :3].any()
    assert second.terminated[:, -1].all() and second.rewards[:, -1].tolist() == [5.0] * 4
    short = make_env(parts, success_threshold=0.0, success_frames=4)
    short.reset([0, 2, 0, 2])
    result = short.chunk_step(zeros)
    assert result.success[:, 3:].all() and not result.success[:, :3].any()
    assert result.terminated[:, -1].all()


def test_group_reset_sampler() -> None:
    sampler = GroupResetSampler(num_entries=5, num_envs=8, group_size=4, seed=3)
    first = sampler.sample()
    assert len(first) == 8 and len(set(first[:4])) == 1 and len(set(first[4:])) == 1
    assert first[0] != first[4]
    state = sampler.state_dict()
    second = sampler.sample()
    resumed = GroupResetSampler(5, 8, 4, seed=0)
    resumed.load_state_dict(state)
    assert resumed.sample() == second
    with pytest.raises(ConfigError, match="group_size"):
        GroupResetSampler(5, 8, 3)


def test_varied_outcome_sampling_draws_the_tasks_with_signal() -> None:
    from wmrl_cli.envs.reset_sampler import varied_outcome_probability

    assert varied_outcome_probability(np.array([0.0, 1.0, 0.5]), 4).tolist() == [0, 0, 0.875]
    tasks = [0, 1, 2] * 10  # entry i belongs to task i % 3
    sampler = GroupResetSampler(30, 8, 4, seed=1, mode="varied_outcome", entry_tasks=tasks)
    np.testing.assert_allclose(sampler.task_weights(), 1 / 3)  # no outcomes yet: uniform
    for _ in range(30):  # task 0 always succeeds, task 1 never, task 2 half the time
        ids = sampler.sample()
        outcomes = [tasks[i] == 0 or (tasks[i] == 2 and k % 2 == 1) for k, i in enumerate(ids)]
        sampler.observe(ids, outcomes)
    weights = sampler.task_weights()
    assert weights[2] > 2.5 * max(weights[0], weights[1]) and weights.min() > 0  # none abandoned
    drawn = [tasks[i] for _ in range(100) for i in sampler.sample()[::4]]
    assert drawn.count(2) > drawn.count(0) + drawn.count(1)
    state = json.loads(json.dumps(sampler.state_dict()))  # as a checkpoint stores it
    resumed = GroupResetSampler(30, 8, 4, mode="varied_outcome", entry_tasks=tasks)
    resumed.load_state_dict(state)
    assert resumed.sample() == sampler.sample()
    with pytest.raises(ConfigError, match="task of every reset entry"):
        GroupResetSampler(30, 8, 4, mode="varied_outcome")


@pytest.mark.parametrize("mode", ["uniform", "varied_outcome"])
def test_train_tasks_restrict_the_starts_groups_draw(mode: str) -> None:
    from wmrl_cli.envs.reset_sampler import task_ids

    tasks = [0, 1, 2] * 10
    allowed = task_ids(["c", "a"], ["a", "b", "c"])
    assert allowed == [2, 0]
    sampler = GroupResetSampler(30, 8, 4, mode=mode, entry_tasks=tasks, tasks=allowed)
    drawn = [i for _ in range(50) for i in sampler.sample()]
    assert {tasks[i] for i in drawn} == {0, 2}
    if mode == "varied_outcome":  # outcomes of the drawn entries update their own tasks
        sampler.observe(drawn[:8], [True] * 8)
        assert sampler.trials.sum() == 8 and len(sampler.task_weights()) == 2
    with pytest.raises(ConfigError, match="unknown task 'd' in algorithm.train_tasks"):
        task_ids(["d"], ["a", "b", "c"])
    with pytest.raises(ConfigError, match="holds no initial state of the tasks"):
        GroupResetSampler(30, 8, 4, mode=mode, entry_tasks=tasks, tasks=[5])
    with pytest.raises(ConfigError, match="algorithm.train_tasks needs the task"):
        GroupResetSampler(30, 8, 4, tasks=[0])


def test_without_train_tasks_uniform_draws_are_unchanged() -> None:
    """The restriction leaves an unrestricted run's draws as they were (resumed runs, seeds)."""
    rng = np.random.default_rng([3, 0])
    expected = rng.choice(5, size=2, replace=False)
    assert GroupResetSampler(5, 8, 4, seed=3).sample() == [int(e) for e in np.repeat(expected, 4)]


def test_actions_reach_the_world_model_in_its_convention(parts, monkeypatch) -> None:
    seen = []
    wm = parts[0]
    monkeypatch.setattr(wm, "predict", lambda a, generator=None: seen.append(a) or _still(a))
    env = make_env(parts, action_transform=lambda a: -np.asarray(a))
    env.reset([0, 1, 2, 0])
    actions = np.full((4, 8, 4), 0.25, np.float32)
    env.chunk_step(actions)
    assert torch.equal(seen[0], torch.full((4, 8, 4), -0.25))


def test_libero_runs_feed_the_world_model_libero_gripper_actions() -> None:
    from wmrl_cli.config.schema import RunConfig
    from wmrl_cli.jobs.assembly import world_model_actions

    assert world_model_actions(RunConfig()) is None  # Meta-World: as the policy emits them
    cfg = RunConfig.model_validate({"simulator": {"name": "libero", "suite": "libero_spatial"}})
    convert = world_model_actions(cfg)
    out = convert(np.array([[0.1, 0, 0, 0, 0, 0, 1.0], [0.1, 0, 0, 0, 0, 0, 0.0]]))
    assert out[:, -1].tolist() == [-1.0, 1.0]  # OpenVLA open (1) -> LIBERO -1; close -> +1
    assert out[:, 0].tolist() == [0.1, 0.1]


def _still(actions: torch.Tensor) -> torch.Tensor:
    return torch.zeros((actions.shape[0], actions.shape[1], 64, 64, 3), dtype=torch.uint8)


def test_ended_episodes_skip_the_world_model(parts, monkeypatch) -> None:
    wm = parts[0]
    batches = []
    predict = wm.predict
    monkeypatch.setattr(
        wm, "predict", lambda a, generator=None: batches.append(a.shape[0]) or predict(a, generator)
    )
    env = make_env(parts)
    env.reset([0, 1, 2, 0])
    first = env.chunk_step(np.zeros((4, 8, 4), np.float32))
    second = env.chunk_step(np.zeros((4, 8, 4), np.float32))  # env 1 was truncated at step 16
    assert batches == [4, 3]
    assert np.array_equal(second.frames[1], np.repeat(first.frames[1, -1:], 8, axis=0))
    assert np.array_equal(second.obs.images[1], first.frames[1, -1])


class _CoinWorld:
    """A world model whose every chunk is all white or all black by a fair coin of its noise
    stream; its context counts the white chunks of each episode (what a draw must keep apart)."""

    context_state_names = ("_whites",)

    def reset_context(self, reference, context, actions, reference_actions=None) -> None:
        self._whites = torch.zeros(len(reference))

    def context_state(self) -> dict[str, torch.Tensor]:
        return {"_whites": self._whites}

    def set_context_state(self, state: dict[str, torch.Tensor]) -> None:
        self._whites = state["_whites"]

    def predict_active(self, actions, active, generator=None):
        b, c = actions.shape[:2]
        white = (torch.rand(b, generator=generator) < 0.5) & torch.as_tensor(active)
        self._whites = self._whites + white
        return (white.view(b, 1, 1, 1, 1) * 255).to(torch.uint8).expand(b, c, 64, 64, 3).clone()


class _WhiteJudge:
    """Scores a frame 1 when it is white, 0 when black."""

    def predict(self, frames, task_ids=None):
        return torch.as_tensor(np.asarray(frames)).float().mean(dim=(2, 3, 4)) / 255.0


def test_a_call_counts_once_another_draw_of_the_world_model_repeats_it(parts) -> None:
    """confirm_draws=1: a white chunk (the judge's call) counts only when the other draw has
    drawn a white chunk too, by then; the policy sees the first draw, whose context the other
    draw leaves alone."""
    resets = parts[2]
    world = _CoinWorld()
    env = ImaginedEnv(world, _WhiteJudge(), resets, ["a", "b"], 64, 24,
                      success_threshold=0.5, confirm_draws=1)  # fmt: skip
    env.reset([0, 2] * 32)
    zeros = np.zeros((64, 8, 4), np.float32)
    first = env.chunk_step(zeros)
    white = first.frames[:, 0, 0, 0, 0] == 255
    assert world._whites.bool().tolist() == white.tolist()  # the first draw's own context
    other = env._draws[0]["called"].copy()
    assert first.success.any(1).tolist() == (white & other).tolist()
    assert (white & ~other).any() and (white & other).any()  # the coins disagree, and agree
    # A call the other draw has not yet made counts in a later chunk once it has.
    second = env.chunk_step(zeros)
    running = ~first.terminated.any(1)
    white2 = second.frames[:, 0, 0, 0, 0] == 255
    expected = running & white2 & env._draws[0]["called"]
    assert second.success.any(1).tolist() == expected.tolist()
    assert (expected & white & ~other).any()  # refused in the first chunk, counted now
    # Without the draw, every white chunk is a call.
    alone = ImaginedEnv(_CoinWorld(), _WhiteJudge(), resets, ["a", "b"], 64, 24,
                        success_threshold=0.5)  # fmt: skip
    alone.reset([0, 2] * 32)
    result = alone.chunk_step(zeros)
    assert result.success.any(1).tolist() == (result.frames[:, 0, 0, 0, 0] == 255).tolist()


class _CountWorld:
    """A world model without noise: an env's chunk is white from its second chunk on when its
    actions push (a[0] > 0), black otherwise; its context counts the env's chunks. It counts
    the env-chunks it imagines (the cost)."""

    context_state_names = ("_count",)

    def __init__(self) -> None:
        self.imagined = 0

    def reset_context(self, reference, context, actions, reference_actions=None) -> None:
        self._count = torch.zeros(len(reference))

    def context_state(self) -> dict[str, torch.Tensor]:
        return {"_count": self._count}

    def set_context_state(self, state: dict[str, torch.Tensor]) -> None:
        self._count = state["_count"]

    def predict_active(self, actions, active, generator=None):
        active = torch.as_tensor(active)
        self.imagined += int(active.sum())
        self._count = self._count + active
        white = active & (self._count >= 2) & (torch.as_tensor(actions)[:, 0, 0] > 0)
        b, c = actions.shape[:2]
        return (white.view(b, 1, 1, 1, 1) * 255).to(torch.uint8).expand(b, c, 64, 64, 3).clone()


def test_a_confirming_draw_catches_up_on_the_episode_when_first_asked(parts) -> None:
    """The other draw imagines an episode only from the chunk the first draw calls it: it then
    imagines every chunk since the reset (a call needing two chunks is repeated at once), and
    an episode never called costs it nothing."""
    world = _CountWorld()
    env = ImaginedEnv(world, _WhiteJudge(), parts[2], ["a", "b"], 64, 24,
                      success_threshold=0.5, confirm_draws=1)  # fmt: skip
    env.reset([0, 2] * 32)
    actions = np.zeros((64, 8, 4), np.float32)
    actions[::2] = 1.0  # half the envs push
    first = env.chunk_step(actions)
    assert not first.success.any() and world.imagined == 64  # no call: the draw waits
    second = env.chunk_step(actions)
    assert second.success.any(1).tolist() == [True, False] * 32
    assert world.imagined == 64 + 64 + 32 * 2  # the draw: two chunks of the 32 called envs
    assert world._count.tolist() == [2.0] * 64  # the first draw's context, given back


def test_confirming_draws_need_a_single_frame_judge(parts) -> None:
    clip_judge = _WhiteJudge()
    clip_judge.clip_length = 4
    with pytest.raises(WmrlError, match="single frames"):
        ImaginedEnv(_CoinWorld(), clip_judge, parts[2], ["a", "b"], 4, 16, confirm_draws=1)


class _BlackWorld(_CountWorld):
    """A _CountWorld that never draws a white chunk: a world model that does not see the
    successes the other draws."""

    def predict_active(self, actions, active, generator=None):
        return torch.zeros_like(super().predict_active(actions, active, generator))


def test_a_confirming_draw_may_come_from_another_world_model(parts) -> None:
    """confirm_models: the draw imagines in its own world model (reset to the same entries),
    which sees the call or not; the run's world model imagines the first draw only."""
    world, other = _CountWorld(), _CountWorld()
    env = ImaginedEnv(world, _WhiteJudge(), parts[2], ["a", "b"], 64, 24, success_threshold=0.5,
                      confirm_draws=1, confirm_models=[other])  # fmt: skip
    env.reset([0, 2] * 32)
    actions = np.zeros((64, 8, 4), np.float32)
    actions[::2] = 1.0
    env.chunk_step(actions)
    second = env.chunk_step(actions)
    assert second.success.any(1).tolist() == [True, False] * 32
    assert world.imagined == 128 and other.imagined == 64  # two chunks of the 32 called envs
    sceptic = ImaginedEnv(_CountWorld(), _WhiteJudge(), parts[2], ["a", "b"], 64, 24,
                          success_threshold=0.5, confirm_draws=1,
                          confirm_models=[_BlackWorld()])  # fmt: skip
    sceptic.reset([0, 2] * 32)
    results = [sceptic.chunk_step(actions) for _ in range(3)]
    assert (results[1].frames[::2] == 255).all()  # the first draw calls ...
    assert not any(r.success.any() for r in results)  # ... and the other refuses every call


def test_one_confirming_world_model_per_draw(parts) -> None:
    with pytest.raises(WmrlError, match="1 confirming world model"):
        ImaginedEnv(_CountWorld(), _WhiteJudge(), parts[2], ["a", "b"], 4, 16,
                    confirm_draws=2, confirm_models=[_CountWorld()])  # fmt: skip
    from wmrl_cli.config.schema import RunConfig
    from wmrl_cli.jobs.inputs import resolve_inputs

    cfg = RunConfig.model_validate({"reward_model": {"confirm_world_models": ["wm"]}})
    with pytest.raises(ConfigError, match="one per confirming draw"):
        resolve_inputs(cfg)
