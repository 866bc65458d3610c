"""Console, progress bars and metric sinks shared by every command and trainer.

Metrics go to TensorBoard (under the run directory) and to `metrics.jsonl`, one JSON object
per logged step, so that runs can be compared without TensorBoard.
"""

from __future__ import annotations

import json
import math
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console, ConsoleOptions, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.segment import Segment
from rich.table import Table

# The width a table is laid out in where the output is no terminal (a log, a pipe): wider than
# any table, which then takes only the columns it needs, so a log is never cut at 80 columns
# or $COLUMNS.
LOG_TABLE_WIDTH = 10_000


class _Console(Console):
    """No table cell is ever cut with an ellipsis: where the output is no terminal a table is
    as wide as it needs (LOG_TABLE_WIDTH); on a narrow terminal cells fold onto more lines,
    and a table's first column (its key: a task, metric or preset name) stays on one line
    while the others can give up width."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        if isinstance(renderable, Table):  # tables nested in a Group come here too
            for i, column in enumerate(renderable.columns):
                if column.overflow == "ellipsis":  # rich's default
                    column.overflow = "fold"
                if i == 0 and column.width is None:
                    column.no_wrap = True
            if not self.is_terminal:
                options = (options or self.options).update_width(LOG_TABLE_WIDTH)
        return super().render(renderable, options)


# soft_wrap: a line is never broken at the console's width, so paths and numbers in batch-job
# logs stay whole.
console = _Console(stderr=False, soft_wrap=True)
err_console = _Console(stderr=True, soft_wrap=True)


def make_progress(enabled: bool = True) -> Progress:
    return Progress(
        TextColumn("[bold blue]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        # Off where stderr is no terminal (nohup, a batch scheduler): a bar there is a blank
        # line; MetricsLogger prints plain lines instead.
        disable=not (enabled and err_console.is_terminal),
    )


@contextmanager
def progress_task(
    description: str,
    total: int,
    enabled: bool = True,
    every_s: float = 30.0,
    announce: bool = False,
    completed: int = 0,
) -> Iterator[Any]:
    """A progress bar for one loop, with the time left; yields a callable `advance(n=1)`.
    Where stderr is no terminal, plain lines instead ("description: done/total, elapsed, about
    T left"), at most one per `every_s` seconds and one at the end, so that a batch job's log
    shows the loop moving; `announce`: one at the start too (a loop whose first step is long);
    `completed`: the steps a resumed loop already has, counted done but not in the pace."""
    with make_progress(enabled) as progress:
        task = progress.add_task(description, total=total, completed=completed)
        if not enabled or not progress.disable:
            yield lambda n=1: progress.advance(task, n)
            return
        start = last = time.monotonic()
        done = completed
        if announce:
            err_console.print(f"{description}: {done}/{total}")

        def advance(n: int = 1) -> None:
            nonlocal done, last
            done += n
            now = time.monotonic()
            if now - last >= every_s or done >= total:
                last = now
                line = f"{description}: {done}/{total}, {now - start:.0f} s"
                if completed < done < total:
                    pace = (now - start) / (done - completed)
                    line += f", about {_duration(pace * (total - done))} left"
                err_console.print(line)

        yield advance


def _duration(seconds: float) -> str:
    """`45 s`, `12 min`, `2.5 h`: a time left, as precise as an estimate is."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def track_batches(starts: range, description: str, enabled: bool = True) -> Iterator[int]:
    """The batch starts of `range(0, n, batch)`, with progress counted in items (a batch of B
    advances B, the last its remainder) and announced at the start: a loop over a few long
    batches (the world-model check's episodes) shows its share done and the time left."""
    total = len(range(starts.start, starts.stop))
    with progress_task(description, total, enabled, announce=True) as advance:
        for start in starts:
            yield start
            advance(min(starts.step, starts.stop - start))


def _scalar(value: Any) -> float | None:
    try:
        number = float(np.asarray(value).item()) if not isinstance(value, float) else value
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# The metrics a plain log line shows (by the last part of their name), beside step and speed.
_HEADLINE = ("loss", "autoencoder_loss", "success_once", "return", "f1")


def read_metric_rows(run_dir: Path) -> list[dict[str, Any]]:
    """A run's metrics.jsonl rows, in order (none where it has none; a torn line skipped: a
    run killed during a write, or one still writing)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def truncate_metrics(
    path: Path, last_step: int, keep: Callable[[dict[str, Any]], bool] | None = None
) -> list[dict[str, Any]]:
    """Keep the rows of a metrics.jsonl up to `last_step` (a resumed run logs the later steps
    again), and those after it for which `keep(row)` holds (a stage the resumed run does not
    repeat, whose steps overlap); a torn last line (a kill during a write) goes too. Returns
    the rows kept after `last_step`."""
    if not path.is_file():
        return []
    kept, later = [], []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(row, dict):
            continue
        if int(row.get("step", 0)) <= last_step:
            kept.append(line)
        elif keep is not None and keep(row):
            kept.append(line)
            later.append(row)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(f"{line}\n" for line in kept))
    tmp.replace(path)
    return later


# Loggers not yet closed: a run that fails with a user error is closed before its run directory
# is removed (TensorBoard's writer thread would otherwise write into a deleted folder).
_OPEN_LOGGERS: weakref.WeakSet[MetricsLogger] = weakref.WeakSet()


def close_open_loggers() -> None:
    for logger in list(_OPEN_LOGGERS):
        logger.close()


GIF_FRAMES = 150  # the most frames of a video in TensorBoard (a GIF holds every frame whole)


def _gif(frames: np.ndarray, fps: float) -> bytes:
    """frames uint8 [T,H,W,3] as an animated GIF that loops."""
    import imageio.v2 as imageio

    clip = list(np.ascontiguousarray(frames, dtype=np.uint8))
    return imageio.mimwrite("<bytes>", clip, format="GIF", duration=1.0 / fps, loop=0)


def _read_frames(path: Path) -> np.ndarray:
    """An mp4's frames, uint8 [T,H,W,3] (imageio-ffmpeg's ffmpeg)."""
    import imageio_ffmpeg

    frames = imageio_ffmpeg.read_frames(str(path))
    width, height = next(frames)["size"]
    return np.stack([np.frombuffer(raw, np.uint8).reshape(height, width, 3) for raw in frames])


class MetricsLogger:
    """TensorBoard events + metrics.jsonl in `run_dir`, and the same scalars to `trackers`
    (W&B, Trackio: wmrl_cli/trackers.py, with the run's `config`); only the main process writes.

    `real_steps`: the real environment steps behind a run that trains on stored data (its
    episode store's), logged with every row as `env/real_steps` (docs/cli.md).
    `jsonl`: False where a run logs media alone (co-evolve's report: no metrics.jsonl).
    `resume_step`: the step a run (re)starts from; the rows and TensorBoard events after it,
    written by an interrupted attempt, are dropped so that no step is logged twice, except the
    rows for which `keep_rows(row)` holds (written to TensorBoard again after its purge).
    Where stdout is no terminal (batch jobs), a plain line (step, loss, success, seconds per
    step) is printed at most every `log_every` steps.
    """

    def __init__(
        self,
        run_dir: str | Path,
        tensorboard: bool = True,
        enabled: bool = True,
        real_steps: int | None = None,
        resume_step: int | None = None,
        log_every: int = 10,
        total: int | None = None,
        keep_rows: Callable[[dict[str, Any]], bool] | None = None,
        trackers: list[str] | None = None,
        config: dict[str, Any] | None = None,
        jsonl: bool = True,
    ):
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.real_steps = real_steps
        self.log_every = max(1, log_every)
        self.total = total
        self._label = ""  # names the stage in plain lines where a run trains two in a row
        self._printed: tuple[int, float] | None = None  # (step, time) of the last plain line
        self._start = (resume_step or 0, time.time())
        self._writer = None
        self._trackers: list = []  # W&B, Trackio (wmrl_cli/trackers.py)
        self._scratch: Any = None  # the GIFs handed to trackers (_scratch_file)
        self._paused = False
        self._closed = False
        if enabled:
            _OPEN_LOGGERS.add(self)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            later: list[dict[str, Any]] = []
            if resume_step is not None:
                path = self.run_dir / "metrics.jsonl"
                later = truncate_metrics(path, resume_step, keep_rows)
            self._jsonl = (self.run_dir / "metrics.jsonl").open("a") if jsonl else None
            if tensorboard:
                from torch.utils.tensorboard import SummaryWriter

                purge = None if resume_step is None else resume_step + 1
                self._writer = SummaryWriter(
                    log_dir=str(self.run_dir / "tensorboard"), purge_step=purge
                )
                for row in later:  # the purge drops every tag's events after resume_step
                    for key, value in row.items():
                        if key != "step" and isinstance(value, (int, float)):
                            self._writer.add_scalar(key, value, int(row["step"]))
            if trackers:
                from wmrl_cli.trackers import open_trackers

                self._trackers = open_trackers(trackers, self.run_dir, config)

    def begin_stage(self, label: str, total: int) -> None:
        """Plain lines from here on count a stage of its own (`label step N/total`), its steps
        from 0: a run that trains two models in a row (train-wm: the autoencoder, then the
        denoiser) says which one a line is about and how far it has to go."""
        self._label, self.total = label, total
        self._printed, self._start = None, (0, time.time())

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Nothing is logged inside (a result recomputed that the log already holds)."""
        self._paused, before = True, self._paused
        try:
            yield
        finally:
            self._paused = before

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if not self.enabled or self._paused:
            return
        clean = {k: v for k, v in ((k, _scalar(v)) for k, v in metrics.items()) if v is not None}
        if self.real_steps is not None:
            clean.setdefault("env/real_steps", float(self.real_steps))
        try:  # a torn last line (a full disk) is dropped by truncate_metrics on resume
            if self._jsonl is not None:
                self._jsonl.write(json.dumps({"step": int(step), **clean}) + "\n")
                self._jsonl.flush()
        except OSError as exc:
            from wmrl_cli.files import write_failed

            raise write_failed(self.run_dir / "metrics.jsonl", exc) from None
        if self._writer is not None:
            for key, value in clean.items():
                self._writer.add_scalar(key, value, int(step))
        for tracker in self._trackers:
            tracker.log(clean, step=int(step))
        if not console.is_terminal:
            self._plain_line(clean, int(step))

    def _plain_line(self, metrics: dict[str, float], step: int) -> None:
        last_step, last_time = self._printed or self._start
        final = self.total is not None and step >= self.total
        evaluated = any(k.startswith("eval/") for k in metrics)
        if (
            self._printed is not None
            and step - last_step < self.log_every
            and not (final or evaluated)
        ):
            return
        now = time.time()
        parts = [f"{self._label} step {step}".lstrip() + (f"/{self.total}" if self.total else "")]
        for key, value in metrics.items():
            if key.count("/") <= 2 and key.rsplit("/", 1)[-1] in _HEADLINE:
                parts.append(f"{key} {value:.4g}")
        if step > last_step:
            parts.append(f"{(now - last_time) / (step - last_step):.2f} s/step")
        console.print("  ".join(parts), soft_wrap=True, markup=False, highlight=False)
        self._printed = (step, now)

    def log_video(self, tag: str, video: np.ndarray | str | Path, step: int, fps: int = 10) -> None:
        """An evaluation video at `step`: frames uint8 [N,T,H,W,3] (the N clips side by side) or
        [T,H,W,3], or an mp4 the run wrote. TensorBoard: an animated GIF in its image tab (what
        `add_video` makes, without its moviepy dependency; at most GIF_FRAMES frames, every
        k-th); the trackers: their own video (wandb.Video, trackio.Video) of the mp4 as it is,
        or of the GIF."""
        if not self.enabled or self._paused or (self._writer is None and not self._trackers):
            return
        path = Path(video) if isinstance(video, (str, Path)) else None
        gif = b""
        if self._writer is not None or path is None:  # an mp4 goes to the trackers as it is
            frames = _read_frames(path) if path is not None else np.asarray(video, np.uint8)
            if frames.ndim == 5:
                frames = np.concatenate(list(frames), axis=2)  # [T, H, N*W, 3]
            stride = -(-len(frames) // GIF_FRAMES)
            gif = _gif(frames[::stride], fps / stride)
        if self._writer is not None:
            self._add_encoded_image(tag, gif, frames.shape[1:], step)
        if self._trackers:
            from wmrl_cli.trackers import log_media

            if path is None:
                path = self._scratch_file(tag, step, ".gif", gif)
            log_media(self._trackers, int(step), videos={tag: path})

    def log_image(self, tag: str, png: str | Path, step: int) -> None:
        """A PNG the run drew (a plot) at `step`: in TensorBoard's image tab and as the
        trackers' own image (wandb.Image, trackio.Image)."""
        if not self.enabled or self._paused or (self._writer is None and not self._trackers):
            return
        if self._writer is not None:
            from PIL import Image

            with Image.open(png) as image:  # a plot: RGBA (4 channels) as matplotlib saves it
                shape = image.height, image.width, len(image.getbands())
            self._add_encoded_image(tag, Path(png).read_bytes(), shape, step)
        if self._trackers:
            from wmrl_cli.trackers import log_media

            log_media(self._trackers, int(step), images={tag: Path(png)})

    def _add_encoded_image(self, tag: str, data: bytes, shape: tuple[int, ...], step: int) -> None:
        """An encoded PNG or GIF of `shape` (height, width, channels) as a TensorBoard image
        summary, as it is."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        image = Summary.Image(
            height=int(shape[0]),
            width=int(shape[1]),
            colorspace=int(shape[2]),
            encoded_image_string=data,
        )
        self._writer._get_file_writer().add_summary(
            Summary(value=[Summary.Value(tag=tag, image=image)]), int(step)
        )
        self._writer.flush()

    def _scratch_file(self, tag: str, step: int, suffix: str, data: bytes) -> Path:
        """`data` in a file of this logger's scratch folder (removed at close, once the trackers
        have finished with their copies)."""
        if self._scratch is None:
            import tempfile

            self._scratch = tempfile.TemporaryDirectory(prefix="wmrl-media-")
        name = f"{tag.replace('/', '_')}_step{int(step)}{suffix}"
        path = Path(self._scratch.name) / name
        path.write_bytes(data)
        return path

    def close(self) -> None:
        if self.enabled and not self._closed:
            self._closed = True
            _OPEN_LOGGERS.discard(self)
            if self._jsonl is not None:
                self._jsonl.close()
            if self._writer is not None:
                self._writer.close()
            for tracker in self._trackers:
                tracker.finish()
            if self._scratch is not None:
                self._scratch.cleanup()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
