"""Output hygiene: tables are never cut (logs) nor ellipsized (narrow terminals), a bad preset
file is one line, every command that trains or samples takes --seed, and multi-rank runs print
no third-party noise."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.table import Table
from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.config import list_presets
from wmrl_cli.logging import console

runner = CliRunner()
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _lines(output: str) -> list[str]:
    return [line for line in _ANSI.sub("", output).splitlines() if line.strip()]


def test_table_in_a_log_keeps_every_cell_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TTY_COMPATIBLE", "0")  # no terminal, even under pytest -s
    cells = ["handle-press-side-v3", "precision (judge vs simulator)", "TP/FP/FN/TN per task"]
    table = Table(title="a wide table")
    for name in ("task", "precision of the judge on held-out replays", "TP/FP/FN/TN"):
        table.add_column(name, justify="right")
    table.add_row(*cells)
    table.add_row("x" * 120, "0.713", "1/2/3/4")
    with console.capture() as capture:
        console.print(table)
    text = capture.get()
    assert not console.is_terminal
    assert "…" not in text
    for cell in (*cells, "x" * 120, "precision of the judge on held-out replays"):
        assert cell in text, text
    assert max(map(len, text.splitlines())) > 80  # laid out wider than $COLUMNS
    with console.capture() as capture:
        console.rule("stage: x")  # the rest keeps the console's width
    assert len(capture.get().rstrip("\n")) == 80


def test_presets_list_on_a_narrow_terminal_shows_every_name() -> None:
    # TTY_COMPATIBLE=1: rich takes the output for a terminal, of $COLUMNS columns
    result = runner.invoke(app, ["presets", "list"], env={"COLUMNS": "40", "TTY_COMPATIBLE": "1"})
    assert result.exit_code == 0, result.output
    lines = _lines(result.output)
    assert max(map(len, lines)) <= 40, result.output
    assert "…" not in result.output
    names = [line.split("│")[1].strip() for line in lines if line.startswith("│")]
    assert set(list_presets()) <= set(names), names


def test_presets_list_in_a_log_is_one_row_per_preset() -> None:
    result = runner.invoke(app, ["presets", "list"], env={"COLUMNS": "80", "TTY_COMPATIBLE": "0"})
    assert result.exit_code == 0, result.output
    for name, description in list_presets().items():
        assert f"│ {name}" in result.output
        assert description in result.output  # never wrapped nor cut


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"description: caf\xe9\nsimulator:\n  seed: 1\n", "not a UTF-8 text file"),
        (b"simulator: [1, 2\n", "not valid YAML"),
        (b"- simulator\n- policy\n", "expected a mapping of config sections, got list"),
    ],
)
def test_a_bad_preset_file_is_one_line_exit_2(content: bytes, needle: str, tmp_path: Path) -> None:
    path = tmp_path / "preset.yaml"
    path.write_bytes(content)
    run = str(tmp_path / "run")
    for args in (["presets", "show", str(path)], ["eval", "--preset", str(path), "--out", run]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        lines = _lines(result.output)
        assert len(lines) == 1 and lines[0].startswith("error:"), result.output
        assert str(path) in lines[0] and needle in lines[0]
    assert not Path(run).exists()


@pytest.mark.parametrize("command", ["train-wm", "train-reward"])
def test_training_commands_take_a_seed(command: str) -> None:
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--seed" in result.output, result.output


def test_train_reward_seed_reproduces_and_changes_the_run(tmp_path: Path) -> None:
    from tests.helpers.episodes import visible_success_episode
    from wmrl_cli.data.episodes import EpisodeStore

    EpisodeStore(tmp_path / "eps").add(
        [visible_success_episode(i, succeed=i % 3 != 0) for i in range(12)]
    )

    def losses(seed: int, name: str) -> list[dict[str, float]]:
        out = tmp_path / name
        args = ["train-reward", "--data", str(tmp_path / "eps"), "--out", str(out)]
        args += ["--steps", "4", "--width", "4", "--set", "reward_model.batch_size=8"]
        result = runner.invoke(app, [*args, "--seed", str(seed)])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in (out / "metrics.jsonl").open()]
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]

    first = losses(1, "a")
    assert losses(1, "b") == first
    assert losses(2, "c") != first


def test_ranks_start_quiet(tmp_path: Path) -> None:
    """torchrun's OMP_NUM_THREADS banner and DDP's gradient-stride warning stay out of the
    ranks' output; a rank's failure is its status, without torchrun's 30-line report."""
    import subprocess
    import sys

    from wmrl_cli.ranks import rank_environment

    env = rank_environment()
    assert env["OMP_NUM_THREADS"]
    warn = "import warnings; warnings.warn('Grad strides do not match bucket view strides. x')"
    quiet = subprocess.run([sys.executable, "-c", warn], env=env, capture_output=True, text=True)
    assert quiet.stderr == ""
    script = tmp_path / "rank.py"
    script.write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    args = ["--nproc_per_node=2", "--master_port=0", str(script)]
    cmd = [sys.executable, "-m", "wmrl_cli.ranks", *args]
    failed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert failed.returncode == 3
    assert failed.stdout == failed.stderr == "", failed.stderr


