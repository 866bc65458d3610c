"""Success thresholds for reward models: precision, recall and F1 on held-out labelled scores.

WMPO picks each task's VideoMAE threshold by the best F1 on held-out clips; RLinf thresholds the
ResNet score at success_reward_threshold. A score counts as predicted success when
score >= threshold; an episode, when its scores have reached the threshold on `success_frames`
consecutive frames (`held_success`, `held_score`; 1 frame: RLinf's rule).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.errors import WmrlError


@dataclass(frozen=True)
class BinaryMetrics:
    """Confusion counts and precision / recall / F1 at one threshold (0 where undefined, as
    scikit-learn's zero_division=0 that WMPO uses)."""

    threshold: float
    precision: float
    recall: float
    f1: float
    tp: int
    fp: int
    fn: int
    tn: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _to_numpy(values: np.ndarray | torch.Tensor | list) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)


def _as_arrays(
    scores: np.ndarray | torch.Tensor | list[float], labels: np.ndarray | torch.Tensor | list
) -> tuple[np.ndarray, np.ndarray]:
    s = _to_numpy(scores).astype(np.float64).reshape(-1)
    y = _to_numpy(labels).astype(np.float64).reshape(-1)
    if s.size == 0 or s.size != y.size:
        raise WmrlError(f"need as many labels as scores, at least one (got {s.size}, {y.size})")
    if not np.isin(y, (0.0, 1.0)).all():
        raise WmrlError("labels must be 0 (failure) or 1 (success)")
    if not np.isfinite(s).all():
        raise WmrlError("reward scores contain NaN or infinity")
    return s, y.astype(bool)


def _metrics(threshold: float, tp: int, fp: int, fn: int, tn: int) -> BinaryMetrics:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return BinaryMetrics(float(threshold), precision, recall, f1, tp, fp, fn, tn)


def binary_metrics(
    scores: np.ndarray | torch.Tensor | list[float],
    labels: np.ndarray | torch.Tensor | list,
    threshold: float,
) -> BinaryMetrics:
    """Precision = TP / (TP + FP), recall = TP / (TP + FN), F1 = 2PR / (P + R), predicting
    success where score >= threshold."""
    s, y = _as_arrays(scores, labels)
    pred = s >= threshold
    tp = int((pred & y).sum())
    fp = int((pred & ~y).sum())
    fn = int((~pred & y).sum())
    return _metrics(threshold, tp, fp, fn, int(y.size) - tp - fp - fn)


def best_f1_threshold(
    scores: np.ndarray | torch.Tensor | list[float], labels: np.ndarray | torch.Tensor | list
) -> BinaryMetrics:
    """The threshold with the highest F1 on held-out (scores, labels), with its metrics.

    Every distinct score is a candidate cut (score >= s predicts success), which covers every
    distinct prediction the data allow. Among cuts of equal F1 the highest wins (fewer false
    successes in imagination). The threshold returned is the midpoint between the winning score
    and the next lower distinct score, which gives the same predictions on this data with a
    margin on both sides; it is the winning score itself when no lower score exists.
    """
    s, y = _as_arrays(scores, labels)
    if not y.any():
        raise WmrlError("held-out labels contain no success: F1 is undefined at every threshold")
    order = np.argsort(-s, kind="stable")
    s_sorted, y_sorted = s[order], y[order]
    tp_cum = np.cumsum(y_sorted)
    fp_cum = np.cumsum(~y_sorted)
    # last index of each run of equal scores: the cut "score >= s" includes the whole run
    ends = np.flatnonzero(np.r_[s_sorted[1:] != s_sorted[:-1], True])
    tp, fp = tp_cum[ends], fp_cum[ends]
    fn = int(y.sum()) - tp
    f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
    best = int(np.argmax(f1))  # first maximum = highest threshold among ties
    cut = s_sorted[ends[best]]
    lower = s_sorted[ends[best] + 1] if ends[best] + 1 < s.size else None
    threshold = cut if lower is None else (cut + lower) / 2.0
    return binary_metrics(s, y, float(threshold))


