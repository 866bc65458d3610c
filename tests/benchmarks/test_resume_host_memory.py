"""benchmarks/resume_host_memory.py: a replicated resume maps the optimizer state, so that the
ranks of a node share its pages instead of each reading a private copy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
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


def test_a_resume_on_the_cpu_keeps_no_mapping_of_the_checkpoint(tmp_path, monkeypatch) -> None:
    # the optimizer keeps CPU tensors as loaded: copied, so that rotation frees the file
    import gc

    from wmrl_cli.training.checkpoints import load_checkpoint

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from resume_host_memory import build, write_checkpoint

    checkpoint = write_checkpoint(tmp_path, 4)
    model, optimizer = build(4)
    load_checkpoint(checkpoint, [optimizer], restore_rng_state=False)
    gc.collect()
    state_file = str(checkpoint / "training_state" / "state_0.pt")
    assert state_file not in Path("/proc/self/maps").read_text()
    assert all(s["exp_avg"].abs().sum() > 0 for s in optimizer.state.values())  # loaded
