"""Co-evolve's training stages on several ranks (`wmrl co-evolve --num-processes N`).

The pipeline stays one process: it evaluates, collects, merges and records the stages, and it
never joins a process group. A stage that trains on ranks (RL, a world model; stages.RANK_JOBS)
is started as N processes (torchrun, `training/launch.py`) of `python -m
wmrl_cli.cli.stage_ranks JOB FOLDER SEED [ARGS]`. Each rank reads the stage's config from
FOLDER/config.yaml, which the pipeline wrote, and runs the stage's own job, the function the
one-process stage calls, as `wmrl train-policy --num-processes N` (or `train-wm`) would with that
config; the main rank writes the job's result to FOLDER/ranks_result.json, where the pipeline
reads it. The pipeline stops with the ranks' exit status and says their error once, naming the
stage (`training/launch.py` collects the ranks' lines).
"""

from __future__ import annotations

import json
from pathlib import Path

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text
from wmrl_cli.training.launch import RanksFailed, run_ranks

RESULT_FILE = "ranks_result.json"
WORKER = "wmrl_cli.cli.stage_ranks"


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
    ended = run_ranks(ranks, WORKER, argv)  # Ctrl-C: KeyboardInterrupt, once they stopped
    if ended.code == 130:  # a Ctrl-C that reached the ranks alone
        raise KeyboardInterrupt
    if ended.errors:  # what the ranks said, once, naming the stage
        said = [f"{folder.name} on {ranks} ranks: {line}" for line in ended.errors]
        raise RanksFailed(said, ended.code)
    if ended.code != 0:  # a bug's traceback or a signal: the rank printed what it could
        raise RanksFailed(
            [f"{folder.name}: its {ranks} ranks stopped (exit status {ended.code})"], ended.code
        )
    if not result.is_file():
        raise WmrlError(f"{folder.name}: its {ranks} ranks finished without writing {result}")
    return json.loads(result.read_text())["result"]


def write_result(folder: Path, result: str) -> None:
    """The main rank's result of the stage's job, for `on_ranks`."""
    atomic_write_text(folder / RESULT_FILE, json.dumps({"result": result}))
