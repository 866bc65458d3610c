"""A run's record of verified imagination's calls: `verified_calls/step_N` (`_rankR` beside it
with several ranks), each the labelled episodes of one RL step's calls (envs/verified.py), which
the judge can later learn from (docs/results.md, "What the calls teach the judge")."""

from __future__ import annotations

import shutil
from pathlib import Path

from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.files import atomic_dir

VERIFIED_CALLS_DIR = "verified_calls"


def write_step_calls(
    run_dir: Path, step: int, calls: list[Episode], rank: int, several_ranks: bool
) -> None:
    """RL step `step`'s calls, written whole, and replaced whole (or removed, with no call)
    where a resumed run takes the step again."""
    name = f"step_{step:06d}" + (f"_rank{rank}" if several_ranks else "")
    final = run_dir / VERIFIED_CALLS_DIR / name
    if not calls:
        shutil.rmtree(final, ignore_errors=True)
        return
    with atomic_dir(final) as tmp:
        EpisodeStore(tmp).add(calls)


def drop_calls_after(run_dir: Path, step: int) -> None:
    """The call folders of steps after `step`, the one resumed from (an earlier attempt that ran
    further, or with another number of ranks): the steps to come write their own."""
    for path in (run_dir / VERIFIED_CALLS_DIR).glob("step_*"):
        number = path.name.split("_")[1]
        if path.is_dir() and number.isdigit() and int(number) > step:
            shutil.rmtree(path)
