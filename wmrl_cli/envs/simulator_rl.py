"""The real simulator as the env of RL (`wmrl train-policy --env simulator`).

It wraps a real simulator (`MetaWorldSim`, `LiberoSim`) so that the trainer sees what it sees
in imagination: a reset set to draw GRPO groups from, and the imagined env's sparse success
reward. Success, termination and truncation are the simulator's own.

- Reset set: `num_states` training init ids, `offset + 0 .. offset + num_states - 1`. An init
  id fixes the task (`init_id % num_tasks`) and the seed (`simulator.seed + init_id`); the
  offset keeps them apart from the evaluation seeds (0 .. trials x tasks - 1) and from the SFT
  demonstrations (1,000,000+).
- Groups: the members of a group get the same init id; after the reset every member is
  restored to the first member's exact simulator state, so a group starts identically even
  if the simulator keeps state across resets.
- Reward: `reward_coef` on the step that reaches success, 0 elsewhere (the imagined env's
  reward without `use_rel_reward`). The simulator must terminate on success (the RL env is
  built with `terminate_on_success`), so masked GRPO stops at the first success as it does in
  imagination and an episode earns the reward at most once.
- Real steps: every executed step (`info["valid"]`) is one real environment step.
"""

from __future__ import annotations

import time

import numpy as np

from wmrl_cli.envs.interface import ChunkResult, Env, Obs
from wmrl_cli.errors import WmrlError


