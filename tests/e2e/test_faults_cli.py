"""The newcomer audit's reproductions of what each command says: its advice, its progress and
closing lines, its options and its refusals (issue 63's items on messages); each holds as a
test so that it stays fixed. Faults that lose data are in test_faults.py."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tests.helpers.episodes import visible_success_episode
from tests.helpers.output import one_error_line
from wmrl_cli.cli.app import app
from wmrl_cli.data.episodes import EpisodeStore

runner = CliRunner()


def successes_store(root: Path, per_task: int) -> Path:
    """`per_task` successful episodes of each of two tasks."""
    EpisodeStore(root).add([visible_success_episode(i, succeed=True) for i in range(2 * per_task)])
    return root


def test_train_reward_says_the_split_needs_two_successes_per_task(tmp_path) -> None:
    """`wmrl rollout --policy expert -n 1; wmrl train-reward`: every episode succeeded, but
    the split holds out a task's successes only from 2 on; the advice says so (it said to
    collect rollouts that succeed)."""
    data = successes_store(tmp_path / "eps", per_task=1)
    args = ["train-reward", "--data", str(data), "--out", str(tmp_path / "R"), "--steps", "2"]
    line = one_error_line(runner.invoke(app, args), 1, "at least 2 successful episodes per task")
    assert "collect rollouts that succeed" not in line
    assert not (tmp_path / "R").exists()
