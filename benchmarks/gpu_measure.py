"""Measuring on a GPU: the time budget, GPU utilization, peak memory, out-of-memory errors
recorded rather than raised, and the time a world model's parts take. Each also runs on the CPU
(no utilization, no peaks), so that benchmarks/gpu_fullsize.py runs its code at tiny size in the
test suite."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

OOM = "out of memory"


@dataclass
class Budget:
    total: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.total - (time.monotonic() - self.start)


class Utilization:
    """GPU utilization (%) sampled every 0.2 s while inside (torch.cuda.utilization, else
    nvidia-smi); None off a GPU or where neither answers."""

    def __init__(self, device: torch.device) -> None:
        self.on = device.type == "cuda"
        self.samples: list[float] = []
        self._stop = threading.Event()

    @staticmethod
    def read() -> float | None:
        try:
            return float(torch.cuda.utilization())
        except Exception:  # no pynvml: ask nvidia-smi
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                return float(out.split()[0])
            except Exception:
                return None

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            value = self.read()
            if value is None:
                return
            self.samples.append(value)

    def __enter__(self) -> Utilization:
        if self.on:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.on:
            self._stop.set()
            self._thread.join()

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    """GiB the tensors took at most since `reset_peak` (the allocator reserves somewhat more:
    `peaks`)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def peaks(device: torch.device) -> dict[str, float | None]:
    reserved = torch.cuda.max_memory_reserved(device) / 2**30 if device.type == "cuda" else None
    return {"peak_gib": peak_gib(device), "peak_reserved_gib": reserved}


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    """The allocator's OutOfMemoryError, a kernel's "out of memory", or cuBLAS / cuDNN failing
    to allocate their workspace (what a nearly full GPU raises from a library call)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return any(m in text for m in (OOM, "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED"))


def failure(exc: BaseException) -> str:
    """What a row records of a measurement's exception: "out of memory", or the exception's
    type and first line (its traceback goes to stderr). The run goes on either way."""
    if is_oom(exc):
        return OOM
    traceback.print_exception(exc, file=sys.stderr)
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}"


def drop_caches(model: Any) -> None:
    """What a model holds beyond its weights after a failed call: the Wan VAE's causal feature
    caches (diffusers clears them at the start and end of a call, not on an exception)."""
    clear = getattr(getattr(model, "vae", None), "clear_cache", None)
    if callable(clear):
        clear()


# The parts of an imagined chunk, by (attribute of the world model, method): the denoiser (every
# sampling step), the VAE's decode of the chunk and its encode of the next window.
PARTS = {
    "denoiser": ("transformer", "forward"),
    "decode": ("vae", "decode"),
    "encode": ("vae", "encode"),
}


@contextlib.contextmanager
def part_times(model: Any, device: torch.device) -> Iterator[dict[str, float]]:
    """Seconds each of `PARTS` takes while inside, summed over its calls; each call is timed
    between two device synchronizations (which cost the GPU the overlap of one call's launch
    with the previous call's kernels: the split is of a run a little slower than a plain one).
    Wraps the instances' methods, and unwraps them on the way out."""
    seconds = dict.fromkeys(PARTS, 0.0)

    def timed(part: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            sync(device)
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                sync(device)
                seconds[part] += time.perf_counter() - start

        return wrapper

    owners = [(getattr(model, owner), method) for owner, method in PARTS.values()]
    # what each instance held under the name before (a compiled or prepared forward), if anything
    before = [vars(owner).get(method) for owner, method in owners]
    for part, (owner, method) in zip(PARTS, owners, strict=True):
        setattr(owner, method, timed(part, getattr(owner, method)))
    try:
        yield seconds
    finally:
        for (owner, method), held in zip(owners, before, strict=True):
            if held is None:
                delattr(owner, method)  # the class's method again
            else:
                setattr(owner, method, held)
