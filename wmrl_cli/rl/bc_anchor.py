"""A behaviour-cloning term beside the policy-gradient loss, on real successful episodes.

GRPO in the world model moves a shared policy on every task, and furthest on a task whose
imagined loop is broken (window-close on seed 1: docs/notes/real-steps-to-gain.md, "A
behaviour-cloning anchor on the base's real successes"). `algorithm.bc_coef` holds the policy
to real successes the method already paid for (co-evolve's `data/reward_real`: the base
policy's own clean real rollouts), as DAPG (Rajeswaran et al., 2018, eq. 6) adds a
demonstration term to its policy gradient:

    loss = policy_loss + bc_coef * mean over sampled steps of -log pi(a_t:t+C | o_t, l)

once per optimizer step, on `bc_batch_size` steps drawn (all ranks together) from the
successful episodes of `algorithm.bc_data`; of the tasks in `algorithm.bc_tasks` alone where
set (those whose imagined loop is broken, so that the tasks RL can learn are not held back).
The draw is counter-based (seed, RL step, optimizer step, rank), so a resumed run draws what
an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.data.bc import BCDataset, build_bc_dataset
from wmrl_cli.data.episodes import EpisodeStore


class RealSuccessAnchor:
    """The steps of a store's successful episodes, served as behaviour-cloning batches."""

    def __init__(self, data: BCDataset, batch_size: int, seed: int, rank: int, world: int):
        self.data = data
        self.per_rank = max(1, batch_size // world)
        self.seed, self.rank = seed, rank

    @classmethod
    def from_store(
        cls,
        path: str | Path,
        chunk: int,
        batch_size: int,
        seed: int,
        rank: int,
        world: int,
        tasks: Sequence[str] | None = None,
    ) -> RealSuccessAnchor:
        data = build_bc_dataset(EpisodeStore.open(path), chunk, tasks=tasks)
        return cls(data, batch_size, seed, rank, world)

    def batch(self, step: int, optimizer_step: int) -> tuple[torch.Tensor, list[str], torch.Tensor]:
        """(frames uint8 [B,H,W,3], instructions [B], action chunks float32 [B,C,A])."""
        rng = np.random.default_rng([self.seed, step, optimizer_step, self.rank])
        idx = rng.integers(0, len(self.data), self.per_rank)
        prompts = [self.data.instructions[i] for i in self.data.prompt_ids[idx]]
        return (
            torch.from_numpy(self.data.frames[idx]),
            prompts,
            torch.from_numpy(self.data.chunks[idx]),
        )

    def loss(self, policy, model, device, step: int, optimizer_step: int):
        """`policy.bc_loss` on one batch, its forward through `model` (the wrapped policy, so
        that its gradient hooks fire)."""
        images, prompts, chunks = self.batch(step, optimizer_step)
        return policy.bc_loss(images.to(device), prompts, chunks, model=model)
