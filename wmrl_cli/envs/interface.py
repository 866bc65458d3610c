"""The closed loop's interfaces (ARCHITECTURE.md): the env, shared by the real simulator and
the imagined env, and the policy that acts on its observations.

Envs are vectorized over B environments and stepped one action chunk at a time. Policy, RL
and evaluation code talk to this interface only, never to a concrete simulator. The policy
interface lives here too, below both sides of the loop, so that simulators (scripted experts)
and envs need nothing from the policy package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class Obs:
    """One observation per environment.

    images: uint8 [B,H,W,3], upright RGB. instructions: B strings. task_ids: int [B].
    proprio: the simulator's low-dimensional state [B,D] where one exists (scripted experts
    read it; learned policies do not). sim_states: per env a flat float64 simulator state
    from which the env can be restored exactly (None for the imagined env).
    """

    images: np.ndarray
    instructions: list[str]
    task_ids: np.ndarray
    proprio: np.ndarray | None = None
    sim_states: list[np.ndarray] | None = None


@dataclass
class ChunkResult:
    """What `chunk_step` returns for a chunk of C actions.

    frames: uint8 [B,C,H,W,3], the observation after every action of the chunk (an env that
    finished mid-chunk repeats its last frame). rewards, terminated, truncated, success: [B,C].
    `obs` is the observation after the chunk. An env that is done stays done until reset.
    """

    obs: Obs
    frames: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    success: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


def empty_chunk_arrays(batch: int, chunk: int, action_dim: int, size: int) -> dict[str, Any]:
    """The arrays an in-process simulator fills while stepping a chunk (what its worker sends
    back): frames, per-step rewards and flags, `valid` steps and the `executed` actions."""
    return {
        "frames": np.empty((batch, chunk, size, size, 3), dtype=np.uint8),
        "rewards": np.zeros((batch, chunk), dtype=np.float32),
        "terminated": np.zeros((batch, chunk), dtype=bool),
        "truncated": np.zeros((batch, chunk), dtype=bool),
        "success": np.zeros((batch, chunk), dtype=bool),
        "valid": np.zeros((batch, chunk), dtype=bool),
        "executed": np.zeros((batch, chunk, action_dim), dtype=np.float32),
    }


class Env(Protocol):
    num_envs: int
    action_dim: int
    task_names: list[str]

    def reset(
        self, init_ids: list[int], sim_states: list[np.ndarray | None] | None = None
    ) -> Obs: ...

    def chunk_step(self, actions: np.ndarray) -> ChunkResult: ...

    def close(self) -> None: ...


@dataclass
class PolicyOutput:
    """actions [B,C,A] in env units; learned policies also return their action tokens,
    per-token log-probs [B,C,A] and values [B]. perturbed [B,C] (bool, optional): the steps
    whose actions were perturbed (noise or random actions), recorded in the episode store.

    A policy may also define `start_episodes(init_ids)`: the closed loop calls it after every
    reset, so that per-episode state (a perturbation's noise process) starts afresh."""

    actions: np.ndarray
    tokens: np.ndarray | None = None
    logprobs: np.ndarray | None = None
    values: np.ndarray | None = None
    perturbed: np.ndarray | None = None


class Policy(Protocol):
    name: str
    chunk_size: int

    def act(self, obs: Obs, sample: bool = True, temperature: float = 1.6) -> PolicyOutput: ...
