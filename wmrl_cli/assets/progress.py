"""huggingface_hub's progress bars drawn by rich.

`snapshot_download(tqdm_class=...)` creates its bars from the class it is given: a files bar
("Fetching N files"), a bytes bar and a network-transfer bar. `rich_tqdm_class` returns a
class whose instances are tasks of one shared rich Progress; the transfer bar duplicates the
bytes bar for plain HTTP downloads and stays hidden.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from wmrl_cli.logging import err_console

_HIDDEN_PREFIXES = ("Downloading bytes",)


class _AmountColumn(ProgressColumn):
    """Bytes for byte bars, "done/total" for counting bars."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes = DownloadColumn()
        self._count = MofNCompleteColumn()

    def render(self, task: Task) -> Text:
        column = self._bytes if task.fields.get("unit") == "B" else self._count
        return column.render(task)


class _SpeedColumn(TransferSpeedColumn):
    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("unit") == "B" else Text("")


def make_download_progress(enabled: bool = True) -> Progress:
    return Progress(
        TextColumn("[bold blue]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        _AmountColumn(),
        _SpeedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        disable=not enabled,
        transient=not sys.stderr.isatty(),
    )


class RichTqdm:
    """The subset of tqdm's interface huggingface_hub's snapshot bars use."""

    progress: Progress
    label: str = ""

    def __init__(
        self,
        iterable: Any = None,
        desc: str | None = None,
        total: float | None = None,
        initial: float = 0,
        unit: str = "it",
        **_: Any,
    ) -> None:
        self.iterable = iterable
        self.n = initial
        self._total = total
        self.desc = desc or ""
        visible = not self.desc.startswith(_HIDDEN_PREFIXES)
        self._task = self.progress.add_task(
            self._describe(self.desc), total=total, completed=initial, visible=visible, unit=unit
        )

    def _describe(self, desc: str) -> str:
        if desc.startswith("Fetching"):
            desc = "files"
        elif desc.startswith("Reconstruct"):
            desc = "bytes"
        return f"{self.label}: {desc}" if self.label else desc

    @property
    def total(self) -> float | None:
        return self._total

    @total.setter
    def total(self, value: float | None) -> None:
        self._total = value
        self.progress.update(self._task, total=value)

    @property
    def format_dict(self) -> dict[str, Any]:
        return {"n": self.n, "total": self._total, "rate": None}

    def update(self, n: float | None = 1) -> None:
        self.n += n or 0
        self.progress.update(self._task, completed=self.n)

    def refresh(self) -> None:
        self.progress.refresh()

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        pass  # the labels set at creation stay ("files", "bytes")

    set_description_str = set_description

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass  # rich computes its own speed column

    def close(self) -> None:
        pass  # the task stays on screen until the shared Progress stops

    def __iter__(self) -> Any:
        for item in self.iterable:
            yield item
            self.update(1)

    def __enter__(self) -> RichTqdm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def rich_tqdm_class(progress: Progress, label: str = "") -> type[RichTqdm]:
    """A RichTqdm subclass bound to `progress` (huggingface_hub wants a class, not an object)."""
    return type("BoundRichTqdm", (RichTqdm,), {"progress": progress, "label": label})
