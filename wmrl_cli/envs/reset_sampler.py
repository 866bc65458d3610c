"""Group-aware reset sampling for GRPO: each group of `group_size` envs shares one initial state.

Every rollout epoch draws `num_envs / group_size` reset entries and repeats each `group_size`
times (RLinf's rule).

Two ways to draw the entries:
- `uniform` (RLinf, WMPO): entries uniformly, without replacement while there are enough.
- `varied_outcome`: first a task, with probability proportional to the chance that a group of
  that task ends with varied outcomes (the groups GRPO keeps: 1 - p^G - (1 - p)^G for the
  task's current success rate p), plus a floor so that no task is abandoned; then an entry of
  that task uniformly. p is the posterior mean of a Beta(1, 1) prior updated with the training
  rollouts' outcomes (`observe`), discounted by `decay` per observation so that it follows the
  improving policy. Groups of solved or hopeless tasks carry no gradient (zero advantage) and
  are filtered anyway, so this spends the rollouts where the signal is: a prioritized
  curriculum in the spirit of WMPO's and DAPO's dynamic sampling, without discarding rollouts.

`tasks` restricts both to the entries of some tasks (`algorithm.train_tasks`): co-evolve's
per-task trust leaves out the tasks whose imagined verdict an audit found mostly false
(coevolve/pipeline.py), and a user can train on a subset of a suite without a new reset set.

The sampler's state is a seed, a counter and (varied_outcome) the per-task counts, so a
resumed run draws the same initial states as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wmrl_cli.errors import ConfigError

SAMPLING_MODES = ("uniform", "varied_outcome")


def varied_outcome_probability(p: np.ndarray, group_size: int) -> np.ndarray:
    """P(a group of G independent episodes with success rate p has both outcomes)."""
    return 1.0 - p**group_size - (1.0 - p) ** group_size


def task_ids(names: Sequence[str], task_names: Sequence[str]) -> list[int]:
    """The env's task ids of `names` (algorithm.train_tasks)."""
    unknown = [name for name in names if name not in task_names]
    if unknown:
        raise ConfigError(
            f"unknown task {', '.join(map(repr, unknown))} in algorithm.train_tasks: expected "
            f"names of this env's tasks ({', '.join(task_names)})"
        )
    return [list(task_names).index(name) for name in names]


class GroupResetSampler:
    def __init__(
        self,
        num_entries: int,
        num_envs: int,
        group_size: int,
        seed: int = 0,
        mode: str = "uniform",
        entry_tasks: Sequence[int] | None = None,
        decay: float = 0.9,
        floor: float = 0.05,
        tasks: Sequence[int] | None = None,
    ) -> None:
        if num_entries < 1:
            raise ConfigError("the reset set is empty: expected at least one initial state")
        if group_size < 1 or num_envs % group_size:
            raise ConfigError(
                f"invalid value for 'algorithm.group_size': {group_size} must divide "
                f"the number of envs ({num_envs})"
            )
        if mode not in SAMPLING_MODES:
            raise ConfigError(f"unknown reset sampling {mode!r}: expected one of {SAMPLING_MODES}")
        needs_tasks = mode == "varied_outcome" or tasks is not None
        if needs_tasks and (entry_tasks is None or len(entry_tasks) != num_entries):
            what = "varied_outcome sampling" if tasks is None else "algorithm.train_tasks"
            raise ConfigError(f"{what} needs the task of every reset entry")
        # the entries groups may start from: all, or those of `tasks`
        self.allowed = np.arange(num_entries)
        if tasks is not None:
            self.allowed = np.flatnonzero(np.isin(np.asarray(entry_tasks), list(tasks)))
            if not self.allowed.size:
                raise ConfigError(
                    f"the reset set holds no initial state of the tasks {sorted(tasks)} "
                    "(algorithm.train_tasks): expected at least one"
                )
        self.num_entries = num_entries
        self.num_envs = num_envs
        self.group_size = group_size
        self.seed = seed
        self.mode = mode
        self.decay, self.floor = decay, floor
        self.draws = 0
        if mode == "varied_outcome":
            self.entry_tasks = np.asarray(entry_tasks, dtype=np.int64)
            self.tasks = np.unique(self.entry_tasks[self.allowed])  # the tasks groups draw
            self.task_index = np.searchsorted(self.tasks, self.entry_tasks)  # entry -> position
            self.entries_of = {int(t): np.flatnonzero(self.entry_tasks == t) for t in self.tasks}
            self.successes = np.zeros(len(self.tasks))
            self.trials = np.zeros(len(self.tasks))

    def task_weights(self) -> np.ndarray:
        """Sampling probability of each task in `self.tasks` (varied_outcome)."""
        p = (self.successes + 1.0) / (self.trials + 2.0)
        w = varied_outcome_probability(p, self.group_size) + self.floor
        return w / w.sum()

    def sample(self) -> list[int]:
        """Init ids (reset-set indices) for one rollout epoch: [e0]*G + [e1]*G + ..."""
        rng = np.random.default_rng([self.seed, self.draws])
        self.draws += 1
        groups = self.num_envs // self.group_size
        if self.mode == "uniform":
            # Without replacement while the reset set is large enough, so groups differ.
            n = self.allowed.size
            entries = self.allowed[rng.choice(n, size=groups, replace=groups > n)]
        else:
            tasks = rng.choice(self.tasks, size=groups, p=self.task_weights())
            entries = np.array([rng.choice(self.entries_of[int(t)]) for t in tasks])
        return [int(e) for e in np.repeat(entries, self.group_size)]

    def observe(self, init_ids: Sequence[int], success: Sequence[bool]) -> None:
        """Update the per-task success counts with one step's training outcomes (every rank's,
        in the same order on every rank, so that all ranks keep one state)."""
        if self.mode != "varied_outcome":
            return
        self.successes *= self.decay
        self.trials *= self.decay
        k = self.task_index[np.asarray(init_ids, dtype=np.int64)]
        np.add.at(self.trials, k, 1.0)
        np.add.at(self.successes, k, np.asarray(success, dtype=np.float64))

    def state_dict(self) -> dict:
        state: dict = {"seed": self.seed, "draws": self.draws}
        if self.mode == "varied_outcome":
            state["successes"] = self.successes.tolist()
            state["trials"] = self.trials.tolist()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.seed, self.draws = int(state["seed"]), int(state["draws"])
        if self.mode == "varied_outcome" and "successes" in state:
            self.successes = np.asarray(state["successes"], dtype=np.float64)
            self.trials = np.asarray(state["trials"], dtype=np.float64)
