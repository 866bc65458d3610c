"""What several test folders share and is not a fixture: the tiny runs' inputs and options,
hand-made episodes, a local Hugging Face Hub, files in the published layouts, a toy world, and
the scripts tests start as subprocesses (`python -m tests.helpers.kill_at ...`). Not a test
module: nothing here is collected."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
