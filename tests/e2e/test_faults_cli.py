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


def train_reward(data: Path, out: Path | str, *extra: str):
    args = ["train-reward", "--data", str(data), "--out", str(out), "--steps", "2"]
    return runner.invoke(app, [*args, "--width", "4", *extra])


def test_a_missing_preset_file_is_named_as_a_file(tmp_path) -> None:
    """`--preset gone.yaml` was 'unknown preset', listing the shipped presets."""
    for preset, what in ((tmp_path / "gone.yaml", "does not exist"), (tmp_path, "is a directory")):
        args = ["sft", "--preset", str(preset), "--out", str(tmp_path / "R")]
        line = one_error_line(runner.invoke(app, args), 2, f"preset file {preset} {what}")
        assert "unknown preset" not in line


def test_a_yaml_error_names_its_line(tmp_path) -> None:
    preset = tmp_path / "bad.yaml"
    preset.write_text("training:\n  lr: 1.0e-4\n  steps: [1,\n")
    args = ["sft", "--preset", str(preset), "--out", str(tmp_path / "R")]
    one_error_line(runner.invoke(app, args), 2, f"{preset}, line 4, column 1: not valid YAML")


def test_an_unknown_key_suggests_the_closest_one(tmp_path) -> None:
    for given, said in (
        ("sft.llm_hiden", "'sft.llm_hiden' (did you mean 'sft.llm_hidden'?)"),
        ("trainin.lr", "'trainin' (did you mean 'training'?)"),
    ):
        args = ["sft", "--set", f"{given}=3", "--out", str(tmp_path / "R")]
        one_error_line(runner.invoke(app, args), 2, said)
    args = ["sft", "--set", "sft.zzzz=3", "--out", str(tmp_path / "R")]
    assert "did you mean" not in one_error_line(runner.invoke(app, args), 2, "'sft.zzzz'")


def test_out_dot_in_an_empty_folder_is_a_run(tmp_path, monkeypatch) -> None:
    """`--out .` was refused as the current directory, even in a new, empty folder; a folder
    holding files is still refused."""
    data = successes_store(tmp_path / "eps", per_task=2)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    result = train_reward(data, ".")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "here" / "reward_model").is_dir()
    monkeypatch.chdir(tmp_path)
    one_error_line(train_reward(data, "."), 2, "--out . is the current directory")


def test_the_changed_data_refusal_says_what_resumes_the_run(tmp_path) -> None:
    """The refusal said 'run the same command to resume it', which is refused again when the
    data changed: it says to restore the files, or pass --resume."""
    data = successes_store(tmp_path / "eps", per_task=2)
    assert train_reward(data, tmp_path / "R").exit_code == 0
    EpisodeStore.open(data).add([visible_success_episode(9, succeed=True)])
    line = one_error_line(train_reward(data, tmp_path / "R"), 2, "restore the files it was made")
    assert "same command" not in line and "--resume" in line
    line = one_error_line(train_reward(data, tmp_path / "R", "--width", "8"), 2)
    assert f"settings it recorded ({tmp_path / 'R' / 'config.yaml'})" in line
