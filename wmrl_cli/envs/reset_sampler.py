"""Group-aware reset sampling for GRPO: each group of `group_size` envs shares one initial state.

Every rollout epoch draws `num_envs / group_size` reset entries and repeats each `group_size`
times (RLinf's rule). The sampler's state is a seed and a counter, so a resumed run draws the
same initial states as an uninterrupted one.
"""

from __future__ import annotations

import numpy as np

from wmrl_cli.errors import ConfigError


class GroupResetSampler:
    def __init__(self, num_entries: int, num_envs: int, group_size: int, seed: int = 0) -> None:
        if num_entries < 1:
            raise ConfigError("the reset set is empty: expected at least one initial state")
        if group_size < 1 or num_envs % group_size:
            raise ConfigError(
                f"invalid value for 'algorithm.group_size': {group_size} must divide "
                f"the number of envs ({num_envs})"
            )
        self.num_entries = num_entries
        self.num_envs = num_envs
        self.group_size = group_size
        self.seed = seed
        self.draws = 0

    def sample(self) -> list[int]:
        """Init ids (reset-set indices) for one rollout epoch: [e0]*G + [e1]*G + ..."""
        rng = np.random.default_rng([self.seed, self.draws])
        self.draws += 1
        groups = self.num_envs // self.group_size
        # Without replacement while the reset set is large enough, so groups differ.
        entries = rng.choice(self.num_entries, size=groups, replace=groups > self.num_entries)
        return [int(e) for e in np.repeat(entries, self.group_size)]

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "draws": self.draws}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.seed, self.draws = int(state["seed"]), int(state["draws"])
