"""`python -m wmrl_cli.cli.stage_ranks JOB FOLDER SEED [ARGS]`: one rank of a co-evolve stage
that trains on several ranks (`wmrl co-evolve --num-processes N`; ranks.py `on_ranks` starts N
of them through torchrun). It runs the stage's job (coevolve/stages.py `RANK_JOBS`) with the
config the pipeline wrote to FOLDER/config.yaml and ARGS, its threads as the config says and its
global RNGs seeded with SEED (the stage's); the main rank writes the result for the pipeline.
Errors as a command's rank has them: one line, for the pipeline to say once, and its exit code."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
import yaml

from wmrl_cli.cli.common import handle_errors
from wmrl_cli.ranks import end_ranks, write_result


@handle_errors
def run_stage_job(job: str, folder: Path, seed: int, args: list[str]) -> None:
    from wmrl_cli.coevolve.stages import RANK_JOBS
    from wmrl_cli.config.loading import validate_config
    from wmrl_cli.runtime import configure_threads, seed_everything

    sub = validate_config(yaml.safe_load((folder / "config.yaml").read_text()))
    configure_threads(sub.num_threads)
    seed_everything(seed)
    result = RANK_JOBS[job](sub, folder, *args)
    if os.environ.get("RANK", "0") == "0":  # the main rank (torchrun's environment)
        write_result(folder, result)


def main(argv: list[str]) -> int:
    job, folder, seed, *args = argv
    try:
        run_stage_job(job, Path(folder), int(seed), args)
    except typer.Exit as exc:
        end_ranks(exc.exit_code)  # a failed rank leaves at once (ranks.end_ranks)
        return exc.exit_code
    end_ranks()  # the process group closed in order (ranks.end_ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
