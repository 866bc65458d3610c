"""`python -m wmrl_cli.cli.stage_ranks JOB FOLDER`: one rank of a co-evolve stage that trains
on several ranks (`wmrl co-evolve --num-processes N`; coevolve/ranks.py starts N of them through
torchrun). It runs the stage's job (coevolve/tasks.py `RANK_JOBS`) with the config the pipeline
wrote to FOLDER/config.yaml, threads and seeds as `wmrl train-policy` sets them; the main rank
writes the result for the pipeline. Errors as a command prints them: one line, its exit code."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
import yaml

from wmrl_cli.cli.common import handle_errors


@handle_errors
def run_stage_job(job: str, folder: Path) -> None:
    from wmrl_cli.coevolve.ranks import write_result
    from wmrl_cli.coevolve.tasks import RANK_JOBS
    from wmrl_cli.config.loading import validate_config
    from wmrl_cli.runtime import configure_threads, seed_everything

    sub = validate_config(yaml.safe_load((folder / "config.yaml").read_text()))
    configure_threads(sub.num_threads)
    seed_everything(sub.simulator.seed)
    result = RANK_JOBS[job](sub, folder)
    if os.environ.get("RANK", "0") == "0":  # the main rank (torchrun's environment)
        write_result(folder, result)


def main(argv: list[str]) -> int:
    job, folder = argv
    try:
        run_stage_job(job, Path(folder))
    except typer.Exit as exc:
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
