"""Atomic training checkpoints and resume.

    run_dir/checkpoints/step_000100/
        model/                 the model's save_pretrained directory (config.json + safetensors)
        training_state/
            optimizer_0.pt     optimizer (and scheduler) state dicts, read with weights_only=True
            state.json         step, RNG states (python, numpy, torch) and trainer extras
    run_dir/checkpoints/latest the name of the newest complete checkpoint

A checkpoint is written into a temporary directory and renamed when complete, then `latest`
is replaced atomically, so a run killed at any moment resumes from the last complete one.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_dir, atomic_write_text

LATEST = "latest"
CHECKSUMS = "checksums.json"  # per file: sha256 (over 64 MiB: its size), checked on resume
_HASHED_BYTES = 64 * 2**20


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _checksum(path: Path) -> str:
    import hashlib

    size = path.stat().st_size
    if size > _HASHED_BYTES:
        return f"size:{size}"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verify_checkpoint(checkpoint: Path) -> None:
    """Every file of the checkpoint as it was saved (a checkpoint saved before checksums
    existed is taken as it is); one line naming the first damaged file otherwise."""
    sums_path = checkpoint / CHECKSUMS
    if not sums_path.is_file():
        return
    try:
        sums = json.loads(sums_path.read_text())
    except (OSError, ValueError) as exc:
        raise _unreadable(checkpoint, sums_path, exc) from None
    for name, expected in sorted(sums.items()):
        path = checkpoint / name
        if not path.is_file() or _checksum(path) != expected:
            raise _unreadable(checkpoint, path, "missing" if not path.is_file() else "damaged")


def _unreadable(checkpoint: Path, path: Path, why: Any) -> WmrlError:
    return WmrlError(
        f"{path}: cannot resume from this checkpoint ({why}); remove {checkpoint} to resume "
        "from the one before it, or pass --overwrite to start over"
    )


def capture_rng() -> dict[str, Any]:
    return {
        "python": _jsonable(random.getstate()),
        "numpy": np.random.get_state(legacy=False),
        "torch": torch.get_rng_state().tolist(),
    }


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(_tupled(state["python"]))
    np.random.set_state(state["numpy"])
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def _jsonable(value: Any) -> Any:
    return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else value


def _tupled(value: Any) -> Any:
    return tuple(_tupled(v) for v in value) if isinstance(value, list) else value


def _numpy_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _numpy_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_numpy_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return obj


def canonical_safetensors(directory: str | Path) -> None:
    """Rewrites the header of every safetensors file in `directory` with its metadata keys in
    sorted order. safetensors writes a metadata map of several keys (a world model's `format`
    and `wmrl`) in a per-process random order, so two saves of the same weights differed by
    their bytes (and sha256); the tensors and their offsets are left as they are."""
    for path in sorted(Path(directory).glob("*.safetensors")):
        with path.open("r+b") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
            meta = header.pop("__metadata__", None)
            if not isinstance(meta, dict) or list(meta) == sorted(meta):
                continue
            header = {"__metadata__": dict(sorted(meta.items())), **header}
            text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
            if len(text) > size:  # never: the same content, reordered
                continue
            f.seek(8)
            f.write(text.ljust(size, b" "))  # safetensors pads its header with spaces too


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    save_model: Callable[[Path], Any],
    stateful: list[Any],
    extra: dict[str, Any] | None = None,
    keep: int = 2,
) -> Path:
    """save_model(dir) writes the model; `stateful` are objects with state_dict() (optimizers,
    schedulers); extra is JSON-able trainer state (e.g. a reset sampler's). The `keep` newest
    step checkpoints stay (0: all of them, for a learning curve)."""
    root = Path(run_dir) / "checkpoints"
    name = f"step_{step:06d}"
    final = root / name
    with atomic_dir(final) as tmp:  # a failed write (a full disk) keeps the last checkpoint
        (tmp / "training_state").mkdir(parents=True)
        save_model(tmp / "model")
        canonical_safetensors(tmp / "model")
        for i, obj in enumerate(stateful):
            torch.save(obj.state_dict(), tmp / "training_state" / f"state_{i}.pt")
        state = {"step": step, "rng": capture_rng(), "extra": extra or {}}
        (tmp / "training_state" / "state.json").write_text(json.dumps(_numpy_safe(state)))
        sums = {name: _checksum(tmp / name) for name in _files(tmp)}
        (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1))
    atomic_write_text(root / LATEST, name)
    steps = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in steps[:-keep] if keep else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _complete(path: Path) -> bool:
    """Whether a checkpoint folder holds everything a resume reads."""
    return (path / "training_state" / "state.json").is_file() and (
        path / "model" / "config.json"
    ).is_file()


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint `latest` names, or, where that one is missing or incomplete, the newest
    complete `step_*` folder (with a one-line notice); None when there is none."""
    root = Path(run_dir) / "checkpoints"
    pointer = root / LATEST
    named = root / pointer.read_text().strip() if pointer.is_file() else None
    if named is not None and named.name.startswith("step_") and _complete(named):
        return named
    candidates = sorted(p for p in root.glob("step_*") if p.is_dir() and _complete(p))
    if not candidates:
        return None
    if named is not None and os.environ.get("RANK", "0") == "0":  # said once, by rank 0
        from wmrl_cli.logging import console

        console.print(
            f"notice: {pointer} names {named.name}, which is missing or incomplete; "
            f"resuming from {candidates[-1].name}"
        )
    return candidates[-1]


def _own_host_tensors(stateful: Any) -> None:
    """An optimizer keeps the tensors it loaded on the CPU as they were loaded, still mapping the
    checkpoint's file (its `step` counters; its moments in a CPU run): copied into the
    process's own memory, so that the file's space is freed when rotation removes it."""
    optimizer = getattr(stateful, "optimizer", stateful)  # a wrapper's (accelerate's, say)
    for state in getattr(optimizer, "state", {}).values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device.type == "cpu":
                state[key] = value.clone()


def load_checkpoint(
    checkpoint: Path, stateful: list[Any], restore_rng_state: bool = True
) -> dict[str, Any]:
    """Restores optimizer/scheduler states (weights_only) and RNG; returns {'step', 'extra',
    'rng'}. A trainer that draws random numbers between loading and its next step (encoding a
    cache, building a wrapper) passes restore_rng_state=False and calls restore_rng(rng) just
    before that step. A state file whose pickle would run code is refused in one line
    (UnsafeFileError)."""
    from wmrl_cli.rewards.loading import safe_torch_load

    verify_checkpoint(checkpoint)
    folder = checkpoint / "training_state"
    path = folder / "state.json"
    try:
        state = json.loads(path.read_text())
        for i, obj in enumerate(stateful):
            path = folder / f"state_{i}.pt"
            # mapped, not read: every rank of a replicated run loads the same optimizer state
            # (twice the policy's weights in float32), which would otherwise sit in host memory
            # once per rank while it moves to the GPU (benchmarks/resume_host_memory.py)
            obj.load_state_dict(safe_torch_load(path, mmap=True))
            _own_host_tensors(obj)
    except (OSError, RuntimeError, KeyError, ValueError) as exc:
        raise _unreadable(checkpoint, path, exc) from None
    if restore_rng_state:
        restore_rng(state["rng"])
    return {"step": int(state["step"]), "extra": state.get("extra", {}), "rng": state["rng"]}
