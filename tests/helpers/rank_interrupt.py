"""Ranks stopped by a Ctrl-C that reaches rank 0 first, as in a checkpoint save: rank 0 stops
(KeyboardInterrupt) while rank 1 waits in a gloo collective, which fails because its peer is
gone (tests/e2e/test_faults_cli.py):

    python -m tests.helpers.rank_interrupt    (on ranks: ranks.py `run_ranks`)

It ends as `wmrl` does (ranks.run_then_end_ranks).
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import typer

from wmrl_cli.cli.common import handle_errors
from wmrl_cli.ranks import run_then_end_ranks


@handle_errors
def save() -> None:
    dist.init_process_group("gloo")
    dist.barrier()
    if int(os.environ["RANK"]) == 0:
        raise KeyboardInterrupt  # the Ctrl-C, here first
    dist.all_reduce(torch.ones(1))  # waits for rank 0, which is gone


def command() -> None:
    try:
        save()
    except typer.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    run_then_end_ranks(command)  # as `wmrl` ends (cli/app.py `main`)
