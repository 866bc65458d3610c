"""Run a wmrl command in this process and kill it with SIGKILL at a chosen point.

    python -m tests.helpers.kill_at MODULE:ATTR before|after N [MODULE:ATTR ...] -- ARGS

MODULE.ATTR (a function, or Class.method) is wrapped so that its N-th call kills the process
(SIGKILL: no cleanup, no flushing, as a kill -9 or an out-of-memory kill) just before or just
after it runs; then `wmrl ARGS` runs. The exact-resume tests (tests/test_exact_resume.py)
compare a run killed this way and started again with an uninterrupted one.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import Any


def _kill_on_call(owner: Any, attr: str, when: str, nth: int) -> None:
    real = getattr(owner, attr)
    calls = 0

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == nth and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = real(*args, **kwargs)
        if calls == nth and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, attr, wrapped)


def main(argv: list[str]) -> None:
    split = argv.index("--")
    points, command = argv[:split], argv[split + 1 :]
    if len(points) % 3:
        raise SystemExit("expected MODULE:ATTR before|after N triples before --")
    for i in range(0, len(points), 3):
        target, when, nth = points[i : i + 3]
        if when not in ("before", "after"):
            raise SystemExit(f"{when}: expected before or after")
        module_name, dotted = target.split(":")
        owner: Any = importlib.import_module(module_name)
        *path, attr = dotted.split(".")
        for part in path:
            owner = getattr(owner, part)
        _kill_on_call(owner, attr, when, int(nth))
    from wmrl_cli.cli.app import app
    from wmrl_cli.ranks import run_then_end_ranks

    run_then_end_ranks(lambda: app(command, prog_name="wmrl"))  # as `wmrl` ends (cli/app.py)


if __name__ == "__main__":
    main(sys.argv[1:])
