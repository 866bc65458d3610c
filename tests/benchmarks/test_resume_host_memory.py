"""benchmarks/resume_host_memory.py: a replicated resume maps the optimizer state, so that the
ranks of a node share its pages instead of each reading a private copy."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT


def test_the_mapped_resume_adds_no_private_copy_of_the_state(tmp_path) -> None:
    script = ROOT / "benchmarks" / "resume_host_memory.py"
    out = tmp_path / "out"
    args = [sys.executable, str(script), "--params-m", "8", "--ranks", "2", "--out", str(out)]
    subprocess.run(args, check=True, capture_output=True, timeout=300)
    results = json.loads((out / "resume_host_memory.json").read_text())
    state = results["state_mib"]  # 2 layers of 2048 x 2048: 2 float32 moments, 64 MiB
    assert state == 64
    for row in results["read"]:  # each rank's own copy
        assert row["anon_added_mib"] > 0.9 * state
    for row in results["mapped"]:  # the file's pages, shared
        assert row["anon_added_mib"] < 0.1 * state
        assert row["file_added_mib"] > 0.9 * state
    assert "| mapped | " in (out / "resume_host_memory.md").read_text()
