"""Scores of `wm_control.py --score` side by side, each against the first, paired by episode:

    python experiments/controllability/compare_scores.py NAME=OUT/score.json ... \
        [--markdown TABLE.md]

For each model: the action gap, response ratio and PSNR at h8 (means over the held-out
episodes), and the dot's centroid errors (px) at h8 and h16 with the true actions and when
tracking another episode's actions, each with its difference from the first model and the
paired bootstrap 95% interval of that difference (wmrl_cli/evaluation/intervals.py, 10,000
resamples over the same episodes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wmrl_cli.evaluation.intervals import paired_difference

MEANS = ("action_gap@8", "response_ratio@8", "psnr@8")
PAIRED = (
    "centroid_true@8",
    "centroid_tracks_other@8",
    "centroid_true@16",
    "centroid_tracks_other@16",
)


def load(spec: str) -> tuple[str, dict]:
    name, sep, path = spec.partition("=")
    if not sep or not name:
        raise ValueError(f"{spec!r}: expected NAME=PATH (a wm_control.py --score score.json)")
    try:
        score = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable score.json ({exc})") from None
    if "per_episode" not in score:
        raise ValueError(f"{path}: no per-episode errors (score it again with wm_control.py)")
    return name, score


def table(scores: list[tuple[str, dict]]) -> str:
    header = ["model", "denoiser passes a chunk", *MEANS, *PAIRED]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    first = scores[0][1]
    for name, score in scores:
        passes = score["sampling_steps"] * (2 if score["sampler_guidance"] != 1.0 else 1)
        cells = [name, str(passes)] + [f"{score[key]:.2f}" for key in MEANS]
        for key in PAIRED:
            cell = f"{score[key]:.2f}"
            if score is not first:
                d = paired_difference(first["per_episode"][key], score["per_episode"][key])
                cell += f" ({d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}])"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "scores", nargs="+", help="NAME=PATH to a score.json; the first is the reference"
    )
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    try:
        scores = [load(spec) for spec in args.scores]
        episodes = {len(s["per_episode"][PAIRED[0]]) for _, s in scores}
        if len(episodes) != 1:
            raise ValueError(f"the scores hold different numbers of episodes: {sorted(episodes)}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    text = f"{episodes.pop()} held-out episodes; differences against {scores[0][0]}\n\n"
    text += table(scores)
    print(text, end="")
    if args.markdown is not None:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
