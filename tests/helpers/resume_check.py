"""What the resume tests share: the tiny runs of each training command, running them as
subprocesses (killed at a chosen call by tests/helpers/kill_at.py, or after a delay with SIGKILL
to their whole process group), and the comparison of a resumed run with an uninterrupted one
(weights by sha256, metrics.jsonl without wall-clock columns, no step logged twice)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ROOT
from tests.helpers.sft import TINY

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl"}


def sft_args(out: Path) -> list[str]:
    """sft on mw2: one demonstration per task collected and cached, 4 steps, a checkpoint
    every 2."""
    return [
        "sft", "--suite", "mw2", "--demos-per-task", "1", "--steps", "4",
        "--num-workers", "0", "--set", "simulator.max_steps=120",
        "--set", "simulator.num_envs=2", "--set", "sft.save_every=2",
        "--out", str(out), *TINY,
    ]  # fmt: skip


def train_reward_args(data: Path, out: Path) -> list[str]:
    """train-reward (no checkpoints: a rerun trains again) on the visible-success episodes."""
    return [
        "train-reward", "--data", str(data), "--out", str(out),
        "--steps", "40", "--width", "4", "--set", "reward_model.batch_size=8",
    ]  # fmt: skip


def train_wm_args(data: Path, out: Path) -> list[str]:
    """train-wm at 32x32: 3 autoencoder steps, 4 denoiser steps, a checkpoint and a
    validation every 2."""
    return [
        "train-wm", "--data", str(data), "--out", str(out),
        "--vae-steps", "3", "--steps", "4",
        "--set", "simulator.image_size=32", "--set", "world_model.batch_size=2",
        "--set", "world_model.val_every=2", "--set", "world_model.save_every=2",
        "--set", "world_model.val_episodes=1", "--set", "world_model.val_horizon=8",
        "--set", "world_model.window_stride=16", "--set", "world_model.num_inference_steps=1",
        "--set", "num_threads=1",
    ]  # fmt: skip


def co_evolve_args(out: Path) -> list[str]:
    return ["co-evolve", "--profile", "smoke", "--out", str(out)]


# The model folder of each co-evolve smoke stage.
CO_EVOLVE_MODELS = {
    "sft": "policy", "wm_base": "world_model", "rm_base": "reward_model",
    "stage1": "policy", "wm_evo1": "world_model",
    "stage2": "policy", "frozen_control": "policy",
}  # fmt: skip


def co_evolve_models(run_dir: Path) -> dict[str, str]:
    """CO_EVOLVE_MODELS as the finished run `run_dir` made them: without the frozen control
    where its report says stage 2 was the control (acceptance kept the current world model)."""
    report = json.loads((run_dir / "report.json").read_text())
    if report.get("frozen_control_same_as"):
        return {k: v for k, v in CO_EVOLVE_MODELS.items() if k != "frozen_control"}
    return dict(CO_EVOLVE_MODELS)


def run(args: list[str], *kill_points: str) -> subprocess.CompletedProcess:
    """`wmrl ARGS`, killed at `kill_points` ("MODULE:ATTR before|after N", see kill_at.py)."""
    points = [part for point in kill_points for part in point.split()]
    cmd = [sys.executable, "-m", "tests.helpers.kill_at", *points, "--", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    expected = -signal.SIGKILL if kill_points else 0
    assert proc.returncode == expected, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def run_for(
    args: list[str], seconds: float | None, log: Path, note: str = ""
) -> tuple[bool, float]:
    """`wmrl ARGS` in a process group of its own, SIGKILLed (the whole group: no cleanup, as a
    kill -9 or an out-of-memory kill) after `seconds` unless it finished first; None lets it
    finish. Returns (killed, seconds it ran); its output is appended to `log`, `note` to the
    message of a failure."""
    with log.open("a") as out:
        out.write(f"\n$ wmrl {' '.join(args)}  (kill after {seconds} s)\n")
        out.flush()
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "wmrl_cli", *args],
            cwd=ROOT, env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        killed = False
        try:
            code = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code, killed = proc.wait(), True
        elapsed = time.monotonic() - start
        out.write(f"$ {'killed' if killed else f'exit {code}'} after {elapsed:.2f} s\n")
    _wait_group_gone(proc.pid, note)
    assert killed or code == 0, f"exit {code}{note}: {log.read_text()[-3000:]}"
    return killed, elapsed


def _wait_group_gone(pgid: int, note: str, timeout: float = 30.0) -> None:
    """Every process of the group (simulator workers included) has ended."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"processes of group {pgid} still running{note}"
        time.sleep(0.1)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def weights(directory: Path) -> dict[str, str]:
    files = sorted(directory.rglob("*.safetensors"))
    assert files, f"no weights in {directory}"
    return {str(f.relative_to(directory)): sha256(f) for f in files}


def metrics(run: Path) -> list[dict]:
    """metrics.jsonl without wall-clock times."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def assert_same_run(straight: Path, resumed: Path, model: str, note: str = "") -> None:
    assert weights(straight / model) == weights(resumed / model), f"{model} weights differ{note}"
    a, b = metrics(straight), metrics(resumed)
    assert a == b, f"metrics.jsonl differs{note}"
    keys = [(row["step"], tuple(sorted(row))) for row in b]
    assert len(keys) == len(set(keys)), f"a step was logged twice{note}"
