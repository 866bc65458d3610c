"""Scripted policies for the real simulator: Meta-World's own experts, and uniform random.

Meta-World's experts are closed-loop position controllers, so they act one step at a time
(chunk size 1); an open-loop chunk of their actions would overshoot.
"""

from __future__ import annotations

import warnings

import numpy as np

from wmrl_cli.envs.interface import Obs, PolicyOutput
from wmrl_cli.sims.suites import Suite


def silence_expert_warnings() -> None:
    """Meta-World's experts warn at every step whose response the env clips anyway (ten lines
    an episode); the warning says nothing about the run."""
    warnings.filterwarnings(
        "ignore", message=r"Constant\(s\) may be too high", category=UserWarning
    )


class ExpertPolicy:
    chunk_size = 1

    def __init__(self, suite: Suite, noise_std: float = 0.0, seed: int = 0) -> None:
        import metaworld.policies as mw_policies

        silence_expert_warnings()
        self.name = "expert" if noise_std == 0 else f"expert(noise={noise_std:g})"
        self._experts = [getattr(mw_policies, task.expert)() for task in suite.tasks]
        self._noise_std = noise_std
        self._rng = np.random.default_rng(seed)

    def act(self, obs: Obs, sample: bool = True, temperature: float = 1.0) -> PolicyOutput:
        if obs.proprio is None:
            raise ValueError("the scripted expert needs the simulator's state (obs.proprio)")
        actions = np.stack(
            [self._experts[t].get_action(s) for t, s in zip(obs.task_ids, obs.proprio)]
        ).astype(np.float32)
        noisy = self._noise_std > 0 and sample
        if noisy:
            actions += self._rng.normal(0.0, self._noise_std, actions.shape).astype(np.float32)
        perturbed = np.full((len(actions), 1), noisy)  # recorded in the episode store
        return PolicyOutput(actions=np.clip(actions, -1.0, 1.0)[:, None, :], perturbed=perturbed)


class RandomPolicy:
    def __init__(self, action_dim: int, chunk_size: int, seed: int = 0) -> None:
        self.name = "random"
        self.chunk_size = chunk_size
        self._action_dim = action_dim
        self._rng = np.random.default_rng(seed)

    def act(self, obs: Obs, sample: bool = True, temperature: float = 1.0) -> PolicyOutput:
        shape = (len(obs.task_ids), self.chunk_size, self._action_dim)
        actions = self._rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        return PolicyOutput(actions=actions, perturbed=np.ones(shape[:2], dtype=bool))
