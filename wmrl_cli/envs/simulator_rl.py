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
