"""Whether averaging reward models beats the best of them: frame precision, recall and F1 of
each model and of their mean on stored episodes, overall and per task.

    python experiments/reward-model/reward_ensemble.py --data STORE RM RM [RM ...]
        [-n EPISODES_PER_TASK]

Each RM is a `wmrl train-reward` run or model directory (or an RLinf `.pth`). Frames are
labelled as `wmrl eval --reward-model` labels them (frame t is a success when the simulator's
flag held after the action that produced it). Each model is scored at its own threshold; the
ensemble averages the success probabilities and is scored at the mean of the thresholds.
"refit F1" chooses the threshold on one half of the episodes and counts the other half, both
ways (2-fold by episode). Results: docs/results.md#history-judging-the-policys-own-frames.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.reward_eval import labelled_frames, score_frames
from wmrl_cli.rewards.calibration import binary_metrics, cross_validated_threshold, judge_threshold
from wmrl_cli.rewards.loading import load_reward_model, reward_model_source


def row(name: str, scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, threshold: float):
    at = binary_metrics(scores, labels, threshold)
    refit = cross_validated_threshold(scores, labels, groups)
    refit_f1 = "  n/a" if refit is None else f"{refit.f1:.3f}"
    print(
        f"{name:40s} threshold {threshold:8.4g}  P {at.precision:.3f}  R {at.recall:.3f}  "
        f"F1 {at.f1:.3f}  refit F1 {refit_f1}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="an episode store with real frames")
    parser.add_argument("models", nargs="+", help="reward models (two or more)")
    parser.add_argument("-n", "--episodes-per-task", type=int, default=None)
    args = parser.parse_args()
    if len(args.models) < 2:
        parser.error("an ensemble needs two or more reward models")

    store = EpisodeStore.open(args.data)
    data = labelled_frames(store, store.first_per_task(args.episodes_per_task))
    names = {int(e["task_id"]): e["task_name"] for e in store.index}
    print(f"{len(data.frames)} frames, {int(data.labels.sum())} success frames")

    all_scores, thresholds = [], []
    for path in args.models:
        directory = reward_model_source(Path(path))
        model = load_reward_model(directory)
        threshold, _ = judge_threshold(None, model, directory)
        scores = score_frames(model, data)
        row(path, scores, data.labels, data.episode_ids, threshold)
        all_scores.append(scores)
        thresholds.append(threshold)
    mean, mean_threshold = np.mean(all_scores, axis=0), float(np.mean(thresholds))
    row(f"mean of {len(args.models)}", mean, data.labels, data.episode_ids, mean_threshold)

    print("per-task F1 (models in order, then the mean):")
    for task in np.unique(data.task_ids):
        sel = data.task_ids == task
        if not data.labels[sel].any():
            continue
        f1s = [
            binary_metrics(s[sel], data.labels[sel], t).f1
            for s, t in zip([*all_scores, mean], [*thresholds, mean_threshold], strict=True)
        ]
        print(f"  {names.get(int(task), task)!s:22s} " + "  ".join(f"{f:.2f}" for f in f1s))


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path or model: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
