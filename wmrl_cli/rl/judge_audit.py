"""Per-task audit of the learned judge on the policy's own RL rollouts.

With `reward_model.audit_with_simulator` (the judge gives the reward, the simulator replays the
same actions) or `reward_model.source=simulator` beside a reward model (the simulator gives the
reward, the judge only watches), every training episode has two verdicts. The per-step metrics
`env/model_*` average them over all tasks; this tally keeps them per task over the whole run,
which is where reward hacking shows: a task whose judged successes climb while its real ones
do not (docs/results.md#the-verdict-under-rl: button-press-topdown, judged 8 of 10, real 0 of
10).

With a single-frame judge the audit also scores the simulator's frame where the judge called
success (envs/simulator_judged.py): a false call whose real frame passes too is the judge's
error (`fp_on_real_frame`), one whose real frame does not is the world model drawing a success
the simulator does not reach (`fp_imagined_only`).

Written to `RUN/judge_audit.json` at the end of training and carried in checkpoints, so that
a resumed run counts every step once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.evaluation.intervals import format_rate, wilson_interval
from wmrl_cli.files import atomic_write_text

# columns of the tally: judge and simulator agree on success / the judge alone calls success /
# the simulator alone sees it / neither
COUNTS = ("tp", "fp", "fn", "tn")
TRAINING_TITLE = "the judge on the policy's own training episodes (simulator replay)"


class JudgeAudit:
    """Counts [num_tasks, 4] of (judge verdict, real verdict) per training episode."""

    def __init__(self, task_names: list[str]) -> None:
        self.task_names = list(task_names)
        self.counts = np.zeros((len(self.task_names), len(COUNTS)), dtype=np.int64)
        # per task: false calls whose real frame the judge passes too (None: not recorded)
        self.fp_on_real_frame: np.ndarray | None = None
        # the simulator steps its replays took, where the caller counts them (eval --audit)
        self.real_steps: int | None = None

    def add(
        self,
        task_ids: np.ndarray,
        judged: np.ndarray,
        real: np.ndarray,
        real_frame_passes: np.ndarray | None = None,
        real_steps: int | None = None,
    ) -> None:
        """One rollout's episodes: task ids [B], the judge's and the simulator's success [B],
        whether the judge passes the simulator's frame where it called success [B], and the
        simulator steps their replays took."""
        if real_steps is not None:
            self.real_steps = (self.real_steps or 0) + int(real_steps)
        task_ids = np.asarray(task_ids, dtype=np.int64)
        judged, real = np.asarray(judged, dtype=bool), np.asarray(real, dtype=bool)
        if task_ids.size and task_ids.max() >= len(self.task_names):  # an env without names
            extra = range(len(self.task_names), int(task_ids.max()) + 1)
            self.task_names += [f"task {i}" for i in extra]
            self.counts = np.pad(self.counts, ((0, len(extra)), (0, 0)))
            if self.fp_on_real_frame is not None:
                self.fp_on_real_frame = np.pad(self.fp_on_real_frame, (0, len(extra)))
        column = np.where(judged, np.where(real, 0, 1), np.where(real, 2, 3))
        np.add.at(self.counts, (task_ids, column), 1)
        if real_frame_passes is not None:
            if self.fp_on_real_frame is None:
                self.fp_on_real_frame = np.zeros(len(self.task_names), dtype=np.int64)
            on_real = judged & ~real & np.asarray(real_frame_passes, dtype=bool)
            np.add.at(self.fp_on_real_frame, task_ids[on_real], 1)

    @property
    def episodes(self) -> int:
        return int(self.counts.sum())

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"task_names": self.task_names, "counts": self.counts.tolist()}
        if self.fp_on_real_frame is not None:
            state["fp_on_real_frame"] = self.fp_on_real_frame.tolist()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["task_names"]) != self.task_names:
            return  # another suite's tally (a changed reset set): start counting afresh
        self.counts = np.asarray(state["counts"], dtype=np.int64).reshape(self.counts.shape)
        if "fp_on_real_frame" in state:
            self.fp_on_real_frame = np.asarray(state["fp_on_real_frame"], dtype=np.int64)

    def summary(self) -> dict[str, Any]:
        """Per task and overall: the counts, the judge's precision and recall on these
        episodes, the judged and real success rates and, where recorded, the false calls
        split by whether the judge passes the real frame too."""
        on_real = self.fp_on_real_frame
        rows = {
            name: _rates(self.counts[i], None if on_real is None else int(on_real[i]))
            for i, name in enumerate(self.task_names)
        }
        total = None if on_real is None else int(on_real.sum())
        summary = {"tasks": rows, "overall": _rates(self.counts.sum(0), total)}
        if self.real_steps is not None:
            summary["real_steps"] = self.real_steps
        return summary

    def write(self, run_dir: str | Path) -> Path:
        """RUN/judge_audit.json, through a temporary file."""
        path = Path(run_dir) / "judge_audit.json"
        atomic_write_text(path, json.dumps(self.summary(), indent=1))
        return path

    def table(self, title: str = TRAINING_TITLE):
        """A rich table: per task, episodes, judged vs real success, precision, recall."""
        from rich.table import Table

        table = Table(title=title)
        split = self.fp_on_real_frame is not None
        columns = ["task", "episodes", "judged", "real", "TP/FP/FN/TN", "precision", "recall"]
        for col in columns + (["FP on real frame / imagined only"] if split else []):
            table.add_column(col, justify="left" if col == "task" else "right")
        summary = self.summary()
        for name, row in [*summary["tasks"].items(), ("overall", summary["overall"])]:
            if not row["episodes"]:
                continue
            cells = [
                name,
                str(row["episodes"]),
                f"{row['judged_rate']:.1%}",
                f"{row['real_rate']:.1%}",
                "/".join(str(row[k]) for k in COUNTS),
                format_rate(row["precision"], row["precision_interval"]),
                format_rate(row["recall"]),
            ]
            if split:
                cells.append(f"{row['fp_on_real_frame']} / {row['fp_imagined_only']}")
            table.add_row(*cells)
        return table


def _rates(counts: np.ndarray, fp_on_real_frame: int | None = None) -> dict[str, Any]:
    tp, fp, fn, tn = (int(c) for c in counts)
    n = tp + fp + fn + tn
    rates = {
        **dict(zip(COUNTS, (tp, fp, fn, tn))),
        "episodes": n,
        "precision": tp / (tp + fp) if tp + fp else None,
        # Wilson 95%: a few dozen calls leave precision uncertain by +-0.1 or more
        "precision_interval": list(wilson_interval(tp, tp + fp)) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        # the verdict's agreement with the replays in one number (co-evolve's acceptance)
        "f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else None,
        "judged_rate": (tp + fp) / n if n else 0.0,
        "real_rate": (tp + fn) / n if n else 0.0,
    }
    if fp_on_real_frame is not None:
        rates["fp_on_real_frame"] = fp_on_real_frame
        rates["fp_imagined_only"] = fp - fp_on_real_frame
    return rates


def trusted_tasks(tasks: dict[str, dict[str, Any]], floor: float) -> list[str]:
    """The tasks of an audit's per-task rows (`JudgeAudit.summary()["tasks"]`) whose verdict RL
    may train on: true on at least `floor` of the successes it called. A task the judge called
    no success on is kept: nothing speaks against it, and its groups, all judged failures, carry
    no gradient until the verdict calls one. docs/results.md#co-evolution: button-press-topdown's
    calls were false 18 of 23 times under RL, and the policy lost 10-30 points on it in five of
    six runs."""
    return [
        name for name, row in tasks.items() if row["precision"] is None or row["precision"] >= floor
    ]
