"""Whether a reward model judges the same on two devices: its success probability for every
frame of stored episodes on each, the largest and mean difference, and the frames whose call
changes side of the threshold.

    python experiments/verdict-under-rl/judge_devices.py --reward-model RM --data STORE
        [--devices cpu cuda] [-n EPISODES_PER_TASK] [--threshold T]

RM is a `wmrl train-reward` run or model directory (or an RLinf `.pth`); the threshold is the
one RL would judge with (`--threshold`, else the model's own). A policy trained in imagination
on one device and evaluated on another should see the same verdicts; a difference here would
say the device, not the training, moved them. Results: docs/results.md#the-verdict-under-rl.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.reward_eval import labelled_frames, score_frames
from wmrl_cli.rewards.calibration import judge_threshold
from wmrl_cli.rewards.loading import load_reward_model, reward_model_source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward-model", required=True)
    parser.add_argument("--data", required=True, help="an episode store")
    parser.add_argument("--devices", nargs=2, default=["cpu", "cuda"], metavar="DEVICE")
    parser.add_argument("-n", "--episodes-per-task", type=int, default=None)
    parser.add_argument("--threshold", type=float, default=None)
    args = parser.parse_args()
    for device in args.devices:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise WmrlError(f"device {device!r} is not available here (no CUDA device)")

    store = EpisodeStore.open(args.data)
    data = labelled_frames(store, store.first_per_task(args.episodes_per_task))
    directory = reward_model_source(Path(args.reward_model))
    model = load_reward_model(directory)
    threshold, source = judge_threshold(args.threshold, model, directory)
    scores = []
    for device in args.devices:
        model.to(device)
        scores.append(score_frames(model, data))
    a, b = scores
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    flipped = int(((a >= threshold) != (b >= threshold)).sum())
    print(f"{len(diff)} frames of {len(store)} episodes; threshold {threshold:.4g} ({source})")
    print(
        f"{args.devices[0]} vs {args.devices[1]}: largest difference {diff.max():.2e}, "
        f"mean {diff.mean():.2e}; frames whose call changes side: {flipped}"
    )


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path, model or device: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
