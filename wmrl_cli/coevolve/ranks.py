"""Co-evolve's training stages on several ranks (`wmrl co-evolve --num-processes N`).

The pipeline stays one process: it evaluates, collects, merges and records the stages, and it
never joins a process group. A stage that trains on ranks (RL, a world model; tasks.RANK_JOBS)
is started as N processes (torchrun, `training/launch.py`) of `python -m
wmrl_cli.cli.stage_ranks JOB FOLDER SEED [ARGS]`. Each rank reads the stage's config from
FOLDER/config.yaml, which the pipeline wrote, and runs the stage's own job, the function the
one-process stage calls, as `wmrl train-policy --num-processes N` (or `train-wm`) would with that
config; the main rank writes the job's result to FOLDER/ranks_result.json, where the pipeline
reads it. The ranks print their own errors (one line) and the pipeline stops with their exit
status.
"""

from __future__ import annotations

import json
from pathlib import Path

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text
from wmrl_cli.training.launch import run_ranks

RESULT_FILE = "ranks_result.json"
WORKER = "wmrl_cli.cli.stage_ranks"


class RanksFailed(WmrlError):
    """A stage's ranks stopped with a non-zero status (they printed why); its exit code is
    theirs."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def on_ranks(job: str, folder: Path, ranks: int, args: list[str] | None = None) -> str:
    """Job `job` of the stage in `folder` run on `ranks` processes, with `args` after the
    stage's config; its result (the main rank's). The ranks seed their global RNGs as this
    process's stage was seeded (`StageCache.run`: torch's initial seed), so that they start from
    what the stage would draw here. Ctrl-C stops the ranks and then this process
    (KeyboardInterrupt); SIGTERM stops them too (the stage fails with their status)."""
    import torch

    result = folder / RESULT_FILE
    result.unlink(missing_ok=True)  # a result of an earlier attempt is not this one's
    argv = [job, str(folder), str(torch.initial_seed()), *(args or [])]
    code = run_ranks(ranks, WORKER, argv)  # Ctrl-C: KeyboardInterrupt, once they stopped
    if code == 130:  # a Ctrl-C that reached the ranks alone
        raise KeyboardInterrupt
    if code != 0:
        raise RanksFailed(f"{folder.name}: its {ranks} ranks stopped (exit status {code})", code)
    if not result.is_file():
        raise WmrlError(f"{folder.name}: its {ranks} ranks finished without writing {result}")
    return json.loads(result.read_text())["result"]


def write_result(folder: Path, result: str) -> None:
    """The main rank's result of the stage's job, for `on_ranks`."""
    atomic_write_text(folder / RESULT_FILE, json.dumps({"result": result}))
