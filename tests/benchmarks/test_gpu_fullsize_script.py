"""benchmarks/gpu_fullsize.py at `--size tiny`: the code a lent GPU runs at full size (the
same code on tiny configs), on the CPU in well under a minute, writing its JSON and markdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT


def test_tiny_size_runs_every_section_and_writes_json_and_markdown(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "benchmarks/gpu_fullsize.py", "--size", "tiny", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_fullsize.json").read_text())
    assert result["size"] == "tiny" and result["device"] == "cpu"
    rows = result["imagination"]
    assert {r["backend"] for r in rows} == {"wan", "opensora"}
    assert all(r["frames_per_s"] > 0 for r in rows)
    wan = [(r["envs"], r["vae_batch"]) for r in rows if r["backend"] == "wan"]
    assert wan == [(2, None), (2, 4)]  # and again with the plan's world_model.vae_batch
    for backend in ("wan", "opensora"):  # where a chunk's time goes, beside its frames/s
        (split,) = [r for r in rows if r["backend"] == backend and "split_s" in r]
        shares = [split[f"{part}_frac"] for part in ("denoiser", "decode", "encode", "other")]
        assert split["vae_batch"] is None and sum(shares) == pytest.approx(1.0)
        assert min(shares[:2]) > 0.05 and shares[3] < 0.5  # the parts hold the time
    variants = [r["variant"] for r in result["policy"]]
    assert variants == [
        "LoRA rank 32, float32 weights",
        "full fine-tuning, float32 weights",
        "full fine-tuning, bf16 weights",
    ]
    assert all(r["seconds"] > 0 and r["plan_gib"] >= 0 for r in result["policy"])
    step = result["grpo_step"]
    assert step["envs"] == 2 and step["seconds"] > 0 and step["plan_gib"] > 0
    assert step["update_s"] > 0 and step["rollout_s"] > 0
    assert len(step["steps"]) == 3 and all(s["update_s"] > 0 for s in step["steps"])
    table = (tmp_path / "gpu_fullsize.md").read_text()
    assert "| wan | 1 | 2 | all |" in table and "| wan | 1 | 2 | 4 |" in table
    assert "| wan-spatial-grpo, LoRA 32 | 3 | 2 | 16 |" in table
    assert "| where a chunk's time goes |" in table
    assert result["wall_s"] < 60
