"""Fault injection: nothing a user owns is lost, and every failure is one line.

The audit's reproductions (`--overwrite` in a directory holding the user's files, damaged
episode files, a full disk mid-run, eval into a training run), ENOSPC and EIO injected at each
kind of write wmrl makes, and a flipped byte and a truncation in each kind of file it reads.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from tests.helpers.output import one_error_line
from wmrl_cli.cli.app import app
from wmrl_cli.files import WriteError, atomic_dir, atomic_write_text

runner = CliRunner()
SIM = ["--num-envs", "2", "--num-workers", "0", "--image-size", "32"]
# A tiny policy: a size, not another code path.
TINY_SFT = [
    "--set", "sft.llm_layers=1", "--set", "sft.llm_hidden=32", "--set", "sft.vision_layers=1",
    "--set", "sft.vision_hidden=16", "--set", "sft.fused_vision=false",
    "--set", "sft.warmup_steps=1", "--set", "sft.batch_size=4",
]  # fmt: skip
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
EIO = OSError(errno.EIO, os.strerror(errno.EIO))


def sft(out: Path, store: Path, steps: int, *extra: str):
    args = ["sft", "--suite", "mw2", "--data", str(store), "--steps", str(steps)]
    sim = ["--num-workers", "0", "--image-size", "32"]
    return runner.invoke(app, [*args, "--out", str(out), *TINY_SFT, *sim, *extra])


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Two expert episodes per mw2 task at 32x32."""
    out = tmp_path_factory.mktemp("faults") / "store"
    args = ["rollout", "--policy", "expert", "--suite", "mw2", "--episodes-per-task", "1"]
    result = runner.invoke(app, [*args, "--out", str(out), *SIM])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def sft_run(store, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("faults") / "sft"
    result = sft(out, store, 2)
    assert result.exit_code == 0, result.output
    return out


def copy_store(store: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(store, dest)
    return dest


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 2)])


def flip(path: Path, at: float = 0.5) -> None:
    """One byte flipped, at a fraction of the file's length."""
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0xFF
    path.write_bytes(bytes(data))


# -- the run directory owns only what wmrl wrote -----------------------------------------------


def test_overwrite_keeps_the_users_files(store, tmp_path, monkeypatch) -> None:
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("code")
    monkeypatch.chdir(project)
    one_error_line(sft(Path("."), store, 1), 2, "current directory")
    one_error_line(sft(project.resolve() / "src", store, 1), 2, "did not write", "main.py")
    assert (project / "src" / "main.py").read_text() == "code"

    run = project / "runs" / "sft"
    assert sft(run, store, 1).exit_code == 0
    (run / "notes.txt").write_text("mine")
    again = sft(run, store, 1, "--set", "sft.lr=0.002", "--overwrite")
    assert again.exit_code == 0, again.output
    assert (run / "notes.txt").read_text() == "mine"
    assert (run / "policy").is_dir()
    record = json.loads((run / "run.json").read_text())
    assert "notes.txt" in record["foreign"] and "notes.txt" not in record["files"]
    assert record["active"] is False