@pytest.mark.slow  # two ranks of RL in the simulator: ~40 s on an idle 2-core CPU
def test_two_rank_run_prints_only_its_own_lines(tmp_path: Path, expert_episodes) -> None:
    """A 2-rank GRPO run in the simulator printed 13 lines on stderr: torchrun's banner and
    DDP's gradient-stride warning per rank around the one progress line."""
    import os
    import subprocess
    import sys

    from tests.helpers.sft import TINY
    from tests.helpers.train_policy import sim_args
    from wmrl_cli.data.episodes import EpisodeStore

    EpisodeStore(tmp_path / "demos").add(expert_episodes)
    args = ["sft", "--suite", "mw3", "--data", str(tmp_path / "demos"), "--steps", "2"]
    sft = runner.invoke(app, [*args, "--out", str(tmp_path / "sft"), *TINY])
    assert sft.exit_code == 0, sft.output
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cmd = [sys.executable, "-m", "wmrl_cli", *sim_args(tmp_path, tmp_path / "ddp", 2, envs=8)]
    proc = subprocess.run(
        [*cmd, "--num-processes", "2"], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr
    for noise in ("OMP_NUM_THREADS", "Grad strides", "Warning", "*****"):
        assert noise not in proc.stdout + proc.stderr, proc.stderr
    progress, *others = _lines(proc.stderr)
    assert progress.startswith("grpo in the simulator: 2/2"), proc.stderr
    # and, where no group had two outcomes, the run's own warning that it made no update, once
    assert len(others) <= 1 and all("made no update" in o for o in others), others


def test_ctrl_c_while_a_renderer_is_built_leaves_no_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C that cut a mujoco.Renderer's construction short printed a traceback from its
    __del__ after "interrupted" (co-evolve, a rollout): it now waits for the renderer."""
    import gc
    import signal
    import sys

    import mujoco

    from wmrl_cli.sims.metaworld_envs import MetaWorldEnvs
    from wmrl_cli.sims.suites import get_suite

    original = mujoco.Renderer.__init__

    def interrupted(self, *args, **kwargs) -> None:
        signal.raise_signal(signal.SIGINT)  # Ctrl-C as the renderer is being built
        original(self, *args, **kwargs)

    unraisable: list[object] = []
    monkeypatch.setattr(mujoco.Renderer, "__init__", interrupted)
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    # Python's own Ctrl-C handler, also where the suite runs as a background job (which starts
    # with SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        envs = MetaWorldEnvs(get_suite("mw3"), 1, 32, "corner", 8, False, base_seed=7)
        with pytest.raises(KeyboardInterrupt):
            envs.reset([0], None)
        envs.close()
    finally:
        signal.signal(signal.SIGINT, previous)
    gc.collect()
    assert unraisable == []


def test_simulator_workers_leave_ctrl_c_to_the_parent() -> None:
    import signal

    from wmrl_cli.sims.workers import Worker

    worker = Worker("tests.helpers.mask_probe:MaskProbe", {}, in_process=False)
    try:
        worker.send("blocked")
        assert int(signal.SIGINT) in worker.receive()
        worker.send("blocked")  # an interruption leaves a reply unread: close() still works
    finally:
        worker.close()
    assert not worker._proc.is_alive() and worker._proc.exitcode == 0
    assert int(signal.SIGINT) not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
