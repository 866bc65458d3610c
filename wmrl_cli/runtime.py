"""Seeding, threads, precision, the device's memory and other process-level plumbing (run
directories: run_dirs.py; ranks: ranks.py)."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def stage_seed(seed: int, stage: str) -> int:
    """The seed of one stage of a run: a hash of the run seed and the stage's name, so that a
    stage started from scratch draws the same random numbers whatever ran before it in the
    process (a stage skipped on a rerun, a cache found instead of recomputed)."""
    import hashlib

    digest = hashlib.sha256(f"{seed}/{stage}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % 2**63


def seed_stage(seed: int, stage: str) -> None:
    """Seeds Python's, numpy's and torch's global RNGs with `stage_seed(seed, stage)`."""
    seed_everything(stage_seed(seed, stage))


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


def resolve_precision(setting: str | None, device: str = "cpu") -> Any:
    """The autocast dtype for a `precision` setting (None: float32): bf16 when asked for or, with
    "auto", when the device supports it (a GPU, or a CPU with native bf16); unset (None): bf16
    on a CUDA GPU that supports it, float32 on any CPU; a one-line notice when bf16 was asked
    for where it is not supported (float32 then)."""
    import torch

    if setting == "fp32" or (setting is None and not str(device).startswith("cuda")):
        return None
    if bf16_supported(device):
        return torch.bfloat16
    if setting == "bf16":
        from wmrl_cli.logging import console

        console.print(f"notice: this {device} has no native bf16; running in float32")
    return None


def physical_gpu(index: int) -> str:
    """The GPU that CUDA's device `index` is, as nvidia-smi and NVML name it (they ignore
    CUDA_VISIBLE_DEVICES): its entry there (an index or a UUID), else the index itself."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [v for v in visible if v]
    return visible[index] if index < len(visible) else str(index)


def gpu_memory_gib(index: int = 0) -> float:
    """The total memory of CUDA device `index` in GiB, read without creating a CUDA context in
    this process (a launcher that asked CUDA would hold about 0.5 GiB of GPU 0 beside rank 0):
    NVML (pynvml) where installed, else `nvidia-smi --query-gpu=memory.total`, else CUDA's
    device properties (CUDA initialised, still no context)."""
    import subprocess

    gpu = physical_gpu(index)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = (
                pynvml.nvmlDeviceGetHandleByUUID(gpu)
                if gpu.startswith(("GPU-", "MIG-"))
                else pynvml.nvmlDeviceGetHandleByIndex(int(gpu))
            )
            return pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no pynvml, no NVML library, or a device it cannot name
        pass
    query = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", gpu]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True)
        return float(out.stdout.split()[0]) / 1024  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        import torch

        return torch.cuda.get_device_properties(index).total_memory / 2**30


def host_memory_available_gib() -> float | None:
    """The host memory the kernel can give without swapping, in GiB: /proc/meminfo's
    MemAvailable, else psutil's; None where neither says."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return psutil.virtual_memory().available / 2**30
    except ImportError:
        return None


def fresh_accelerator(dist_timeout_minutes: float, **kwargs: Any) -> Any:
    """An Accelerator with exactly these settings, whatever one made before it in this process
    had: Accelerate keeps one process-wide state that a later Accelerator must match, and
    co-evolve runs stages with bf16 autocast (RL) and without (world-model training) one after
    another, in either order when it resumes. The process group (PartialState) is kept: the
    first Accelerator of a process of several ranks makes it, with `dist_timeout_minutes`
    (`training.dist_timeout_minutes`) as the time a collective waits for the other ranks
    before the group stops (NCCL's own default is 10 minutes, gloo's 30; Accelerate's
    `InitProcessGroupKwargs`)."""
    from datetime import timedelta

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    AcceleratorState._reset_state(reset_partial_state=False)  # Accelerate's own tests do this
    timeout = InitProcessGroupKwargs(timeout=timedelta(minutes=dist_timeout_minutes))
    return Accelerator(kwargs_handlers=[timeout], **kwargs)


def release_memory() -> None:
    """On a GPU, what a finished stage held, returned before the next starts: reference cycles
    collected (a prepared model and its Accelerator refer to each other), then the GPU's cached
    blocks, so that each stage of a co-evolve run finds the memory its plan counts on. Nothing
    on a CPU, where the collector frees host memory in its own time (a full collection after
    each stage cost co-evolve's graph tests seconds apiece)."""
    import gc

    import torch

    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()
