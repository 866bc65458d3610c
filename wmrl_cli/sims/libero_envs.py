"""A batch of LIBERO environments stepped inside one process (a `LiberoSim` worker).

The episode protocol is OpenVLA-OFT's run_libero_eval: one `OffScreenRenderEnv` per task
(seeded 0), `reset()`, then the suite's fixed init state for the trial, then
`NUM_STEPS_WAIT` dummy actions while the objects settle (not counted in the episode's steps);
the episode ends at the first success or after the suite's step limit. Everything crossing
the process pipe is plain numpy.

A simulator state (`get_state`) restores an episode exactly, so stored episodes replay bit for
bit. robosuite rebuilds the model at every reset and places the fixed furniture (cabinet,
stove, ...) anew from the env's random stream, and the furniture's pose is part of the model,
not of MuJoCo's state; the gripper integrates its commands in the robot object. The state is
therefore MuJoCo's integration state (`mj_getState`, `mjSTATE_INTEGRATION`: time, qpos, qvel,
warm start, controls, ...), every body's pose in the model (pos [nbody, 3], quat [nbody, 4]),
the gripper's integrated command, then the episode's step count.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering without a display
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import contextlib  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from wmrl_cli.sims.libero_suites import (  # noqa: E402
    ACTION_DIM,
    DUMMY_ACTION,
    NUM_STEPS_WAIT,
    get_libero_suite,
    proprio_from_obs,
    task_and_trial,
    to_libero_actions,
    upright,
)
from wmrl_cli.sims.pool import PooledEnvs, Slot  # noqa: E402
from wmrl_cli.sims.render_device import robosuite_render_kwargs  # noqa: E402


def _robot(env: Any) -> Any:
    """The robosuite robot inside LIBERO's env wrapper."""
    return env.env.robots[0]


def load_init_states(path: str | Path) -> np.ndarray:
    """A `.pruned_init` file (a torch-saved float64 array [50, state]) without unpickling
    anything but numpy arrays (LIBERO itself uses weights_only=False)."""
    import torch

    core = getattr(np, "_core", None) or np.core  # numpy 2 renamed numpy.core
    reconstruct = core.multiarray._reconstruct
    allowed = [
        np.ndarray,
        np.dtype,
        type(np.dtype(np.float64)),
        reconstruct,
        (reconstruct, "numpy.core.multiarray._reconstruct"),  # files saved under numpy 1
    ]
    with torch.serialization.safe_globals(allowed):
        states = torch.load(str(path), weights_only=True)
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2:
        raise ValueError(f"{path}: expected init states [N, D], got shape {states.shape}")
    return states