def test_home_is_never_a_run_directory(store, tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    one_error_line(sft(home, store, 1), 2, "home directory")
    assert list(home.iterdir()) == []


def test_a_killed_runs_files_are_its_own(store, tmp_path) -> None:
    run = tmp_path / "run"
    assert sft(run, store, 1).exit_code == 0
    record = json.loads((run / "run.json").read_text())
    record["active"] = True  # as a kill -9 leaves it
    (run / "run.json").write_text(json.dumps(record))
    (run / "half-written-by-the-killed-run").mkdir()
    assert sft(run, store, 1, "--set", "sft.lr=0.002", "--overwrite").exit_code == 0
    assert not (run / "half-written-by-the-killed-run").exists()


def test_eval_never_rewrites_a_training_run(sft_run) -> None:
    before = (sft_run / "config.yaml").read_text()
    args = ["eval", "--policy", "expert", "--suite", "mw2", "-n", "1", "-o", str(sft_run), *SIM]
    one_error_line(runner.invoke(app, [*args, "--overwrite"]), 2, "holds a sft run")
    assert (sft_run / "config.yaml").read_text() == before


def test_another_commands_run_is_refused_even_with_overwrite(sft_run, store) -> None:
    args = ["train-reward", "--data", str(store), "--steps", "1", "--out", str(sft_run)]
    one_error_line(runner.invoke(app, [*args, "--overwrite"]), 2, "holds a sft run")
    assert (sft_run / "policy").is_dir()


# -- damaged inputs: one line, nothing written, the repaired rerun runs --------------------------


@pytest.mark.parametrize("damage", [truncate, flip], ids=["truncated", "flipped"])
def test_damaged_episode_file(store, tmp_path, damage) -> None:
    broken = copy_store(store, tmp_path / "st")
    episode = sorted((broken / "episodes").glob("ep_*.npz"))[0]
    original = episode.read_bytes()
    damage(episode)
    out = tmp_path / "sft"
    commands = {
        "sft": ["sft", "--suite", "mw2", "--data", str(broken), "--steps", "1", "--out", str(out)],
        "train-wm": ["train-wm", "--data", str(broken), "--steps", "1", "--out", str(out)],
        "train-reward": ["train-reward", "--data", str(broken), "--steps", "1", "--out", str(out)],
    }
    for args in commands.values():
        one_error_line(runner.invoke(app, args), 1, episode.name, "damaged", "wmrl rollout")
        assert not out.exists()  # nothing that blocks the corrected rerun
    episode.write_bytes(original)
    assert sft(out, broken, 1).exit_code == 0


@pytest.mark.parametrize("damage", [truncate, flip], ids=["truncated", "flipped"])
def test_damaged_store_index(store, tmp_path, damage) -> None:
    broken = copy_store(store, tmp_path / "st")
    damage(broken / "index.json", at=0.1) if damage is flip else damage(broken / "index.json")
    args = ["train-reward", "--data", str(broken), "--steps", "1", "--out", str(tmp_path / "rm")]
    one_error_line(runner.invoke(app, args), 1, "index.json")


@pytest.mark.parametrize("damage", [truncate, flip], ids=["truncated", "flipped"])
def test_damaged_policy_weights(sft_run, tmp_path, damage) -> None:
    import shutil

    policy = shutil.copytree(sft_run / "policy", tmp_path / "policy")
    weights = next(policy.glob("*.safetensors"))
    # a flip in the header (its first bytes): one inside the tensor data is not detectable
    damage(weights, at=0.02) if damage is flip else damage(weights)
    args = ["eval", "--policy", str(policy), "--suite", "mw2", "-n", "1", *SIM]
    one_error_line(runner.invoke(app, [*args, "-o", str(tmp_path / "ev")]), None, weights.name)


@pytest.mark.parametrize("part", ["state.json", "state_0.pt"])
@pytest.mark.parametrize("damage", [truncate, flip], ids=["truncated", "flipped"])
def test_damaged_training_state(store, tmp_path, part, damage) -> None:
    run = tmp_path / "run"
    assert sft(run, store, 2, "--set", "sft.save_every=1").exit_code == 0
    latest = run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()
    damage(latest / "training_state" / part)
    one_error_line(sft(run, store, 3, "--set", "sft.save_every=1"), None, part)


@pytest.mark.parametrize("damage", [truncate, flip], ids=["truncated", "flipped"])
def test_damaged_preset(tmp_path, damage) -> None:
    from wmrl_cli.config.loading import preset_dir

    preset = tmp_path / "mine.yaml"
    preset.write_bytes((preset_dir() / "mw-sft.yaml").read_bytes())
    damage(preset, at=0.3) if damage is flip else damage(preset)
    preset.write_bytes(preset.read_bytes() + b"\n\xff\xfe: [\n")  # and never valid YAML
    result = runner.invoke(app, ["presets", "show", str(preset)])
    one_error_line(result, 2, "mine.yaml")


# -- a full disk or an I/O error at each kind of write -----------------------------------------


def test_a_failure_carrying_a_traceback_is_not_taken_for_a_write() -> None:
    """A simulator worker's failure carries its traceback, whose frames each name a "File": it
    is a bug to show, not a write error to blame on the disk (seen on a GPU machine missing a
    package, 2026-11-29). A C++ writer's stream error still is one."""
    from wmrl_cli.files.atomic import environment_error

    worker = RuntimeError(
        "simulator worker failed: ModuleNotFoundError: No module named 'glfw'\nTraceback (most "
        'recent call last):\n  File "/site/gymnasium/envs/mujoco/mujoco_rendering.py", line 4'
    )
    assert environment_error(worker) is None
    stream = RuntimeError("[enforce fail at inline_container.cc:642] . PytorchStreamWriter failed")
    assert isinstance(environment_error(stream), WriteError)


@pytest.mark.parametrize("error", [ENOSPC, EIO], ids=["ENOSPC", "EIO"])
def test_text_write_keeps_the_old_file(tmp_path, monkeypatch, error) -> None:
    path = tmp_path / "report.json"
    path.write_text("old")

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(WriteError, match=os.strerror(error.errno)):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.mark.parametrize("error", [ENOSPC, EIO], ids=["ENOSPC", "EIO"])
def test_episode_store_write(store, tmp_path, monkeypatch, error) -> None:
    from wmrl_cli.data.episodes import EpisodeStore

    copy = copy_store(store, tmp_path / "st")
    episode = EpisodeStore.open(copy).load(0)
    index_before = (copy / "index.json").read_text()

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(np, "savez_compressed", refuse)
    with pytest.raises(WriteError, match="ep_"):
        EpisodeStore(copy).add([episode])
    assert (copy / "index.json").read_text() == index_before
    assert not [p for p in (copy / "episodes").iterdir() if p.name.startswith(".")]


def test_checkpoint_on_a_full_disk_keeps_the_last_one(tmp_path, monkeypatch) -> None:
    """torch.save's C++ stream loses errno: the full disk is read off the file system."""
    import shutil as shutil_module
    from collections import namedtuple

    from wmrl_cli.training.checkpoints import save_checkpoint

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())

    def save_model(folder: Path) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "m.st")

    first = save_checkpoint(tmp_path, 1, save_model, [opt])
    usage = namedtuple("usage", "total used free")

    def stream_error(*args, **kwargs):
        raise RuntimeError("basic_ios::clear: iostream error")

    monkeypatch.setattr(torch, "save", stream_error)
    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: usage(10, 10, 0))
    with pytest.raises(WriteError, match="No space left on device"):
        save_checkpoint(tmp_path, 2, save_model, [opt])
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["latest", first.name]


