"""The imagined env judged by the real simulator (`reward_model.source=simulator`): a control.

The policy sees only what the world model imagines, as in RL in imagination; but every chunk
of actions it takes is also executed in the real simulator, started from the reset entry's
stored state and seed, and success, termination and truncation come from the simulator, not
from a reward model. So the reward is exact and the only thing learned in the loop is the
world model's dynamics: if RL in imagination improves the real policy with this reward and
not with the reward model's, the reward model is what breaks the chain; if it fails with
both, the world model's dynamics are.

The simulator's steps are real environment steps (`real`, counted in `env/real_steps`): a
diagnostic, never the product's recipe. Where a reward model is also given, its verdict on
the imagined frames is kept beside the simulator's (`info["model_success"]`), so a run
measures how often the reward model agrees with the truth on the policy's own rollouts as the
policy changes.

The audit (`reward_model.audit_with_simulator`, `judge="model"`) turns the roles round: the
reward model judges, exactly as in RL in imagination, and the simulator's verdict on the same
actions is only recorded (`info["real_success"]`): how much of the signal RL trains on is true.
With a single-frame judge it also scores the simulator's own frame at each chunk's end
(`info["real_frame_passes"]`), which tells a false call's two causes apart: the judge passing a
real frame that is not a success, or the world model drawing a success the simulator does not
reach (docs/results.md#the-verdict-under-rl: the second, 27 of 31 false calls after 15 steps
of RL).
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np

from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.envs.interface import ChunkResult, Obs
from wmrl_cli.envs.verified import check_resettable, reset_to_entries
from wmrl_cli.rewards.calibration import held_success


class SimulatorJudgedEnv:
    real = True  # the simulator's steps are real environment steps (env/real_steps)
    real_kind = "exact"  # every episode judged by the simulator (rl/real_step_kinds.py)
    imagines = True  # ... but the policy sees the world model's frames

    def __init__(
        self,
        imagined: ImaginedEnv,
        sim,
        reward_coef: float = 5.0,
        judge: Literal["simulator", "model"] = "simulator",
    ) -> None:
        """judge="simulator": `imagined` must never end an episode on its own reward model
        (success threshold above every score) so that only the simulator decides success;
        judge="model": `imagined` decides everything as it would alone and the simulator's
        success is recorded beside it. `sim` holds as many envs, terminates on success (or, to
        label data, never: jobs/imagine_policy.py) and truncates no earlier than the imagined
        env, whose step count (keyframe entries: from their step or from 0, `kir_step_reset`)
        decides truncation."""
        check_resettable(imagined, "simulator")
        if sim.num_envs != imagined.num_envs:
            raise ValueError(f"{sim.num_envs} simulator envs for {imagined.num_envs} imagined")
        self.imagined, self.sim = imagined, sim
        self.num_envs = imagined.num_envs
        self.action_dim = imagined.action_dim
        self.task_names = imagined.task_names
        self.reset_set = imagined.reset_set
        self.entry_task_ids = imagined.entry_task_ids
        self.reward_coef = reward_coef
        self.judge = judge
        self.model_threshold: float | None = None  # set: the reward model's verdict is recorded
        self._model_held = np.zeros(self.num_envs, dtype=np.int64)
        self._sim_time = 0.0

    @property
    def generator(self):
        """The world model's noise generator: RL reseeds it every step (counter-based seeding,
        exact resume), as it does the unwrapped imagined env's."""
        return self.imagined.generator

    def pop_timings(self) -> dict[str, float]:
        out = dict(self.imagined.pop_timings(), simulator=self._sim_time)
        self._sim_time = 0.0
        return out

    def reset(self, init_ids: list[int], sim_states: list | None = None) -> Obs:
        obs = self.imagined.reset(init_ids)
        entries = [self.reset_set[i] for i in init_ids]
        t0 = time.perf_counter()
        # The task is init_id % num_tasks: the task id itself is such an init id; the seed and
        # the state come from the entry.
        reset_to_entries(self.sim, entries)
        self._sim_time += time.perf_counter() - t0
        self._done = np.zeros(self.num_envs, dtype=bool)
        self._model_held = np.zeros(self.num_envs, dtype=np.int64)
        return obs

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        imagined = self.imagined.chunk_step(actions)
        t0 = time.perf_counter()
        real = self.sim.chunk_step(np.asarray(actions, dtype=np.float32))
        self._sim_time += time.perf_counter() - t0
        was_done = self._done.copy()
        if self.judge == "model":
            return self._audited(imagined, real, was_done)
        valid = real.info["valid"] & imagined.info["valid"] & ~was_done[:, None]
        success = real.success & valid
        terminated = real.terminated & valid
        ends_now = terminated.any(axis=1)
        truncated = imagined.truncated & ~ends_now[:, None] & ~was_done[:, None]
        rewards = np.where(success, self.reward_coef, 0.0).astype(np.float32)
        info = {"valid": valid, "scores": imagined.info["scores"]}
        if self.model_threshold is not None:
            held, self._model_held = held_success(
                imagined.info["scores"],
                self.model_threshold,
                self.imagined.success_frames,
                self._model_held,
            )
            info["model_success"] = held & valid
        self._done = was_done | ends_now | truncated.any(axis=1)
        return ChunkResult(
            obs=imagined.obs,
            frames=imagined.frames,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            success=success,
            info=info,
        )

    def _audited(self, imagined: ChunkResult, real: ChunkResult, was_done) -> ChunkResult:
        """The imagined env's own verdict, the simulator's beside it: the simulator may end an
        episode earlier (a real success terminates it), the imagined env decides when it ends."""
        valid = imagined.info["valid"] & ~was_done[:, None]
        ends = (imagined.terminated | imagined.truncated) & valid
        self._done = was_done | ends.any(axis=1)
        info = dict(imagined.info, valid=valid)
        info["real_success"] = real.success & real.info["valid"] & valid
        if self.imagined.judges_single_frames():
            # The judge on the simulator's frame at the chunk's end: where it calls a success
            # the replay does not confirm, a real frame that passes too means the judge errs;
            # one that does not, that the world model drew what the judge saw.
            info["real_frame_passes"] = self.imagined.frame_passes(real.obs.images)
        return ChunkResult(
            obs=imagined.obs,
            frames=imagined.frames,
            rewards=np.where(valid, imagined.rewards, 0.0).astype(np.float32),
            terminated=imagined.terminated & valid,
            truncated=imagined.truncated & valid,
            success=imagined.success & valid,
            info=info,
        )

    def close(self) -> None:
        self.sim.close()
