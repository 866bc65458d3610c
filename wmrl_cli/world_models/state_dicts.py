"""Reading checkpoint files into state dicts, and loading state dicts strictly: the pieces both
world-model backends' converters (wan/converter.py, opensora/converter.py) and their models use.

Nothing downloaded executes code: `.pth` files go through `torch.load(weights_only=True)` only,
safetensors need no unpickling. Missing or unexpected keys are one `WmrlError` line.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from wmrl_cli.errors import UnsafeFileError, WmrlError

StateDict = dict[str, torch.Tensor]

# Prefixes wrapping a whole state dict (DiffSynth, ComfyUI, DDP); stripped when all keys have one.
WRAPPER_PREFIXES = ("model.diffusion_model.", "model.", "pipe.dit.", "module.")


def load_torch_file(path: str | Path) -> StateDict:
    """A `.pth`/`.pt`/`.bin` state dict, read with weights_only=True (no code can run)."""
    path = Path(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeFileError(
            f"refusing to load {path}: its pickle needs more than plain tensors "
            f"(torch.load weights_only=True rejected it)"
        ) from exc
    for wrapper in ("state_dict", "model", "module"):
        if isinstance(obj, Mapping) and isinstance(obj.get(wrapper), Mapping) and len(obj) <= 3:
            obj = obj[wrapper]
            break
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise WmrlError(f"{path} does not hold a state dict of tensors")
    return dict(obj)


def _index_shards(index_path: Path) -> list[Path]:
    try:
        weight_map = json.loads(index_path.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise WmrlError(f"{index_path} is not a safetensors index (no weight_map)") from exc
    return [index_path.parent / name for name in sorted(set(weight_map.values()))]


def load_state_dict_file(path: str | Path) -> StateDict:
    """Tensors from a checkpoint: a `.safetensors` file (with its shard siblings when an
    `*.safetensors.index.json` beside it lists it), an index file, a directory holding either,
    or a `.pth`/`.pt`/`.bin` file."""
    path = Path(path)
    if not path.exists():
        raise WmrlError(f"checkpoint not found: {path}")
    if path.is_dir():
        indexes = sorted(path.glob("*.safetensors.index.json"))
        files = sorted(path.glob("*.safetensors"))
        if indexes:
            path = indexes[0]
        elif len(files) == 1:
            path = files[0]
        else:
            raise WmrlError(
                f"{path}: expected one *.safetensors file or an index, found {len(files)}"
            )
    if path.name.endswith(".index.json"):
        shards = _index_shards(path)
    elif path.suffix == ".safetensors":
        shards = [path]
        for index in sorted(path.parent.glob("*.safetensors.index.json")):
            listed = _index_shards(index)
            if path in listed:
                shards = listed
                break
    elif path.suffix in (".pth", ".pt", ".bin", ".ckpt"):
        return load_torch_file(path)
    else:
        raise WmrlError(f"unsupported checkpoint format: {path}")
    state: StateDict = {}
    for shard in shards:
        if not shard.is_file():
            raise WmrlError(f"checkpoint shard missing: {shard}")
        state.update(load_file(str(shard)))
    return state


def strip_wrapper_prefix(state_dict: Mapping[str, torch.Tensor]) -> StateDict:
    """Remove a prefix (e.g. `model.`) that every key carries."""
    for prefix in WRAPPER_PREFIXES:
        if state_dict and all(k.startswith(prefix) for k in state_dict):
            return {k[len(prefix) :]: v for k, v in state_dict.items()}
    return dict(state_dict)


def load_into(
    module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str, assign: bool = False
) -> None:
    """Strict load that reports missing/unexpected keys as one WmrlError line."""
    try:
        result = module.load_state_dict(dict(state_dict), strict=False, assign=assign)
    except RuntimeError as exc:  # shape mismatches
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[1:4]) or first[0]
        raise WmrlError(f"cannot load {what}: {detail}") from exc
    problems = []
    if result.missing_keys:
        problems.append(f"missing {_key_list(result.missing_keys)}")
    if result.unexpected_keys:
        problems.append(f"unexpected {_key_list(result.unexpected_keys)}")
    if problems:
        raise WmrlError(f"cannot load {what}: " + "; ".join(problems))


def _key_list(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return f"{len(keys)} key(s): {shown}{more}"