def cross_validated_threshold(
    scores: np.ndarray | torch.Tensor | list[float],
    labels: np.ndarray | torch.Tensor | list,
    groups: np.ndarray | list[int],
    folds: int = 2,
) -> BinaryMetrics | None:
    """Out-of-sample counts of a best-F1 threshold: the groups (episodes) are dealt into
    `folds` folds, each fold is predicted with the threshold chosen on the others, and the
    counts are summed, so no prediction uses a threshold fitted on its own label. The
    `threshold` field is the one chosen on all the data (the one to use). None when a fitting
    set holds no success (F1 undefined there)."""
    s, y = _as_arrays(scores, labels)
    g = _to_numpy(groups).reshape(-1)
    if g.size != s.size:
        raise WmrlError(f"need a group per score (got {g.size} groups for {s.size} scores)")
    rank = np.unique(g, return_inverse=True)[1]
    fold = rank % folds
    counts = np.zeros(4, dtype=np.int64)
    for k in range(folds):
        fit, test = fold != k, fold == k
        if not test.any():
            continue
        if not y[fit].any():
            return None
        held = binary_metrics(s[test], y[test], best_f1_threshold(s[fit], y[fit]).threshold)
        counts += (held.tp, held.fp, held.fn, held.tn)
    return _metrics(best_f1_threshold(s, y).threshold, *(int(c) for c in counts))


def held_success(
    scores: np.ndarray, threshold: float, frames: int, run: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Frame-by-frame success calls [B,T] for scores [B,T]: a frame is a success when it and the
    `frames - 1` frames before it all score >= threshold. `run` [B] holds how many consecutive
    frames reached the threshold up to the first of these (the previous chunk's); returns the
    calls and the runs after the last frame. frames=1: scores >= threshold."""
    runs = np.empty(scores.shape, dtype=np.int64)
    current = np.asarray(run, dtype=np.int64)
    for t in range(scores.shape[1]):
        current = np.where(scores[:, t] >= threshold, current + 1, 0)
        runs[:, t] = current
    return runs >= frames, current


def held_score(scores: np.ndarray, frames: int, starts: np.ndarray | None = None) -> np.ndarray:
    """The highest threshold at which an episode's scores [..., T] are called a success under
    `held_success`: the best over windows of `frames` consecutive frames of the window's lowest
    score (-inf where T < frames). frames=1: the highest score. `starts` [..., T] (bool): only
    the windows that begin at a true frame count (a run begun inside a compared span may end
    after it)."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.shape[-1] < frames:
        return np.full(scores.shape[:-1], -np.inf)
    lowest = np.lib.stride_tricks.sliding_window_view(scores, frames, axis=-1).min(axis=-1)
    if starts is not None:
        lowest = np.where(np.asarray(starts, dtype=bool)[..., : lowest.shape[-1]], lowest, -np.inf)
    return lowest.max(axis=-1)


# -- which threshold judges --------------------------------------------------------------------

RLINF_THRESHOLD = 0.9  # RLinf's success_reward_threshold, for a model that records none
METRICS_FILE = "reward_metrics.json"  # what `wmrl train-reward` writes beside the model


def judge_threshold(
    configured: float | None, reward_model: object | None, model_dir: Path | None = None
) -> tuple[float, str]:
    """The judge's success threshold and where it came from: `reward_model.success_threshold`,
    else the reward model's own (a wmrl model records in reward_metrics.json whether it was set
    on frames or on a policy's imagined episodes labelled by the simulator), else RLinf's 0.9.

    RL, `eval --world-model`, `eval --reward-model` and co-evolve's check all resolve it here,
    so a report measures the verdict a run with the same configuration would use. A threshold
    set on frames judges episodes at a lower precision than one set on episodes
    (docs/results.md#labelled-imagined-episodes); the source says which."""
    if configured is not None:
        return float(configured), "reward_model.success_threshold"
    own = getattr(reward_model, "threshold", None)
    if own is None:
        return RLINF_THRESHOLD, "RLinf's default; the reward model records none"
    metrics = model_dir / METRICS_FILE if model_dir is not None and model_dir.is_dir() else None
    try:
        set_on = json.loads(metrics.read_text()).get("threshold_from") if metrics else None
    except (OSError, json.JSONDecodeError, AttributeError):
        set_on = None
    where = {
        "policy_episodes": "set on held-out imagined policy episodes",
        "frames": "set on held-out frames, not on episodes",
    }.get(set_on, "recorded in its config")
    return float(own), f"the reward model's own, {where}"


def raw_score_threshold(threshold: float, round_scores: bool) -> float:
    """The threshold on the raw success probability p that gives the verdict `threshold` gives
    on the scores the judge sees. With RLinf's rounding (`round_scores`: p -> 1 where p > 0.5)
    any threshold in (0, 1] means p > 0.5, i.e. p >= the float32 just above 0.5 (the scores'
    precision: a float64 one would round to 0.5 in a comparison with float32 scores)."""
    if not round_scores:
        return threshold
    if threshold <= 0.0:
        return -math.inf
    if threshold > 1.0:
        return math.inf
    return float(np.nextafter(np.float32(0.5), np.float32(1.0)))
