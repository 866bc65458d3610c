"""Experiment trackers beside TensorBoard and metrics.jsonl: Weights & Biases and Trackio, through
Accelerate's tracker classes (`logging.trackers`, `--log-with`).

A run logs the same scalars under the same names to every tracker it was given, from the main
process only, and the media it makes anyway (evaluation videos, the co-evolve report's plots) as
each tracker's own images and videos (`log_media`). Where none is chosen, no tracker package is
imported and nothing leaves the machine; where one is chosen, its own settings apply as its
users know them (`WANDB_MODE=offline`, `WANDB_PROJECT`, `wandb login`; Trackio's local
dashboard).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from wmrl_cli.errors import ConfigError

TRACKERS = ("wandb", "trackio")  # besides TensorBoard, which `logging.tensorboard` switches
PROJECT = "wmrl"  # the project a run is logged under unless the tracker's own setting says


def parse_log_with(text: str) -> tuple[bool, list[str]]:
    """`--log-with tensorboard,wandb` -> (TensorBoard on, the other trackers), in one line
    naming what is wrong and what is expected."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ("tensorboard", *TRACKERS)]
    if unknown or not names:
        raise ConfigError(
            f"--log-with {text!r}: expected a comma-separated list of tensorboard, "
            + ", ".join(TRACKERS)
        )
    return "tensorboard" in names, [name for name in TRACKERS if name in names]


def check_trackers(names: list[str]) -> None:
    """A chosen tracker whose package is not installed stops the run before it starts."""
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise ConfigError(
                f"logging.trackers: {name} is not installed; pip install {name} (or "
                "'wmrl[trackers]'), or leave it out of --log-with"
            )


def open_trackers(names: list[str], run_dir: Path, config: dict[str, Any] | None = None) -> list:
    """Accelerate's trackers for `names`, started, with the run's resolved configuration: the
    run named after its directory, W&B's files under it (RUN/wandb)."""
    from accelerate import PartialState
    from accelerate.tracking import TrackioTracker, WandBTracker

    check_trackers(names)
    PartialState()  # Accelerate's trackers ask it which process is the main one
    trackers = []
    for name in names:
        if name == "wandb":
            project = os.environ.get("WANDB_PROJECT", PROJECT)
            tracker = WandBTracker(project, name=run_dir.name, dir=str(run_dir))
        else:
            tracker = TrackioTracker(PROJECT, name=run_dir.name)
        tracker.start()
        if config:
            tracker.store_init_configuration(config)
        trackers.append(tracker)
    return trackers


def log_media(
    trackers: list,
    step: int,
    images: dict[str, Path] | None = None,
    videos: dict[str, Path] | None = None,
) -> None:
    """PNG images and GIF or mp4 videos, each a file, to every tracker at `step` under the tags
    given, as the tracker's own media: wandb.Image / wandb.Video (the video's bytes, so that
    W&B keeps a copy of its own wherever it would link a file), trackio.Image / trackio.Video.
    Through each Accelerate tracker's `log`, which only the main process runs."""
    import io

    for tracker in trackers:
        if tracker.name == "wandb":
            import wandb

            values: dict[str, Any] = {k: wandb.Image(str(p)) for k, p in (images or {}).items()}
            for tag, path in (videos or {}).items():
                data = io.BytesIO(Path(path).read_bytes())
                values[tag] = wandb.Video(data, format=Path(path).suffix.lstrip("."))
        else:
            import trackio

            values = {k: trackio.Image(str(p)) for k, p in (images or {}).items()}
            values.update({k: trackio.Video(str(p)) for k, p in (videos or {}).items()})
        if values:
            tracker.log(values, step=step)


def tracked(cfg: Any) -> dict[str, Any]:
    """MetricsLogger's tracker arguments for a run config: its trackers and, where there are
    any, its resolved configuration to store with them."""
    names = list(cfg.logging.trackers)
    return {"trackers": names, "config": cfg.model_dump(mode="json") if names else None}
