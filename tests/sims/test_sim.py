"""The Meta-World simulator behind the env interface."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.sims import small_sim_config
from wmrl_cli.errors import ConfigError
from wmrl_cli.sims.metaworld_sim import MetaWorldSim


def _roll(cfg, init_ids, steps=2, seed=0):
    rng = np.random.default_rng(seed)
    with MetaWorldSim(cfg) as sim:
        obs = sim.reset(init_ids)
        frames, result = [obs.images], None
        for _ in range(steps):
            result = sim.chunk_step(rng.uniform(-1, 1, (len(init_ids), cfg.chunk_size, 4)))
            frames.append(result.frames.reshape(-1, *result.frames.shape[2:]))
        return obs, result, np.concatenate(frames)


def test_chunk_step_shapes_and_dtypes() -> None:
    cfg = small_sim_config(chunk_size=4)
    obs, result, _ = _roll(cfg, [0, 1, 5], steps=1)
    assert obs.images.shape == (3, 32, 32, 3) and obs.images.dtype == np.uint8
    assert obs.instructions == ["open the door", "open the drawer", "close the drawer"]
    assert obs.task_ids.tolist() == [0, 1, 2] and obs.proprio.shape == (3, 39)
    assert result.frames.shape == (3, 4, 32, 32, 3) and result.frames.dtype == np.uint8
    for key in ("rewards", "terminated", "truncated", "success"):
        assert getattr(result, key).shape == (3, 4)
    assert result.rewards.dtype == np.float32 and result.success.dtype == bool
    assert result.info["valid"].all()
    assert np.array_equal(result.obs.images, result.frames[:, -1])


def test_same_seed_same_initial_states_and_frames() -> None:
    cfg = small_sim_config()
    obs_a, _, frames_a = _roll(cfg, [0, 1, 2])
    obs_b, _, frames_b = _roll(cfg, [0, 1, 2])
    assert np.array_equal(frames_a, frames_b)
    assert np.array_equal(obs_a.proprio, obs_b.proprio)
    # A different trial of the same task starts elsewhere.
    obs_c, _, _ = _roll(cfg, [3, 1, 2], steps=0)
    assert not np.allclose(obs_a.proprio[0], obs_c.proprio[0])


def test_two_workers_match_in_process() -> None:
    _, _, in_process = _roll(small_sim_config(num_workers=0), [0, 1, 2], steps=1)
    _, _, two_workers = _roll(small_sim_config(num_workers=2), [0, 1, 2], steps=1)
    assert np.array_equal(in_process, two_workers)


def test_truncation_and_done_envs_stay_done() -> None:
    cfg = small_sim_config(max_steps=6, chunk_size=4, num_envs=1)
    with MetaWorldSim(cfg) as sim:
        sim.reset([0])
        zeros = np.zeros((1, 4, 4), dtype=np.float32)
        first = sim.chunk_step(zeros)
        second = sim.chunk_step(zeros)
        third = sim.chunk_step(zeros)
    assert not first.truncated.any()
    assert second.truncated[0].tolist() == [False, True, False, False]
    assert second.info["valid"][0].tolist() == [True, True, False, False]
    assert not third.info["valid"].any()
    assert np.array_equal(third.frames[0, 0], second.frames[0, 1])


@pytest.mark.parametrize("workers", [0, 2])
def test_an_inactive_env_stops_until_the_next_reset(workers: int) -> None:
    cfg = small_sim_config(max_steps=40, chunk_size=4, num_envs=2, num_workers=workers)
    zeros = np.zeros((2, 4, 4), dtype=np.float32)
    with MetaWorldSim(cfg) as sim:
        sim.reset([0, 1])
        stopped = sim.chunk_step(zeros, active=np.array([True, False]))
        later = sim.chunk_step(zeros)
        sim.reset([0, 1])
        again = sim.chunk_step(zeros)
    assert stopped.info["valid"].tolist() == [[True] * 4, [False] * 4]
    assert later.info["valid"].tolist() == [[True] * 4, [False] * 4]
    assert again.info["valid"].all()


def test_rendering_only_observed_frames_changes_nothing_the_policy_sees() -> None:
    # Chunks of 4 over max_steps 6: one env ends mid-chunk (truncated at step 6), whose final
    # frame must still be rendered; every observation, flag and reward is the same as with
    # every step rendered, and the unobserved mid-chunk frames are black.
    cfg = small_sim_config(max_steps=6, chunk_size=4, num_envs=2)
    actions = np.random.default_rng(3).uniform(-1, 1, (3, 2, 4, 4)).astype(np.float32)
    runs = {}
    for every in (True, False):
        with MetaWorldSim(cfg, render_every_step=every) as sim:
            first = sim.reset([0, 7])
            runs[every] = (first, [sim.chunk_step(a) for a in actions])
    (obs_all, all_steps), (obs_few, few_steps) = runs[True], runs[False]
    assert np.array_equal(obs_all.images, obs_few.images)
    for full, few in zip(all_steps, few_steps):
        assert np.array_equal(full.obs.images, few.obs.images)
        assert np.array_equal(full.obs.proprio, few.obs.proprio)
        for key in ("rewards", "terminated", "truncated", "success"):
            assert np.array_equal(getattr(full, key), getattr(few, key))
        assert np.array_equal(full.info["valid"], few.info["valid"])
    truncating = all_steps[1]
    assert truncating.truncated[:, 1].all()  # both end at the chunk's second step
    assert np.array_equal(few_steps[1].frames[:, 1], truncating.frames[:, 1])
    assert not few_steps[0].frames[:, :3].any() and not few_steps[1].frames[:, 0].any()
    assert few_steps[0].frames[:, 3].any()


def test_unknown_camera_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="simulator.camera"):
        MetaWorldSim(small_sim_config(camera="nope"))


def test_replay_from_chunk_boundary_reproduces_frames(expert_episodes) -> None:
    episode = expert_episodes[1]
    cfg = small_sim_config(num_envs=1, max_steps=120)
    c = episode.chunk_size
    boundary = sorted(s for s in episode.sim_states if 0 < s <= episode.length - c)[1]
    with MetaWorldSim(cfg) as sim:
        obs = sim.reset([episode.init_id], [episode.sim_states[boundary]])
        assert np.array_equal(obs.images[0], episode.frames[boundary])
        result = sim.chunk_step(episode.actions[None, boundary : boundary + c])
    assert np.array_equal(result.frames[0], episode.frames[boundary + 1 : boundary + c + 1])


def test_env_pool_stays_bounded_and_rebuilt_envs_start_identically() -> None:
    """Batches of varying task mixes (RL's GRPO groups) keep at most pool_size environments;
    an environment built again after eviction resets to the same state."""
    from wmrl_cli.sims.metaworld_envs import MetaWorldEnvs
    from wmrl_cli.sims.suites import get_suite

    cfg = small_sim_config()
    envs = MetaWorldEnvs(
        suite=get_suite(cfg.suite),
        num_envs=2,
        image_size=cfg.image_size,
        camera=cfg.camera,
        max_steps=cfg.max_steps,
        terminate_on_success=True,
        base_seed=cfg.seed,
    )
    try:
        first = envs.reset([0, 0], None)["sim_states"]
        for ids in ([1, 1], [2, 2], [4, 4], [5, 5]):  # tasks 1, 2, 1, 2: 2 slots each
            envs.reset(ids, None)
            assert len(envs._pool) <= envs.pool_size == 4  # 2 x the slots
        assert (0, 0) not in envs._pool  # evicted, then built again below
        again = envs.reset([0, 0], None)["sim_states"]
        assert all(np.array_equal(a, b) for a, b in zip(first, again))
    finally:
        envs.close()


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
def test_a_tasks_shared_renderer_draws_each_env_as_its_own_renderer_would() -> None:
    """Envs of one task share a renderer; every env of mw10, under two seeds (goals and objects
    placed in the model at reset) and mid-episode, is drawn pixel for pixel as a renderer
    built on that env's own model draws it."""
    import mujoco

    from wmrl_cli.sims.metaworld_envs import MetaWorldEnvs
    from wmrl_cli.sims.suites import get_suite

    suite = get_suite("mw10")
    n = len(suite.tasks)
    envs = MetaWorldEnvs(suite, 2 * n, 64, "corner", 32, False, base_seed=7)
    rng = np.random.default_rng(0)
    try:
        obs = envs.reset(list(range(n)) + list(range(n, 2 * n)), None)
        out = envs.chunk_step(rng.uniform(-1, 1, (2 * n, 3, 4)))
        assert len(envs._renderers) == n  # one per task, not per env
        for i, slot in enumerate(envs.slots):
            own = mujoco.Renderer(slot.env.model, 64, 64)
            for flag in ("mjRND_SHADOW", "mjRND_REFLECTION", "mjRND_SKYBOX"):
                own.scene.flags[getattr(mujoco.mjtRndFlag, flag)] = 0
            own.update_scene(slot.env.data, camera="corner")
            expected = own.render()[::-1]
            own.close()
            assert np.array_equal(out["frames"][i, -1], expected), suite.tasks[slot.task_id].name
        assert not np.array_equal(obs["images"][0], obs["images"][n])  # the seeds differ
    finally:
        envs.close()


def test_small_offscreen_buffer_renders_the_same_pixels() -> None:
    """The renderer's offscreen buffer is cut to the image size: frames are unchanged."""
    import mujoco
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

    cfg = small_sim_config(num_envs=1)
    with MetaWorldSim(cfg) as sim:
        frame = sim.reset([1]).images[0]
    env = ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE["drawer-open-v3-goal-observable"](seed=cfg.seed)
    env._freeze_rand_vec, env.seeded_rand_vec = False, True
    env.seed(cfg.seed + 1)
    env.reset()
    assert env.model.vis.global_.offwidth == 640  # Meta-World's own buffer
    renderer = mujoco.Renderer(env.model, cfg.image_size, cfg.image_size)
    for flag in ("mjRND_SHADOW", "mjRND_REFLECTION", "mjRND_SKYBOX"):
        renderer.scene.flags[getattr(mujoco.mjtRndFlag, flag)] = 0
    renderer.update_scene(env.data, camera=cfg.camera)
    try:
        assert np.array_equal(renderer.render()[::-1], frame)
    finally:
        renderer.close()
        env.close()
