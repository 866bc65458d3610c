"""Run directories, seeding and other process-level plumbing."""

from __future__ import annotations

import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.config import RunConfig, dump_config
from wmrl_cli.data.episodes import atomic_write_text


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def configure_threads(num_threads: int) -> None:
    """0 keeps torch's default. On a small shared CPU, oversubscribed threads (torch threads x
    simulator workers x ranks) slow everything down by an order of magnitude."""
    if num_threads > 0:
        import torch

        torch.set_num_threads(num_threads)


def bf16_supported(device: str = "cpu") -> bool:
    """Whether bf16 matmuls run natively: a CUDA GPU that supports them, or a CPU with AVX-512
    BF16 or AMX (read from /proc/cpuinfo; elsewhere assumed not)."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(setting: str, device: str = "cpu") -> Any:
    """The autocast dtype for a `precision` setting (None: float32): bf16 when asked for or, with
    "auto", when the device supports it; a one-line notice when bf16 was asked for where it is
    not supported (float32 then)."""
    import torch

    if setting == "fp32":
        return None
    if bf16_supported(device):
        return torch.bfloat16
    if setting == "bf16":
        from wmrl_cli.logging import console

        console.print(f"notice: this {device} has no native bf16; running in float32")
    return None


# Run directories this process created, removed again if the command fails on a user error
# before it wrote anything but config.yaml (`discard_unused_run_dirs`).
_CREATED: list[Path] = []


def make_run_dir(run_dir: Path) -> Path:
    """Create `run_dir` (and its parents), with one-line errors for a path that is a file or
    cannot be written; remembered for `discard_unused_run_dirs` when it is new."""
    from wmrl_cli.errors import ConfigError

    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"--out {run_dir}: is a file, expected a run directory")
    existed = run_dir.is_dir()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        probe = run_dir / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"--out {run_dir}: cannot create or write this directory ({reason})"
        ) from None
    if not existed:
        _CREATED.append(run_dir)
    return run_dir


def prepare_run_dir(config: RunConfig, command: str, default: Path | None = None) -> Path:
    """Create the run directory and write the resolved `config.yaml` into it."""
    run_dir = (
        config.output_dir or default or Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    run_dir = make_run_dir(Path(run_dir))
    config.output_dir = run_dir
    atomic_write_text(run_dir / "config.yaml", dump_config(config))
    return run_dir


def discard_unused_run_dirs() -> None:
    """After a user error: remove the run directories this process created that hold nothing
    but config.yaml (and empty folders), so that bad inputs leave nothing behind."""
    while _CREATED:
        run_dir = _CREATED.pop()
        if not run_dir.is_dir():
            continue
        files = [p for p in run_dir.rglob("*") if not p.is_dir()]
        if all(p == run_dir / "config.yaml" for p in files):
            shutil.rmtree(run_dir, ignore_errors=True)
