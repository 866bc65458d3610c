"""A rank that finishes a command as `wmrl` does (cli/app.py `main`: ranks.run_then_end_ranks),
for tests/test_ranks.py:

    python -m tests.helpers.rank_end OUT    (on ranks: ranks.py `run_ranks`)

Each rank makes the process group as a command does (jobs/train_policy.py `make_accelerator`)
and reduces a tensor; rank 0 then works on alone for a moment (as it writes the policy). At
the interpreter's exit each writes OUT/rank_R.txt: the sum it got, and whether its process
group was still open.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import typer

from wmrl_cli.config import resolve_config
from wmrl_cli.jobs.train_policy import make_accelerator
from wmrl_cli.ranks import run_then_end_ranks

command = typer.Typer()
reduced: list[int] = []


@command.command()
def finish() -> None:
    accelerator = make_accelerator(resolve_config())
    reduced.append(int(accelerator.reduce(torch.ones(1), "sum").item()))
    if accelerator.is_main_process:
        time.sleep(1.0)  # the main process still writing while the other is done


def report(out: Path) -> None:
    group = "open" if dist.is_initialized() else "closed"
    out.joinpath(f"rank_{os.environ['RANK']}.txt").write_text(f"{reduced} {group}")


if __name__ == "__main__":
    atexit.register(report, Path(sys.argv.pop(1)))
    run_then_end_ranks(command)
