"""The second newcomer audit's run-directory faults, kept fixed: a finished run is never changed
by accident (a run's or a copy's config.yaml as --preset), what wmrl writes is readable by the
project's other users (the umask, not tempfile's private modes), and --overwrite never removes
the user's files inside a run's folders."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wmrl_cli.cli.app import app

runner = CliRunner()
SIM = ["--num-workers", "0", "--image-size", "32"]
# A tiny policy: a size, not another code path.
TINY_SFT = [
    "--set", "sft.llm_layers=1", "--set", "sft.llm_hidden=32", "--set", "sft.vision_layers=1",
    "--set", "sft.vision_hidden=16", "--set", "sft.fused_vision=false",
    "--set", "sft.warmup_steps=1", "--set", "sft.batch_size=4",
]  # fmt: skip


def sft(out: Path | None, store: Path, steps: int, *extra: str):
    args = ["sft", "--suite", "mw2", "--data", str(store), "--steps", str(steps), *TINY_SFT, *SIM]
    return runner.invoke(app, [*args, *(["--out", str(out)] if out else []), *extra])


def digest(folder: Path) -> dict[str, str]:
    """md5 of every file under `folder`, by relative path."""
    return {
        str(p.relative_to(folder)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """One expert episode per mw2 task at 32x32."""
    out = tmp_path_factory.mktemp("run-dirs") / "store"
    args = ["rollout", "--policy", "expert", "--suite", "mw2", "--episodes-per-task", "1"]
    result = runner.invoke(app, [*args, "--out", str(out), "--num-envs", "2", *SIM])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def sft_run(store, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run-dirs") / "sft"
    result = sft(out, store, 1)
    assert result.exit_code == 0, result.output
    return out


def test_a_copied_runs_config_as_preset_changes_neither_the_copy_nor_the_original(
    sft_run, tmp_path, monkeypatch
) -> None:
    """The audit's `cp -r SMOKE sc; wmrl train-policy --preset sc/stage1/config.yaml` retrained
    the original in place: a saved run's output_dir (absolute) was the default --out."""
    copy = shutil.copytree(sft_run, tmp_path / "copy")
    original, copied = digest(sft_run), digest(copy)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = runner.invoke(app, ["sft", "--preset", str(copy / "config.yaml"), "--steps", "2"])
    assert result.exit_code == 0, result.output
    assert digest(sft_run) == original and digest(copy) == copied
    assert "not used" in result.output and str(sft_run) in result.output
    assert (work / "runs" / "sft-copy" / "policy" / "model.safetensors").is_file()


def test_eval_takes_a_training_runs_config_as_preset(sft_run, tmp_path, monkeypatch) -> None:
    """The README's `eval --audit --preset runs/grpo/config.yaml` was refused: the evaluation
    tried to write into the training run its preset named."""
    before = digest(sft_run)
    monkeypatch.chdir(tmp_path)
    args = ["eval", "--preset", str(sft_run / "config.yaml"), "--policy", "expert"]
    result = runner.invoke(app, [*args, "--episodes-per-task", "1", "--num-envs", "2", *SIM])
    assert result.exit_code == 0, result.output
    assert digest(sft_run) == before
    assert list((tmp_path / "runs").glob("eval*/report.json"))


def test_what_wmrl_writes_honours_the_umask(store, tmp_path) -> None:
    """Under umask 022 every file is 0644 and every folder 0755 (tempfile's 0600/0700 files
    renamed into place made weights, configs and episodes private)."""
    previous = os.umask(0o022)
    try:
        run = tmp_path / "run"
        assert sft(run, store, 1).exit_code == 0
        data = tmp_path / "data"
        args = ["rollout", "--policy", "expert", "--suite", "mw2", "--episodes-per-task", "1"]
        rolled = runner.invoke(app, [*args, "--out", str(data), "--num-envs", "2", *SIM])
        assert rolled.exit_code == 0, rolled.output
    finally:
        os.umask(previous)
    for folder in (run, data):
        modes = {
            str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode)
            for p in [folder, *folder.rglob("*")]
        }
        wrong = {
            path: oct(mode)
            for path, mode in modes.items()
            if mode != (0o755 if (folder / path).is_dir() else 0o644)
        }
        assert not wrong, wrong
    assert (run / "policy" / "model.safetensors").is_file()


def test_overwrite_and_resaves_keep_the_users_files_inside_a_runs_folders(store, tmp_path) -> None:
    """`echo x > R/policy/README.md; wmrl sft ... --out R --overwrite` removed the README: only
    top-level names were owned."""
    run = tmp_path / "run"
    assert sft(run, store, 1).exit_code == 0
    (run / "policy" / "README.md").write_text("my model card")
    (run / "policy" / "notes").mkdir()
    weights = (run / "policy" / "model.safetensors").read_bytes()

    again = sft(run, store, 1, "--set", "sft.lr=0.002", "--overwrite")
    assert again.exit_code == 0, again.output
    assert (run / "policy" / "README.md").read_text() == "my model card"
    assert (run / "policy" / "notes").is_dir()
    assert (run / "policy" / "model.safetensors").read_bytes() != weights  # retrained
    record = json.loads((run / "run.json").read_text())
    assert {"policy/README.md", "policy/notes"} <= set(record["foreign"])
    assert "policy/model.safetensors" in record["files"] and record["active"] is False

    more = sft(run, store, 2, "--set", "sft.lr=0.002")  # resumes; saves policy/ again
    assert more.exit_code == 0, more.output
    assert (run / "policy" / "README.md").read_text() == "my model card"


def test_overwrite_removes_what_the_run_wrote_at_every_depth(store, tmp_path) -> None:
    run = tmp_path / "run"
    assert sft(run, store, 1).exit_code == 0
    record = json.loads((run / "run.json").read_text())
    record["active"] = True  # as a kill -9 leaves it: what appeared since is the run's
    (run / "run.json").write_text(json.dumps(record))
    (run / "policy" / "half-written").write_text("")
    assert sft(run, store, 1, "--set", "sft.lr=0.002", "--overwrite").exit_code == 0
    assert not (run / "policy" / "half-written").exists()
