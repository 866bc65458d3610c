"""The policy interface that rollout, evaluation and RL code use (ARCHITECTURE.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from wmrl_cli.envs.interface import Obs


@dataclass
class PolicyOutput:
    """actions [B,C,A] in env units; learned policies also return their action tokens,
    per-token log-probs [B,C,A] and values [B]."""

    actions: np.ndarray
    tokens: np.ndarray | None = None
    logprobs: np.ndarray | None = None
    values: np.ndarray | None = None


class Policy(Protocol):
    name: str
    chunk_size: int

    def act(self, obs: Obs, sample: bool = True, temperature: float = 1.6) -> PolicyOutput: ...