class LiberoEnvs(PooledEnvs):
    """B environment slots of one suite; a slot may switch task at every reset (sims/pool.py)."""

    action_dim = ACTION_DIM

    def __init__(
        self,
        suite: str,
        num_envs: int,
        image_size: int,
        camera: str,
        max_steps: int,
        terminate_on_success: bool,
        assets_dir: str,
    ) -> None:
        # A LIBERO env holds about 1 GB (robosuite's model, MuJoCo data, an EGL context), so a
        # worker keeps only as many as it has slots: a worker that met every task of a suite in
        # RL's changing group mixes grew past 5 GB. Rebuilding one costs a model compilation, a
        # second or two, only when a slot's task changes.
        super().__init__(num_envs, pool_size=num_envs)
        self.suite = get_libero_suite(suite)
        self.image_size = image_size
        self.camera = camera
        self.max_steps = max_steps
        self.terminate_on_success = terminate_on_success
        self._init_states: dict[int, np.ndarray] = {}
        # robosuite warns about its macro file on import; nothing a user can act on.
        logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
        import libero.libero as libero_pkg

        # hf-libero resolves meshes through this cache before trying to download them.
        libero_pkg._assets_path_cache = assets_dir
        from libero.libero import benchmark

        with contextlib.redirect_stdout(io.StringIO()):  # "[info] using task orders ..."
            self._benchmark = benchmark.get_benchmark_dict()[self.suite.name]()
        names = [t.name for t in self._benchmark.tasks]
        if names != list(self.suite.task_files):
            raise RuntimeError(f"hf-libero's {self.suite.name} tasks differ from wmrl's: {names}")

    # -- construction ---------------------------------------------------------------------
    def _make(self, task_id: int) -> Any:
        from libero.libero.envs import OffScreenRenderEnv

        env = OffScreenRenderEnv(
            bddl_file_name=self._benchmark.get_task_bddl_file_path(task_id),
            camera_heights=self.image_size,
            camera_widths=self.image_size,
            camera_names=[self.camera],
            **robosuite_render_kwargs(),  # the rank's own GPU (sims/render_device.py)
        )
        env.seed(0)  # OpenVLA-OFT: the seed moves objects even under a fixed init state
        return env

    def init_states(self, task_id: int) -> np.ndarray:
        if task_id not in self._init_states:
            from libero.libero import get_libero_path

            task = self._benchmark.get_task(task_id)
            path = Path(get_libero_path("init_states")) / task.problem_folder
            self._init_states[task_id] = load_init_states(path / task.init_states_file)
        return self._init_states[task_id]

    def _observe(self, slot: Slot, obs: dict[str, np.ndarray]) -> None:
        slot.last_image = upright(obs[f"{self.camera}_image"])
        slot.last_proprio = proprio_from_obs(obs)

    def get_state(self, slot: Slot) -> np.ndarray:
        """The exact state of a slot (module docstring): integration state, body poses, the
        gripper's command, step count."""
        import mujoco

        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        model, data = slot.env.sim.model._model, slot.env.sim.data._data
        integration = np.empty(mujoco.mj_stateSize(model, spec))
        mujoco.mj_getState(model, data, integration, spec)
        gripper = np.asarray(_robot(slot.env).gripper.current_action, dtype=np.float64)
        return np.concatenate(
            [
                integration,
                np.ravel(model.body_pos),
                np.ravel(model.body_quat),
                gripper,
                [float(slot.steps)],
            ]
        )

    @staticmethod
    def set_state(slot: Slot, state: np.ndarray) -> dict[str, np.ndarray]:
        """Restore a `get_state` state into a freshly reset slot; the observation there."""
        import mujoco

        env, spec = slot.env, mujoco.mjtState.mjSTATE_INTEGRATION
        model, data = env.sim.model._model, env.sim.data._data
        robot = _robot(env)
        sizes = np.cumsum([mujoco.mj_stateSize(model, spec), model.nbody * 3, model.nbody * 4])
        # The gripper's command: robosuite starts it with one value per degree of freedom and
        # keeps one per finger once it has acted; the rest of the state is whatever it held.
        if not 1 <= len(state) - 1 - sizes[-1] <= 2:
            raise ValueError(
                f"a LIBERO state of {len(state)} values, expected {sizes[-1] + 2} or "
                f"{sizes[-1] + 3} for this task (a state from another task or an older wmrl)"
            )
        integration, pos, quat, gripper = np.split(state[:-1], sizes)
        model.body_pos[:] = pos.reshape(-1, 3)  # the furniture where the episode had it
        model.body_quat[:] = quat.reshape(-1, 4)
        mujoco.mj_setState(model, data, integration, spec)
        robot.gripper.current_action = gripper.copy()
        env.sim.forward()
        # The controller caches the end effector's pose until its next update: without this
        # its first goal would start from the pose of the reset, not of the restored state.
        robot.controller.new_update = True
        env.check_success()
        env._post_process()
        env._update_observables(force=True)
        slot.steps = int(state[-1])
        return env.env._get_observations()

    # -- env API --------------------------------------------------------------------------
    def reset(
        self,
        init_ids: list[int],
        sim_states: list[np.ndarray | None] | None,
        seeds: list[int] | None = None,
    ) -> dict[str, Any]:
        """Reset slot i to init_ids[i]: task and trial from the id, the trial's fixed init
        state, then the settling steps; a given sim state (keyframe reset) replaces the init
        state and the settling steps. `seeds` are unused: a LIBERO state holds everything."""
        self._check_reset(init_ids)
        n_tasks = len(self.suite.task_files)
        self._assign([task_and_trial(i, n_tasks)[0] for i in init_ids])
        for i, (slot, init_id) in enumerate(zip(self.slots, init_ids)):
            task_id, trial = task_and_trial(init_id, n_tasks)
            slot.env.reset()
            state = sim_states[i] if sim_states is not None else None
            if state is not None:
                obs = self.set_state(slot, np.asarray(state, dtype=np.float64))
            else:
                obs = slot.env.set_init_state(self.init_states(task_id)[trial])
                for _ in range(NUM_STEPS_WAIT):
                    obs, _, _, _ = slot.env.step(list(DUMMY_ACTION))
                slot.steps = 0
            slot.done = False
            self._observe(slot, obs)
        return self._observation()

    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        """Policy actions (OpenVLA's gripper convention) converted to LIBERO's."""
        return to_libero_actions(actions)

    def _step(self, slot: Slot, action: np.ndarray) -> tuple[float, bool, bool]:
        obs, reward, done, _ = slot.env.step(action.tolist())
        slot.steps += 1
        self._observe(slot, obs)
        # LIBERO's done is its success predicate
        return float(reward), bool(done), slot.steps >= self.max_steps

    def close(self) -> None:
        # Closing explicitly frees the EGL contexts before interpreter teardown, which
        # otherwise prints EGLError tracebacks from robosuite's __del__.
        super().close()
