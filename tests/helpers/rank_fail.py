"""A rank whose command ends with its process group open, ending as `wmrl` does (cli/app.py
`main`: ranks.run_then_end_ranks), for tests/test_ranks.py:

    python -m tests.helpers.rank_fail MODE OUT    (on ranks: ranks.py `run_ranks`)

MODE `exit`: the command fails with status 3 (a user's error); `bug`: it raises; `finish`: it
succeeds. The interpreter's exit, where it comes, writes OUT/teardown_R.txt.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path

import torch.distributed as dist

from wmrl_cli.ranks import run_then_end_ranks


def command(mode: str) -> None:
    dist.init_process_group("gloo")
    if mode == "exit":
        sys.exit(3)
    if mode == "bug":
        raise ValueError("a bug in the command")
    sys.exit(0)


if __name__ == "__main__":
    mode, out = sys.argv[1], Path(sys.argv[2])
    atexit.register(lambda: (out / f"teardown_{os.environ['RANK']}.txt").write_text("ran"))
    run_then_end_ranks(lambda: command(mode))
