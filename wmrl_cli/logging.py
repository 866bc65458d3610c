"""Console, progress bars and metric sinks shared by every command and trainer.

Metrics go to TensorBoard (under the run directory) and to `metrics.jsonl`, one JSON object
per logged step, so that runs can be compared without TensorBoard.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

console = Console(stderr=False)
err_console = Console(stderr=True)

T = TypeVar("T")


def make_progress(enabled: bool = True) -> Progress:
    return Progress(
        TextColumn("[bold blue]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=not enabled,
        transient=not sys.stderr.isatty(),
    )


@contextmanager
def progress_task(description: str, total: int, enabled: bool = True) -> Iterator[Any]:
    """A progress bar for one loop; yields a callable `advance(n=1)`."""
    with make_progress(enabled) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n=1: progress.advance(task, n)


def track(items: Iterable[T], description: str, total: int, enabled: bool = True) -> Iterator[T]:
    with progress_task(description, total, enabled) as advance:
        for item in items:
            yield item
            advance()


def _scalar(value: Any) -> float | None:
    try:
        number = float(np.asarray(value).item()) if not isinstance(value, float) else value
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class MetricsLogger:
    """TensorBoard events + metrics.jsonl in `run_dir`; only the main process writes.

    `real_steps`: the real environment steps behind a run that trains on stored data (its
    episode store's), logged with every row as `env/real_steps` (docs/cli.md).
    """

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        enabled: bool = True,
        real_steps: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.real_steps = real_steps
        self._writer = None
        if enabled:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._jsonl = (self.run_dir / "metrics.jsonl").open("a")
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if not self.enabled:
            return
        clean = {k: v for k, v in ((k, _scalar(v)) for k, v in metrics.items()) if v is not None}
        if self.real_steps is not None:
            clean.setdefault("env/real_steps", float(self.real_steps))
        self._jsonl.write(json.dumps({"step": int(step), **clean}) + "\n")
        self._jsonl.flush()
        if self._writer is not None:
            for key, value in clean.items():
                self._writer.add_scalar(key, value, int(step))

    def log_video(self, tag: str, frames: np.ndarray, step: int, fps: int = 10) -> None:
        """frames uint8 [N,T,H,W,3]: the N clips side by side, as an animated GIF in
        TensorBoard's image tab (what `add_video` produces, without its moviepy dependency)."""
        if not (self.enabled and self._writer is not None):
            return
        import imageio.v2 as imageio
        from tensorboard.compat.proto.summary_pb2 import Summary

        clips = np.ascontiguousarray(frames, dtype=np.uint8)
        strip = np.concatenate(list(clips), axis=2)  # [T, H, N*W, 3]
        gif = imageio.mimwrite("<bytes>", list(strip), format="GIF", duration=1.0 / fps, loop=0)
        image = Summary.Image(
            height=strip.shape[1], width=strip.shape[2], colorspace=3, encoded_image_string=gif
        )
        self._writer._get_file_writer().add_summary(
            Summary(value=[Summary.Value(tag=tag, image=image)]), int(step)
        )

    def close(self) -> None:
        if self.enabled:
            self._jsonl.close()
            if self._writer is not None:
                self._writer.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
