"""Ranks that stop on a user's error, as a command's ranks do (`handle_errors`), for
tests/test_ranks.py:

    python -m tests.helpers.rank_error MODE    (on ranks: ranks.py `run_ranks`)

MODE `all`: every rank stops with the same line; `one`: rank 1 alone stops (rank 0 succeeds);
anything else: every rank succeeds.
"""

from __future__ import annotations

import os
import sys

import typer

from wmrl_cli.cli.common import handle_errors
from wmrl_cli.errors import ConfigError


@handle_errors
def stop(mode: str) -> None:
    rank = int(os.environ["RANK"])
    if mode == "all" or (mode == "one" and rank == 1):
        raise ConfigError("training.lr=-1: expected a positive learning rate")


if __name__ == "__main__":
    try:
        stop(sys.argv[1])
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