class SimulatorRLEnv:
    real = True  # its steps are real environment steps (env/real_steps)

    def __init__(self, sim: Env, num_states: int, offset: int, reward_coef: float = 5.0) -> None:
        self.sim = sim
        self.num_envs = sim.num_envs
        self.action_dim = sim.action_dim
        self.task_names = sim.task_names
        self.reset_set = range(offset, offset + num_states)  # entry index -> init id
        # the task of every entry (varied_outcome reset sampling): init id % number of tasks
        self.entry_task_ids = [i % len(self.task_names) for i in self.reset_set]
        self.reward_coef = reward_coef
        self.timings = {"simulator": 0.0}

    def pop_timings(self) -> dict[str, float]:
        """Seconds spent in the simulator (stepping and rendering) since the last call."""
        out, self.timings = self.timings, {"simulator": 0.0}
        return out

    def reset(self, init_ids: list[int], sim_states: list | None = None) -> Obs:
        """`init_ids` index the reset set; equal ids (a GRPO group) start in one exact state."""
        t0 = time.perf_counter()
        ids = [self.reset_set[i] for i in init_ids]
        if sim_states is None:
            obs = self.sim.reset(ids)
            if obs.sim_states is not None:
                first = {i: k for k, i in reversed(list(enumerate(ids)))}
                states = [obs.sim_states[first[i]] for i in ids]
                if any(not np.array_equal(s, t) for s, t in zip(states, obs.sim_states)):
                    obs = self.sim.reset(ids, states)
        else:
            obs = self.sim.reset(ids, sim_states)
        self.timings["simulator"] += time.perf_counter() - t0
        return obs

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        t0 = time.perf_counter()
        result = self.sim.chunk_step(actions)
        self.timings["simulator"] += time.perf_counter() - t0
        success = result.success & result.info["valid"]
        rewards = np.where(success, self.reward_coef, 0.0).astype(np.float32)
        info = dict(result.info, sim_rewards=result.rewards)
        return ChunkResult(
            obs=result.obs,
            frames=result.frames,
            rewards=rewards,
            terminated=result.terminated,
            truncated=result.truncated,
            success=result.success,
            info=info,
        )

    def close(self) -> None:
        self.sim.close()

    def __enter__(self) -> SimulatorRLEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StoredStartsSimulatorEnv:
    """The real simulator started from a reset set's stored states: `algorithm.env=simulator`
    with `world_model.reset_set` (a wmrl episode store with its keyframes).

    It keeps everything of RL in imagination except the world model and the reward model: the
    same starts (episode starts and KIR keyframes, restored exactly from the stored MuJoCo
    state and seed), the same step counting (a keyframe entry counts from its recorded step,
    or from 0 with `kir_step_reset`) and truncation at `max_steps`, the same reward on the step
    that reaches success. So a run in it against a run in imagination from the same reset set
    separates the start distribution from the world model: if this one does not improve the
    real policy either, the starts are what deny GRPO its signal.

    `sim` must terminate on success and never truncate first (its limit above every entry's
    step plus `max_steps`): truncation is counted here, as the imagined env counts it.
    """

    real = True  # its steps are real environment steps (env/real_steps)

    def __init__(
        self,
        sim: Env,
        entries: list,
        task_names: list[str],
        max_steps: int,
        kir_step_reset: bool = False,
        reward_coef: float = 5.0,
    ) -> None:
        missing = [i for i, e in enumerate(entries) if e.sim_state is None or e.seed is None]
        if missing:
            raise WmrlError(
                f"algorithm.env=simulator with a reset set needs entries with a stored simulator "
                f"state and seed (a wmrl episode store); entry {missing[0]} has none"
            )
        self.sim = sim
        self.num_envs = sim.num_envs
        self.action_dim = sim.action_dim
        self.task_names = task_names
        self.reset_set = entries
        self.entry_task_ids = [e.task_id for e in entries]
        self.max_steps = max_steps
        self.kir_step_reset = kir_step_reset
        self.reward_coef = reward_coef
        self.timings = {"simulator": 0.0}

    def pop_timings(self) -> dict[str, float]:
        out, self.timings = self.timings, {"simulator": 0.0}
        return out

    def reset(self, init_ids: list[int], sim_states: list | None = None) -> Obs:
        entries = [self.reset_set[i] for i in init_ids]
        t0 = time.perf_counter()
        # The task is init_id % num_tasks, so the task id itself serves as the init id. An
        # episode start is a plain reset with the entry's seed: it shows the frame the policy
        # saw at the start of its episodes (Meta-World renders its reset before the kinematics
        # are recomputed; restoring the stored start state moves the drawn arm), with the
        # same dynamics. A simulator whose starts no seed reproduces (LIBERO: `seeded_starts`
        # False) restores every entry from its stored state.
        seeded = getattr(self.sim, "seeded_starts", True)
        if sim_states is None:
            sim_states = [e.sim_state if e.is_keyframe or not seeded else None for e in entries]
        obs = self.sim.reset(
            [e.task_id for e in entries], sim_states, seeds=[e.seed for e in entries]
        )
        self.timings["simulator"] += time.perf_counter() - t0
        self._steps = np.array([0 if self.kir_step_reset else e.step for e in entries])
        self._done = np.zeros(self.num_envs, dtype=bool)
        return obs

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        t0 = time.perf_counter()
        result = self.sim.chunk_step(np.asarray(actions, dtype=np.float32))
        self.timings["simulator"] += time.perf_counter() - t0
        c = result.success.shape[1]
        was_done = self._done.copy()
        valid = result.info["valid"] & ~was_done[:, None]
        success = result.success & valid
        terminated = result.terminated & valid
        ends_now = terminated.any(axis=1)
        steps_after = self._steps + c
        truncated_now = ~ends_now & (steps_after >= self.max_steps) & ~was_done
        truncated = np.zeros_like(terminated)
        truncated[truncated_now, -1] = True
        rewards = np.where(success, self.reward_coef, 0.0).astype(np.float32)
        self._steps = np.where(was_done, self._steps, steps_after)
        self._done = was_done | ends_now | truncated_now
        return ChunkResult(
            obs=result.obs,
            frames=result.frames,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            success=success,
            info=dict(result.info, valid=valid, sim_rewards=result.rewards),
        )

    def close(self) -> None:
        self.sim.close()

    def __enter__(self) -> StoredStartsSimulatorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
