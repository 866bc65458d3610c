"""Action perturbation around any policy, for data whose actions vary independently of the
scene (`rollout.perturbation`, docs/cli.md#rollout).

World models learn to ignore their actions when the actions can be predicted from the frames,
as an expert's or a policy's can. `PerturbedPolicy` wraps a policy and, per env:

- adds noise to its actions: `gaussian` (i.i.d. per step), `ou` (an Ornstein-Uhlenbeck
  process, x <- (1 - theta) x + std sqrt(1 - (1 - theta)^2) eps, started from its stationary
  distribution, so `std` is the noise's std at every step and its lag-1 correlation is
  1 - theta) or `chunk_offset` (one Gaussian offset held for each episode chunk);
- replaces an episode chunk, with probability `random_chunk_prob`, by uniform random actions
  in [-1, 1].

Chunks are the episode's (`simulator.chunk_size` steps, counted from the episode's first
step), not the policy's: scripted experts act one step at a time. Actions stay clipped to
[-1, 1]. Each env draws from its own generator keyed on (seed, init id), so an episode's
perturbation depends on the seed and its init id only, not on batching. The output marks
the perturbed steps (`PolicyOutput.perturbed`), which the episode store records; it carries no
tokens or log-probs, which would describe actions that were not taken.
"""

from __future__ import annotations

import numpy as np

from wmrl_cli.config.schema import PerturbationConfig
from wmrl_cli.envs.interface import Obs, Policy, PolicyOutput

_STREAM = 0x9E3779B9  # separates these generators from others keyed on (seed, init id)


def is_active(cfg: PerturbationConfig) -> bool:
    """Whether the settings change any action."""
    return (cfg.kind != "none" and cfg.std > 0) or cfg.random_chunk_prob > 0


def describe(cfg: PerturbationConfig) -> str:
    """A short label for the policy name, e.g. `ou(0.5,theta=0.15)+random_chunks(0.2)`."""
    parts = []
    if cfg.kind != "none" and cfg.std > 0:
        theta = f",theta={cfg.ou_theta:g}" if cfg.kind == "ou" else ""
        parts.append(f"{cfg.kind}({cfg.std:g}{theta})")
    if cfg.random_chunk_prob > 0:
        parts.append(f"random_chunks({cfg.random_chunk_prob:g})")
    return "+".join(parts) or "none"


class PerturbedPolicy:
    """`policy` with its actions perturbed as `cfg` says; `chunk_size` is the episode's."""

    def __init__(
        self, policy: Policy, cfg: PerturbationConfig, chunk_size: int, seed: int = 0
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        self.policy = policy
        self.cfg = cfg
        self.episode_chunk = chunk_size
        self.seed = seed
        self.chunk_size = policy.chunk_size
        self.name = f"{policy.name}+{describe(cfg)}"
        self._noisy = cfg.kind != "none" and cfg.std > 0
        self._rngs: list[np.random.Generator] = []
        self._steps = np.zeros(0, dtype=np.int64)
        self._noise: list[np.ndarray | None] = []  # ou state or chunk offset, per env
        self._random = np.zeros(0, dtype=bool)

    def start_episodes(self, init_ids: list[int]) -> None:
        """New episodes in every env: fresh step counts and noise processes."""
        self._rngs = [np.random.default_rng([self.seed, int(i), _STREAM]) for i in init_ids]
        self._steps = np.zeros(len(init_ids), dtype=np.int64)
        self._noise = [None] * len(init_ids)
        self._random = np.zeros(len(init_ids), dtype=bool)
        start = getattr(self.policy, "start_episodes", None)
        if start is not None:
            start(init_ids)

    def act(self, obs: Obs, sample: bool = True, temperature: float = 1.6) -> PolicyOutput:
        out = self.policy.act(obs, sample=sample, temperature=temperature)
        base = np.asarray(out.actions, dtype=np.float32)
        batch, chunk, _ = base.shape
        if len(self._rngs) != batch:  # driven without start_episodes: envs 0..B-1
            self.start_episodes(list(range(batch)))
        actions = np.empty_like(base)
        flags = np.zeros((batch, chunk), dtype=bool)
        for i in range(batch):
            for t in range(chunk):
                actions[i, t], flags[i, t] = self._step(i, base[i, t])
        if out.perturbed is not None:
            flags |= np.asarray(out.perturbed, dtype=bool)
        return PolicyOutput(actions=actions, values=out.values, perturbed=flags)

    def _step(self, i: int, action: np.ndarray) -> tuple[np.ndarray, bool]:
        cfg, rng, dim = self.cfg, self._rngs[i], action.shape[-1]
        step = int(self._steps[i])
        self._steps[i] += 1
        if step % self.episode_chunk == 0:  # an episode chunk starts
            self._random[i] = cfg.random_chunk_prob > 0 and rng.random() < cfg.random_chunk_prob
            if cfg.kind == "chunk_offset":
                self._noise[i] = rng.normal(0.0, cfg.std, dim)
        noise: np.ndarray | None = None
        if self._noisy:
            if cfg.kind == "gaussian":
                noise = rng.normal(0.0, cfg.std, dim)
            elif cfg.kind == "ou":
                state = self._noise[i]
                if state is None:  # the stationary distribution
                    state = rng.normal(0.0, cfg.std, dim)
                else:
                    keep = 1.0 - cfg.ou_theta
                    state = keep * state + cfg.std * np.sqrt(1.0 - keep**2) * rng.normal(size=dim)
                self._noise[i] = noise = state
            else:  # chunk_offset
                noise = self._noise[i]
        if self._random[i]:
            return rng.uniform(-1.0, 1.0, dim).astype(np.float32), True
        if noise is None:
            return action, False
        return np.clip(action + noise, -1.0, 1.0).astype(np.float32), True


def perturb(policy: Policy, cfg: PerturbationConfig, chunk_size: int, seed: int = 0) -> Policy:
    """`policy` wrapped by `PerturbedPolicy`, or unchanged when the settings change nothing."""
    if not is_active(cfg):
        return policy
    return PerturbedPolicy(policy, cfg, chunk_size, seed=seed)
