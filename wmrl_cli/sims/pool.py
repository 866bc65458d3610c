"""The env slots a simulator worker steps, over a bounded pool of envs (both simulators').

A worker (metaworld_envs.MetaWorldEnvs, libero_envs.LiberoEnvs) holds B slots, and a slot may
switch task at every reset. Envs are kept in a least-recently-used pool keyed (task_id, k): the
k-th slot of a batch holding that task. Batches of varying task mixes (RL's GRPO groups) would
otherwise build up to tasks x slots of them; at most `pool_size` are kept, and the envs a batch
does not need are closed before the ones it lacks are built, so that a worker never holds more
than `pool_size` at once.

A simulator supplies `_make(task_id)` (a new env), `get_state(slot)` (the slot's exact state),
`_env_actions(actions)` (the actions it runs, from the policy's) and `_step(slot, action)` (one
step, updating the slot's last observation); `_frame` (the frame a step records) where it does
not render every step. Everything crossing the process pipe is plain numpy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from wmrl_cli.envs.interface import empty_chunk_arrays
from wmrl_cli.sims.memory import release_memory


@dataclass
class Slot:
    """One env of the batch: its task, the pooled env it holds and its last observation."""

    task_id: int = -1
    env: Any = None
    done: bool = True
    steps: int = 0  # the episode's steps, where the simulator counts them itself (LIBERO)
    last_image: np.ndarray | None = None
    last_proprio: np.ndarray | None = None


class PooledEnvs(ABC):
    """B env slots over a bounded least-recently-used pool of envs (see the module doc)."""

    action_dim: int
    image_size: int
    terminate_on_success: bool

    def __init__(self, num_envs: int, pool_size: int) -> None:
        self.slots = [Slot() for _ in range(num_envs)]
        self._pool: OrderedDict[tuple[int, int], Any] = OrderedDict()
        self.pool_size = pool_size

    @abstractmethod
    def _make(self, task_id: int) -> Any:
        """A new env of the task."""

    @abstractmethod
    def get_state(self, slot: Slot) -> np.ndarray:
        """The slot's exact simulator state (a flat float64 array)."""

    @abstractmethod
    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        """The actions [B,C,A] the simulator runs for the policy's."""

    @abstractmethod
    def _step(self, slot: Slot, action: np.ndarray) -> tuple[float, bool, bool]:
        """One step of the slot's env: (reward, success, truncated); the slot's last
        observation updated."""

    def _frame(self, slot: Slot, last: bool) -> np.ndarray | int:
        """The frame a step records (after `slot.done` is set; `last`: the chunk's last step)."""
        return slot.last_image

    # -- the pool -------------------------------------------------------------------------------
    def _assign(self, task_ids: list[int]) -> None:
        """Give slot i an env of task_ids[i], from the pool or built."""
        seen: dict[int, int] = {}
        keys = []
        for task_id in task_ids:
            k = seen.get(task_id, 0)
            seen[task_id] = k + 1
            keys.append((task_id, k))
        # Close the least recently used envs this batch does not need before building the
        # ones it lacks, so that the worker never holds more than pool_size at once.
        wanted = set(keys)
        missing = sum(key not in self._pool for key in wanted)
        excess = len(self._pool) + missing - self.pool_size
        spare = [key for key in self._pool if key not in wanted][: max(excess, 0)]
        for key in spare:
            self._pool.pop(key).close()
        if spare:
            release_memory()
        for slot, key in zip(self.slots, keys):
            if key not in self._pool:
                self._pool[key] = self._make(key[0])
            self._pool.move_to_end(key)
            slot.task_id = key[0]
            slot.env = self._pool[key]

    # -- env API --------------------------------------------------------------------------------
    def _check_reset(self, init_ids: list[int]) -> None:
        if len(init_ids) != len(self.slots):
            raise ValueError(f"reset got {len(init_ids)} init ids for {len(self.slots)} envs")

    def _observation(self) -> dict[str, Any]:
        return {
            "images": np.stack([s.last_image for s in self.slots]),
            "proprio": np.stack([s.last_proprio for s in self.slots]),
            "task_ids": np.array([s.task_id for s in self.slots], dtype=np.int64),
            "sim_states": [self.get_state(s) for s in self.slots],
        }

    def chunk_step(self, actions: np.ndarray, active: np.ndarray | None = None) -> dict[str, Any]:
        """Policy actions [B,C,A]; a slot that is done repeats its last frame. `executed` holds
        the actions the simulator ran, `step_proprio` [B,C,D] the proprio after every step (the
        end effector's position first, for hand tracking). `active` [B]: False stops a slot
        until the next reset (its episode ended elsewhere: no step is spent on it)."""
        b, c, a = actions.shape
        n, dim = len(self.slots), self.action_dim
        if b != n or a != dim:
            raise ValueError(f"actions have shape {actions.shape}, expected [{n},C,{dim}]")
        if active is not None:
            for slot, on in zip(self.slots, active):
                slot.done = slot.done or not on
        out = empty_chunk_arrays(b, c, a, self.image_size)
        out["step_proprio"] = np.zeros((b, c, len(self.slots[0].last_proprio)), np.float64)
        env_actions = self._env_actions(actions)
        for i, slot in enumerate(self.slots):
            for t in range(c):
                if slot.done:
                    out["frames"][i, t] = slot.last_image
                    out["step_proprio"][i, t] = slot.last_proprio
                    continue
                reward, success, truncated = self._step(slot, env_actions[i, t])
                terminated = success and self.terminate_on_success
                slot.done = terminated or truncated
                out["frames"][i, t] = self._frame(slot, last=t == c - 1)
                out["step_proprio"][i, t] = slot.last_proprio
                out["rewards"][i, t] = reward
                out["success"][i, t] = success
                out["terminated"][i, t] = terminated
                out["truncated"][i, t] = truncated and not terminated
                out["valid"][i, t] = True
                out["executed"][i, t] = env_actions[i, t]
        out.update(self._observation())
        return out

    def close(self) -> None:
        for env in self._pool.values():
            env.close()
        self._pool.clear()