@pytest.mark.parametrize("error", [ENOSPC, EIO], ids=["ENOSPC", "EIO"])
def test_folder_write_keeps_the_old_folder(tmp_path, error) -> None:
    """Model folders (policies, world models, reward models) are written as atomic_dir does."""
    final = tmp_path / "policy"
    final.mkdir()
    (final / "model.safetensors").write_text("old")
    with pytest.raises(WriteError, match=os.strerror(error.errno)), atomic_dir(final) as tmp:
        (tmp / "model.safetensors").write_text("half")
        raise error
    assert (final / "model.safetensors").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]


@pytest.mark.parametrize("error", [ENOSPC, EIO], ids=["ENOSPC", "EIO"])
def test_video_write(tmp_path, monkeypatch, error) -> None:
    from wmrl_cli.evaluation import videos

    def refuse(*args, **kwargs):
        raise error

    monkeypatch.setattr(videos.imageio, "get_writer", refuse)
    with pytest.raises(WriteError, match="episode.mp4"):
        videos.write_mp4(tmp_path / "episode.mp4", np.zeros((2, 16, 16, 3), np.uint8))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error", [ENOSPC, EIO], ids=["ENOSPC", "EIO"])
def test_metrics_write(tmp_path, error) -> None:
    from wmrl_cli.logging import MetricsLogger

    logger = MetricsLogger(tmp_path, tensorboard=False)
    with logger:

        class Refusing:
            def write(self, text):
                raise error

            def flush(self):
                pass

            def close(self):
                pass

        logger._jsonl = Refusing()
        with pytest.raises(WriteError, match="metrics.jsonl"):
            logger.log({"loss": 1.0}, step=1)


