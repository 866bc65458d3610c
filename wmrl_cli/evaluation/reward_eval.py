"""How well a reward model detects success on stored episodes (`wmrl eval --reward-model R
--data STORE`): the question RL asks of it is whether the frames of a policy's own rollouts are
scored as the simulator labels them, not only the held-out split of its training data.

Frame t (t >= 1) is labelled a success when the simulator's success flag held after the action
that produced it; the first frame is a failure (as `wmrl train-reward` labels them). Episode
level is what success_once RL sees: an episode is predicted successful when its highest score
reaches the threshold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.intervals import wilson_interval
from wmrl_cli.files import atomic_write_text
from wmrl_cli.rewards.base import TASK_CONDITIONED
from wmrl_cli.rewards.calibration import (
    BinaryMetrics,
    best_f1_threshold,
    binary_metrics,
    cross_validated_threshold,
)


@dataclass
class LabelledFrames:
    frames: np.ndarray  # uint8 [N,H,W,3]
    labels: np.ndarray  # bool [N]
    task_ids: np.ndarray  # int64 [N]
    episode_ids: np.ndarray  # int64 [N]


def labelled_frames(store: EpisodeStore, ids: list[int]) -> LabelledFrames:
    frames, labels, tasks, episodes = [], [], [], []
    for episode_id, episode in zip(ids, store.iter_ids(ids), strict=True):
        frames.append(episode.frames)
        labels.append(np.concatenate([[False], episode.success]))
        tasks.append(np.full(len(episode.frames), episode.task_id))
        episodes.append(np.full(len(episode.frames), episode_id))
    if not frames:
        raise WmrlError(f"{store.root}: no episodes with frames to score")
    return LabelledFrames(
        np.concatenate(frames),
        np.concatenate(labels).astype(bool),
        np.concatenate(tasks).astype(np.int64),
        np.concatenate(episodes).astype(np.int64),
    )


def score_frames(model, data: LabelledFrames, batch: int = 256) -> np.ndarray:
    """Success probability of every frame (task by task for the task-conditioned ones; a clip
    model's episode by episode, each clip within its own episode)."""
    scores = np.empty(len(data.frames), dtype=np.float32)
    if model.kind == "videomae":
        for episode in np.unique(data.episode_ids):
            sel = data.episode_ids == episode
            scores[sel] = model.predict(data.frames[sel][None])[0].float().cpu().numpy()
        return scores
    tasks = np.unique(data.task_ids) if model.kind in TASK_CONDITIONED else [None]
    for task in tasks:
        sel = np.ones(len(scores), bool) if task is None else data.task_ids == task
        ids = None if task is None else [int(task)]
        scores[sel] = model.predict(data.frames[sel][None], ids, batch)[0].cpu().numpy()
    return scores


@dataclass
class RewardEvalReport:
    reward_model: str
    data: str
    threshold: float
    threshold_source: str
    episodes: int
    frames: int
    positive_frames: int
    at_threshold: BinaryMetrics  # frame level
    episode_level: BinaryMetrics  # max score per episode (after its start) vs any success
    per_task: dict[str, BinaryMetrics]  # frame level, at the threshold
    best_in_sample: BinaryMetrics | None  # the best-F1 threshold of this very data
    cross_validated: BinaryMetrics | None  # chosen on half the episodes, counted on the other
    # The imagined env's verdict (an episode's highest score against its outcome) with the
    # threshold chosen on half the episodes, counted on the other; and how well that score
    # ranks successes above failures (ROC AUC), which no threshold changes.
    episodes_cross_validated: BinaryMetrics | None = None
    episode_auc: float | None = None

    def episode_intervals(self) -> dict[str, tuple[float, float]]:
        """Wilson 95% intervals of the episode-level precision and recall (episodes are
        independent trials; frames of one episode are not)."""
        m = self.episode_level
        return {
            "precision": wilson_interval(m.tp, m.tp + m.fp),
            "recall": wilson_interval(m.tp, m.tp + m.fn),
        }

    def to_dict(self) -> dict[str, Any]:
        def metrics(m: BinaryMetrics | None) -> dict[str, Any] | None:
            return None if m is None else m.to_dict()

        return {
            "reward_model": self.reward_model,
            "data": self.data,
            "threshold": self.threshold,
            "threshold_source": self.threshold_source,
            "episodes": self.episodes,
            "frames": self.frames,
            "positive_frames": self.positive_frames,
            "frame_level": metrics(self.at_threshold),
            "episode_level": metrics(self.episode_level),
            "episode_level_interval95": {k: list(v) for k, v in self.episode_intervals().items()},
            "per_task": {task: m.to_dict() for task, m in self.per_task.items()},
            "best_in_sample": metrics(self.best_in_sample),
            "cross_validated": metrics(self.cross_validated),
            "episodes_cross_validated": metrics(self.episodes_cross_validated),
            "episode_auc": self.episode_auc,
        }

    def _rows(self) -> list[tuple[str, BinaryMetrics]]:
        rows = [
            (f"frames, threshold {self.threshold:.3f}", self.at_threshold),
            (f"episodes, threshold {self.threshold:.3f}", self.episode_level),
        ]
        if self.episodes_cross_validated is not None:
            rows.append(("episodes, threshold refit (2-fold)", self.episodes_cross_validated))
        if self.cross_validated is not None:
            rows.append(("frames, threshold refit (2-fold by episode)", self.cross_validated))
        if self.best_in_sample is not None:
            rows.append(("frames, best threshold here (in-sample)", self.best_in_sample))
        rows += [(f"  {task}", m) for task, m in self.per_task.items()]
        return rows

    def table(self) -> Table:
        table = Table(title=f"Reward model {self.reward_model} on {self.data}")
        for column in ("", "threshold", "TP/FP/FN/TN", "precision", "recall", "F1"):
            table.add_column(column, justify="left" if not column else "right")
        for name, m in self._rows():
            table.add_row(name, *_cells(m))
        return table

    def markdown(self) -> str:
        intervals = self.episode_intervals()
        lines = [
            f"# Reward model {self.reward_model} on {self.data}",
            "",
            f"{self.episodes} episodes, {self.frames} frames ({self.positive_frames} labelled "
            f"success by the simulator); threshold {self.threshold:.3f} "
            f"({self.threshold_source}).",
            "",
            "| | threshold | TP/FP/FN/TN | precision | recall | F1 |",
            "|---|---|---|---|---|---|",
        ]
        lines += [f"| {name.strip()} | " + " | ".join(_cells(m)) + " |" for name, m in self._rows()]
        p, r = intervals["precision"], intervals["recall"]
        lines += [
            "",
            f"Episode level, Wilson 95%: precision [{p[0]:.2f}, {p[1]:.2f}], recall "
            f"[{r[0]:.2f}, {r[1]:.2f}]. An episode is predicted successful when its highest "
            "frame score reaches the threshold (what success_once RL sees).",
        ]
        return "\n".join(lines) + "\n"

    def save(self, run_dir: str | Path) -> None:
        run_dir = Path(run_dir)
        atomic_write_text(run_dir / "report.json", json.dumps(self.to_dict(), indent=1))
        atomic_write_text(run_dir / "report.md", self.markdown())


def _cells(m: BinaryMetrics) -> list[str]:
    return [
        f"{m.threshold:.3f}",
        f"{m.tp}/{m.fp}/{m.fn}/{m.tn}",
        f"{m.precision:.3f}",
        f"{m.recall:.3f}",
        f"{m.f1:.3f}",
    ]


def evaluate_reward_model(
    model,
    store: EpisodeStore,
    ids: list[int],
    threshold: float,
    threshold_source: str,
    model_name: str = "",
) -> RewardEvalReport:
    data = labelled_frames(store, ids)
    scores = score_frames(model, data)
    names = {e["task_id"]: e["task_name"] for e in store.index if e.get("task_name")}
    per_task = {
        names.get(int(t), str(int(t))): binary_metrics(
            scores[data.task_ids == t], data.labels[data.task_ids == t], threshold
        )
        for t in np.unique(data.task_ids)
    }
    episodes = np.unique(data.episode_ids)
    # The episode's verdict as the imagined env gives it: its highest score after an action
    # (the start frame is never judged).
    peak = np.array([scores[_judged(data.episode_ids == e)].max() for e in episodes])
    succeeded = np.array([data.labels[data.episode_ids == e].any() for e in episodes])
    has_success = bool(data.labels.any())
    both = has_success and not succeeded.all()
    return RewardEvalReport(
        reward_model=model_name,
        data=str(store.root),
        threshold=float(threshold),
        threshold_source=threshold_source,
        episodes=len(ids),
        frames=int(data.labels.size),
        positive_frames=int(data.labels.sum()),
        at_threshold=binary_metrics(scores, data.labels, threshold),
        episode_level=binary_metrics(peak, succeeded, threshold),
        per_task=per_task,
        best_in_sample=best_f1_threshold(scores, data.labels) if has_success else None,
        cross_validated=(
            cross_validated_threshold(scores, data.labels, data.episode_ids)
            if has_success
            else None
        ),
        episodes_cross_validated=(
            cross_validated_threshold(peak, succeeded, _dealt_by_outcome(succeeded))
            if both
            else None
        ),
        episode_auc=ranking_auc(peak, succeeded) if both else None,
    )


def _judged(in_episode: np.ndarray) -> np.ndarray:
    """An episode's frames after its first (all of them for an episode of one frame)."""
    rows = np.flatnonzero(in_episode)
    return rows[1:] if len(rows) > 1 else rows


def _dealt_by_outcome(positive: np.ndarray) -> np.ndarray:
    """A rank per item, successes first, so that dealing ranks into folds (rank % folds) puts
    both outcomes in every fold where each has at least as many items as folds."""
    order = np.lexsort((np.arange(len(positive)), ~positive))
    ranks = np.empty(len(positive), dtype=np.int64)
    ranks[order] = np.arange(len(positive))
    return ranks


def ranking_auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """ROC AUC: the probability that a random positive scores above a random negative (ties
    count half)."""
    pos, neg = scores[positive], scores[~positive]
    above = (pos[:, None] > neg[None, :]).mean()
    tied = (pos[:, None] == neg[None, :]).mean()
    return float(above + 0.5 * tied)
