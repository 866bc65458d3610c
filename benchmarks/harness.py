"""The benchmarks' shared harness: their common options, warm-up and timed rounds, the median
with its spread, JSON and markdown output, and errors as one line (exit 2). Modelled on
diffusers' benchmarking utilities (a scenario measured the same way each time, its records
written to a file), written for these scripts.

    import harness

    parser = harness.parser(__doc__, rounds=3, warmup=1)   # --rounds --warmup --out --markdown
    args = parser.parse_args()
    seconds = harness.timed(step, args.rounds, args.warmup)  # a Spread: median, low, high
    harness.write(args, "name", {"seconds": seconds.as_dict()}, markdown_table)

    if __name__ == "__main__":
        harness.main(main)   # a bad input: one line on stderr, exit 2

Standard library only: benchmarks/gpu_fullsize.py imports it on a lent GPU machine whose Python
has no wmrl installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (else exit 2 with one line)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def non_negative(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


def parser(
    doc: str | None, *, rounds: int | None = None, warmup: int | None = None, out: bool = False
) -> argparse.ArgumentParser:
    """An ArgumentParser described by the docstring's first line, with the common options:
    `--rounds N` and `--warmup N` where the script times rounds (their defaults given here),
    `--out PATH` (required where `out`) and `--markdown PATH`."""
    result = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    if rounds is not None:
        result.add_argument(
            "--rounds", type=positive, default=rounds, help=f"timed rounds (default {rounds})"
        )
    if warmup is not None:
        result.add_argument(
            "--warmup",
            type=non_negative,
            default=warmup,
            help=f"untimed rounds before them (default {warmup})",
        )
    result.add_argument(
        "--out",
        type=Path,
        required=out,
        default=None,
        help="the result as JSON: a .json file, or a folder that gets NAME.json and NAME.md",
    )
    result.add_argument("--markdown", type=Path, default=None, help="the table, to this file too")
    return result


@dataclass(frozen=True)
class Spread:
    """Values measured over rounds: their median, lowest and highest."""

    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        if not values:
            raise ValueError("no rounds measured")
        return cls(tuple(float(v) for v in values))

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)

    @property
    def relative_spread(self) -> float:
        """(high - low) / median: how far apart the rounds were."""
        return (self.high - self.low) / self.median if self.median else 0.0

    def map(self, fn: Callable[[float], float]) -> Spread:
        """The same rounds through `fn` (seconds to a rate, say)."""
        return Spread.of([fn(v) for v in self.values])

    def as_dict(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "rounds": len(self.values),
            "values": list(self.values),
        }

    def __format__(self, spec: str) -> str:
        spec = spec or ".2f"
        return f"{self.median:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"


def repeat(fn: Callable[[], Any], rounds: int, warmup: int = 0) -> list[Any]:
    """`fn()` `warmup` times (its results dropped), then `rounds` times: their results."""
    for _ in range(warmup):
        fn()
    return [fn() for _ in range(rounds)]


def timed(fn: Callable[[], Any], rounds: int, warmup: int = 0, calls: int = 1) -> Spread:
    """Seconds per call of `fn`: `warmup` untimed calls, then `rounds` rounds of `calls` calls
    each, timed with the performance counter."""

    def one_round() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls

    for _ in range(warmup):
        fn()
    return Spread.of(repeat(one_round, rounds))


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table, one line a row."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write(
    args: argparse.Namespace, name: str, result: Any, markdown: str = "", echo: bool = True
) -> None:
    """The result where `--out` says (a .json file; a folder gets NAME.json and NAME.md), the
    markdown to `--markdown` and, with `echo`, to stdout. Called again, it rewrites them (a run
    cut short keeps what it measured)."""
    out: Path | None = getattr(args, "out", None)
    if out is not None:
        if out.suffix == ".json":
            out.parent.mkdir(parents=True, exist_ok=True)
            _replace(out, json.dumps(result, indent=1))
        else:
            out.mkdir(parents=True, exist_ok=True)
            _replace(out / f"{name}.json", json.dumps(result, indent=1))
            if markdown:
                _replace(out / f"{name}.md", markdown)
    path: Path | None = getattr(args, "markdown", None)
    if path is not None and markdown:
        path.parent.mkdir(parents=True, exist_ok=True)
        _replace(path, markdown)
    if markdown and echo:
        print(markdown, flush=True)


def _replace(path: Path, text: str) -> None:
    """Written beside, then renamed into place: a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


class BenchmarkError(Exception):
    """What a benchmark says of its inputs before measuring: one line, exit 2."""


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (BenchmarkError, OSError, ValueError, KeyError)
    try:
        from wmrl_cli.errors import WmrlError
    except ImportError:  # a Python without wmrl: the others still count
        return errors
    return (*errors, WmrlError)


def main(entry: Callable[[], Any], name: str | None = None) -> None:
    """Run a benchmark's `main`: an error of its inputs (a missing file, a bad value, wmrl's
    own errors) is one line on stderr and exit 2, not a traceback."""
    name = name or Path(sys.argv[0]).stem
    try:
        entry()
    except _user_errors() as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"{name}: error: {message}", file=sys.stderr)
        sys.exit(2)
