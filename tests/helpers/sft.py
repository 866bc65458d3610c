"""The tiny `wmrl sft` run: a policy of one small layer at 32x32, batches of 4."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from wmrl_cli.cli.app import app

runner = CliRunner()
TINY = [
    "--set",
    "sft.llm_layers=1",
    "--set",
    "sft.llm_hidden=32",
    "--set",
    "sft.vision_layers=1",
    "--set",
    "sft.vision_hidden=16",
    "--set",
    "sft.fused_vision=false",
    "--set",
    "sft.warmup_steps=1",
    "--set",
    "sft.log_every=1",
    "--set",
    "num_threads=1",
    "--image-size",
    "32",
    "--batch-size",
    "4",
]


def run_sft(out: Path, store: Path, steps: int, *extra: str):
    """`wmrl sft` on mw3 from the episode store `store`, in this process (a CliRunner result)."""
    return runner.invoke(
        app,
        [
            "sft",
            "--suite",
            "mw3",
            "--data",
            str(store),
            "--steps",
            str(steps),
            "--out",
            str(out),
            *TINY,
            *extra,
        ],
    )
