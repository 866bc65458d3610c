"""A batch of Meta-World environments stepped inside one process.

`MetaWorldSim` (sims/metaworld_sim.py) shards a batch over worker processes, each running one
of these. Everything here is plain numpy in and out so that it crosses process pipes cheaply.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering without a display
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import signal  # noqa: E402
import threading  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from wmrl_cli.sims.pool import PooledEnvs, Slot  # noqa: E402
from wmrl_cli.sims.suites import Suite  # noqa: E402

# MuJoCo's "integration state": time, qpos, qvel, actuator activations, warm-start
# accelerations, controls, mocap poses. Restoring all of it makes replay bit-exact.
_PREV_OBS_DIM = 18


@contextmanager
def _ctrl_c_deferred() -> Iterator[None]:
    """A Ctrl-C inside waits for the block's end: a mujoco.Renderer whose construction it cuts
    short prints a traceback from its __del__ (no GL context to free yet) after "interrupted"."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield  # signals are handled in the main thread only; None: not Python's handler
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)


class MetaWorldEnvs(PooledEnvs):
    """B environment slots; a slot may switch task at every reset (sims/pool.py)."""

    action_dim = 4

    def __init__(
        self,
        suite: Suite,
        num_envs: int,
        image_size: int,
        camera: str,
        max_steps: int,
        terminate_on_success: bool,
        base_seed: int,
        render_every_step: bool = True,
    ) -> None:
        # With 2x the slots in the pool (an env takes ~0.2 s to build and holds ~50 MB), a
        # varied-outcome GRPO run rebuilds ~20 envs per update of 4 x 32 episodes, ~64 with 1x.
        super().__init__(num_envs, pool_size=max(2 * num_envs, len(suite.tasks)))
        self.suite = suite
        # Rendering (software EGL, ~15-35 ms a frame) is ~99% of a step's cost; a consumer that
        # reads only what the policy observes (RL, evaluation without video) renders chunk ends.
        self.render_every_step = render_every_step
        self.image_size = image_size
        self.camera = camera
        self.max_steps = max_steps
        self.terminate_on_success = terminate_on_success
        self.base_seed = base_seed
        # One renderer per task, shared by that task's envs (see _render), with the task's
        # fixed camera: a renderer (EGL context, the task's meshes and textures) costs ~0.6 s
        # to build and ~100 MB.
        self._renderers: dict[int, tuple[Any, Any]] = {}
        self._scene_option: Any = None

    # -- construction ---------------------------------------------------------------------
    def _make(self, task_id: int) -> Any:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

        name = f"{self.suite.tasks[task_id].name}-v3-goal-observable"
        env = ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE[name](seed=self.base_seed)
        env.max_path_length = self.max_steps
        if self.camera not in [env.model.camera(i).name for i in range(env.model.ncam)]:
            raise ValueError(f"unknown camera '{self.camera}'")
        return env

    def _renderer(self, task_id: int, model: Any) -> tuple[Any, Any]:
        """The task's (renderer, camera), built from the first env of the task that needs it."""
        import mujoco

        if task_id not in self._renderers:
            # An offscreen buffer of the image's size rather than Meta-World's 640x480: the
            # same pixels, about half the renderer's memory.
            model.vis.global_.offwidth = model.vis.global_.offheight = self.image_size
            with _ctrl_c_deferred():  # ~0.6 s
                renderer = mujoco.Renderer(model, self.image_size, self.image_size)
            # Shadows, reflections and the skybox cost ~3x render time and add nothing a
            # policy needs.
            for flag in ("mjRND_SHADOW", "mjRND_REFLECTION", "mjRND_SKYBOX"):
                renderer.scene.flags[getattr(mujoco.mjtRndFlag, flag)] = 0
            camera = mujoco.MjvCamera()
            camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
            camera.fixedcamid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, self.camera)
            self._renderers[task_id] = renderer, camera
            if self._scene_option is None:
                self._scene_option = mujoco.MjvOption()
        return self._renderers[task_id]

    # -- state ----------------------------------------------------------------------------
    def get_state(self, slot: Slot) -> np.ndarray:
        import mujoco

        env = slot.env
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        mj = np.empty(mujoco.mj_stateSize(env.model, spec))
        mujoco.mj_getState(env.model, env.data, mj, spec)
        extra = [np.asarray(env._prev_obs, dtype=np.float64), [float(env.curr_path_length)]]
        return np.concatenate([mj, *extra])

    @staticmethod
    def set_state(env: Any, state: np.ndarray) -> None:
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        size = mujoco.mj_stateSize(env.model, spec)
        if state.shape != (size + _PREV_OBS_DIM + 1,):
            raise ValueError(f"simulator state has {state.shape[0]} values, expected {size + 19}")
        mujoco.mj_setState(env.model, env.data, state[:size], spec)
        mujoco.mj_forward(env.model, env.data)
        env._prev_obs = state[size : size + _PREV_OBS_DIM].copy()
        env.curr_path_length = int(state[-1])

    def _render(self, slot: Slot) -> np.ndarray:
        """The slot's camera image. The task's shared renderer holds only what is the same for
        every env of the task (GL context, meshes, textures); the scene is built from the
        slot's own model and data, so per-episode model edits (Meta-World moves goals and
        objects in the model at reset) are drawn as in a renderer of the env's own."""
        import mujoco

        env = slot.env
        renderer, camera = self._renderer(slot.task_id, env.model)
        mujoco.mjv_updateScene(
            env.model,
            env.data,
            self._scene_option,
            None,
            camera,
            mujoco.mjtCatBit.mjCAT_ALL,
            renderer.scene,
        )
        return renderer.render()[::-1].copy()  # MuJoCo's rows run bottom-up

    # -- env API --------------------------------------------------------------------------
    def reset(
        self,
        init_ids: list[int],
        sim_states: list[np.ndarray | None] | None,
        seeds: list[int] | None = None,
    ) -> dict[str, Any]:
        """Reset slot i to init_ids[i]: task = init_id % num_tasks, seed = base_seed + init_id
        (or `seeds[i]`: an episode recorded under another base seed); then, where given, restore
        an exact simulator state (keyframe resets). The seed fixes the goal, which the stored
        MuJoCo state does not hold."""
        self._check_reset(init_ids)
        n_tasks = len(self.suite.tasks)
        self._assign([i % n_tasks for i in init_ids])
        for i, (slot, init_id) in enumerate(zip(self.slots, init_ids)):
            env = slot.env
            # Sample the initial object/goal layout from the episode seed, then freeze it.
            env._freeze_rand_vec, env.seeded_rand_vec = False, True
            env.seed(self.base_seed + init_id if seeds is None else int(seeds[i]))
            proprio, _ = env.reset()
            env._freeze_rand_vec = True
            state = sim_states[i] if sim_states is not None else None
            if state is not None:
                self.set_state(env, np.asarray(state, dtype=np.float64))
                proprio = env._get_obs()
            slot.done = False
            slot.last_proprio = np.asarray(proprio, dtype=np.float64)
            slot.last_image = self._render(slot)
        return self._observation()

    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        return np.clip(actions, -1.0, 1.0)

    def _step(self, slot: Slot, action: np.ndarray) -> tuple[float, bool, bool]:
        proprio, reward, _, truncated, info = slot.env.step(action)
        slot.last_proprio = np.asarray(proprio, dtype=np.float64)
        return reward, bool(info["success"]), bool(truncated)

    def _frame(self, slot: Slot, last: bool) -> np.ndarray | int:
        if self.render_every_step or slot.done or last:
            slot.last_image = self._render(slot)
            return slot.last_image
        return 0  # not rendered: nobody observes mid-chunk frames

    def close(self) -> None:
        # Closing renderers before interpreter exit avoids MuJoCo's EGL teardown tracebacks.
        for renderer, _ in self._renderers.values():
            renderer.close()
        self._renderers.clear()
        super().close()
