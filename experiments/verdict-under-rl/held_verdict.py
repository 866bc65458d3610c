"""How a success verdict held for k frames reads a policy's imagined episodes: per k, the
episodes the judge calls, the precision of those calls against the simulator by the end of the
called chunk (what RL's episode ends on), and the recall of the real successes.

    python experiments/verdict-under-rl/held_verdict.py --reward-model RM --data STORE
        [--frames 1 4 8] [--threshold T ...]

STORE holds imagined episodes run to their end and labelled by the simulator, as
`wmrl rollout --world-model WM --policy P --reset-set RESET -n N` writes them (each chunk of
the policy's actions executed in the simulator from the same stored state). The judge scores
every imagined frame but the start frame, as the imagined env does; a call is the first frame
that ends a run of k frames at the threshold (`reward_model.success_frames`). A call is true
when the simulator's success flag held by the end of the chunk that frame falls in; recall
counts the episodes with a real success anywhere that were called. Thresholds: `--threshold`
(several allowed), else the model's own. Results: docs/results.md#the-verdict-under-rl.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.intervals import wilson_interval
from wmrl_cli.rewards.base import TASK_CONDITIONED
from wmrl_cli.rewards.calibration import held_success, judge_threshold
from wmrl_cli.rewards.loading import load_reward_model


def model_path(path: str) -> Path:
    """A reward-model directory or file from a run directory, a model directory or a file."""
    run_model = Path(path) / "reward_model"
    return run_model if run_model.is_dir() else Path(path)


def episode_scores(model, store: EpisodeStore) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """(scores of frames 1..T, success flags of steps 1..T, chunk size) per episode."""
    out = []
    for episode in store:
        ids = [episode.task_id] if model.kind in TASK_CONDITIONED else None
        scores = model.predict(episode.frames[None], ids)[0].cpu().numpy()[1:]
        out.append((scores, np.asarray(episode.success, bool), episode.chunk_size))
    return out


def read(episodes, threshold: float, frames: int) -> tuple[int, int, int, int]:
    """(calls, true calls, real successes, real successes called)."""
    calls = true_calls = real = found = 0
    for scores, success, chunk in episodes:
        called = held_success(scores[None], threshold, frames, np.zeros(1, np.int64))[0][0]
        real_any = bool(success.any())
        real += real_any
        if not called.any():
            continue
        step = int(np.argmax(called)) + 1  # frame t shows the state after step t
        chunk_end = min(-(-step // chunk) * chunk, len(success))
        calls += 1
        true_calls += bool(success[:chunk_end].any())
        found += real_any
    return calls, true_calls, real, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward-model", required=True)
    parser.add_argument("--data", required=True, help="labelled imagined episodes")
    parser.add_argument("--frames", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--threshold", type=float, nargs="+", default=None)
    args = parser.parse_args()

    store = EpisodeStore.open(args.data)
    directory = model_path(args.reward_model)
    model = load_reward_model(directory)
    thresholds = args.threshold or [judge_threshold(None, model, directory)[0]]
    episodes = episode_scores(model, store)
    real = sum(bool(success.any()) for _, success, _ in episodes)
    print(f"{len(episodes)} episodes, {real} with a real success")
    for threshold in thresholds:
        for k in args.frames:
            calls, true_calls, real, found = read(episodes, threshold, k)
            precision = true_calls / calls if calls else float("nan")
            low, high = wilson_interval(true_calls, calls) if calls else (float("nan"),) * 2
            recall = found / real if real else float("nan")
            print(
                f"threshold {threshold:.4g}  k {k:2d}  calls {calls:4d}  "
                f"precision {precision:.2f} [{low:.2f}, {high:.2f}]  recall {recall:.2f}"
            )


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path or model: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
