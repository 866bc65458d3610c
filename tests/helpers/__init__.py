"""What several test folders share and is not a fixture: the tiny runs' inputs and options,
hand-made episodes, a local Hugging Face Hub, files in the published layouts, a toy world, and
the scripts tests start as subprocesses (`python -m tests.helpers.kill_at ...`). Not a test
module: nothing here is collected."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository


def process_output(stdout: str, stderr: str, chars: int = 4000) -> str:
    """A failed subprocess's output for an assertion message: the end of each stream, without
    the interpreter's list of extension modules on a fatal error (one line of several thousand
    characters that pushed the cause, "terminate called ...", out of a 4,000-character tail)."""
    stderr = "\n".join(
        line for line in stderr.splitlines() if not line.startswith("Extension modules:")
    )
    return stdout[-chars // 2 :] + stderr[-chars:]
