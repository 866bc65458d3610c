"""Run directories, seeding and other process-level plumbing."""

from __future__ import annotations

import random
import time
from pathlib import Path

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


def prepare_run_dir(config: RunConfig, command: str, default: Path | None = None) -> Path:
    """Create the run directory and write the resolved `config.yaml` into it."""
    run_dir = (
        config.output_dir or default or Path("runs") / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    config.output_dir = run_dir
    atomic_write_text(run_dir / "config.yaml", dump_config(config))
    return run_dir
