"""benchmarks/gpu_fullsize.py at `--size tiny`: the code a lent GPU runs at full size (the
same code on tiny configs), on the CPU (about a minute alone on 2 cores), writing its JSON and
markdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
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
        "LoRA rank 32, float32 weights (its frozen base bf16)",
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
    assert result["wall_s"] > 0  # recorded; how long it takes is a benchmark's, not a test's


@pytest.mark.slow  # the suite's 15-minute budget
def test_the_first_pass_measures_what_the_plan_needs_most(tmp_path) -> None:
    """`--pass first`: the two GRPO steps (the second holds AdamW's moments), the LoRA and bf16
    micro-batches and imagination at its smallest count; the rest waits for `--pass rest`."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "benchmarks/gpu_fullsize.py", "--size", "tiny", "--pass", "first"]
    proc = subprocess.run(
        [*cmd, "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_fullsize.json").read_text())
    assert [r["variant"] for r in result["policy"]] == [
        "LoRA rank 32, float32 weights (its frozen base bf16)",
        "full fine-tuning, bf16 weights",
    ]
    assert len(result["grpo_step"]["steps"]) == 2 and result["done"]
    rows = result["imagination"]
    assert [(r["backend"], r["vae_batch"]) for r in rows] == [("wan", None), ("opensora", None)]
    assert not any("split_s" in r for r in rows)


FAKES = {  # stand-ins that log how the device script called them
    "python3": 'echo "python3 $*" >> "$LOG"',
    "timeout": 'echo "timeout $1" >> "$LOG"; shift; "$@"',
    "nvidia-smi": 'for i in $(seq 1 "$GPUS"); do echo "GPU $i: fake"; done',
}


def _device_script(tmp_path, gpus: int, *args: str) -> tuple[int, list[str], str]:
    bin_dir, wheels = tmp_path / "bin", tmp_path / "wheels"
    for folder in (bin_dir, wheels):
        folder.mkdir(exist_ok=True)
    (wheels / "a-1-py3-none-any.whl").write_text("")
    for name, body in FAKES.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "WHEELS": str(wheels),
        "LOG": str(log),
        "GPUS": str(gpus),
    }
    cmd = ["bash", "benchmarks/gpu/gpu_fullsize_device.sh", str(tmp_path / "out"), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    calls = [line.split(" --out")[0] for line in log.read_text().splitlines()]
    return proc.returncode, calls, proc.stdout + proc.stderr


def test_the_device_script_runs_the_first_pass_then_the_rest_behind_a_flag(tmp_path) -> None:
    code, calls, _ = _device_script(tmp_path, 1)
    assert code == 0
    assert calls[0].startswith("python3 -m pip install")
    assert calls[1:] == [
        "python3 benchmarks/gpu_fullsize.py --pass first",
        "timeout 40",
        "python3 benchmarks/wm_train_memory.py --gpu",
    ]
    code, calls, said = _device_script(tmp_path, 1, "--all")
    assert code == 0 and calls[-1] == "python3 benchmarks/gpu_fullsize.py --pass rest"
    assert "fsdp2: skipped, 1 GPU(s) here" in said
    code, calls, _ = _device_script(tmp_path, 2, "--all")  # two GPUs: the 2-rank NCCL step
    assert code == 0 and calls[-2:] == [
        "python3 -m torch.distributed.run --nproc_per_node 2 -m tests.helpers.sharding_worker "
        f"{tmp_path / 'out' / 'fsdp2'} full bf16 lora",
        f"python3 - {tmp_path / 'out' / 'fsdp2'}",
    ]
    code, calls, said = _device_script(tmp_path, 1, "--everything")
    assert code == 2 and calls == [] and "unknown option --everything" in said