def test_full_disk_mid_run_is_one_line_and_the_rerun_resumes(store, tmp_path, monkeypatch) -> None:
    """sft on a full disk at its second checkpoint: one line naming the disk, the first
    checkpoint kept, and the same command resumes."""
    import shutil as shutil_module
    from collections import namedtuple

    run = tmp_path / "run"
    real_save = torch.save

    def full_after_first(obj, f, *args, **kwargs):
        if "step_000002" in str(f):
            raise RuntimeError("basic_ios::clear: iostream error")
        return real_save(obj, f, *args, **kwargs)

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(torch, "save", full_after_first)
    monkeypatch.setattr(shutil_module, "disk_usage", lambda path: usage(10, 10, 0))
    result = sft(run, store, 3, "--set", "sft.save_every=1")
    # training had started (its plan and progress printed); the failure is one line, the last
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("error: cannot write") and "No space left on device" in last, last
    assert (run / "checkpoints" / "step_000001").is_dir()
    assert not (run / "checkpoints" / "step_000002").exists()
    monkeypatch.undo()
    resumed = sft(run, store, 3, "--set", "sft.save_every=1")
    assert resumed.exit_code == 0, resumed.output
    assert (run / "policy").is_dir()


def test_rollout_on_a_full_disk(tmp_path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez_compressed", refuse)
    args = ["rollout", "--policy", "expert", "--suite", "mw2", "--episodes-per-task", "1"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "st"), *SIM])
    one_error_line(result, 1, "No space left on device")


def test_sft_refuses_a_batch_the_host_memory_cannot_hold(tmp_path, monkeypatch) -> None:
    """The audit's `sft --batch-size 100000` planned 558 GiB, went on and was killed by the
    kernel; `--batch-size 1000000000` ended in a MemoryError traceback: both are one line
    (exit 2) naming the batch that fits, before anything is collected or written."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("wmrl_cli.runtime.host_memory_available_gib", lambda: 16.0)
    args = ["sft", "--suite", "mw2", "--steps", "1", "--num-workers", "0"]
    for batch in ("100000", "1000000000"):
        out = tmp_path / f"b{batch}"
        result = runner.invoke(app, [*args, "--batch-size", batch, "--out", str(out)])
        line = one_error_line(result, 2, "more than the 16.0 GiB of host memory available")
        assert "--batch-size " in line.split("fits: ")[1], line
        assert not out.exists()
    usage = runner.invoke(app, [*args, "--batch-size", "1e9", "--out", str(tmp_path / "e")])
    assert usage.exit_code == 2 and "--batch-size" in usage.output and "integer" in usage.output
    assert not (tmp_path / "e").exists() and "Traceback" not in usage.output


def test_sft_on_a_cpu_prints_no_table_of_zeros(tmp_path, expert_episodes) -> None:
    """63.9: the per-GPU plan's table, all zeros at a tiny size, is not printed on a CPU."""
    from wmrl_cli.data.episodes import EpisodeStore

    store = tmp_path / "demos"
    EpisodeStore(store).add(expert_episodes)
    result = sft(tmp_path / "run", store, 1)
    assert result.exit_code == 0, result.output
    assert "memory plan" not in result.output and "0.00" not in result.output
