"""Load and save reward models: published `.pth` files (safely) and wmrl model directories.

A `.pth` is read only through `torch.load(weights_only=True)`: tensors and plain containers
come back, anything that would import or call code is refused with UnsafeFileError. The
architecture and its size are inferred from the state-dict keys and shapes; a file that does
not match the inferred model fails with one line naming the offending keys.

A wmrl model directory holds config.json ({"kind": ..., config fields}) and model.safetensors;
a latent judge's holds its frozen encoder's weights too (rewards/latent.py), so that it loads
without its world model.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import uuid
import zipfile
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn

from wmrl_cli.errors import UnsafeFileError, WmrlError
from wmrl_cli.files import save_tensors
from wmrl_cli.rewards.latent import LatentRewConfig, LatentRewModel
from wmrl_cli.rewards.resnet import (
    ResnetRewConfig,
    ResnetRewModel,
    TaskEmbedResnetRewModel,
    build_resnet_reward_model,
)
from wmrl_cli.rewards.videomae import VideoMAERewardModel, VideoMAERewConfig

AnyRewardModel = ResnetRewModel | TaskEmbedResnetRewModel | VideoMAERewardModel | LatentRewModel

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model")
_PREFIXES = ("module.", "model.")
# Checkpoints saved by transformers 4.x name VideoMAE's query/value biases q_bias / v_bias.
_LEGACY_VIDEOMAE = {
    "attention.attention.q_bias": "attention.attention.query.bias",
    "attention.attention.v_bias": "attention.attention.value.bias",
}


def _inert(*args: Any, **kwargs: Any) -> None:
    return None


# RLinf's reward checkpoints were pickled by a training script and may reference its
# `__main__.train`; RLinf loads them by mapping that name to a no-op. Mapping it to this inert
# function admits those files while still running nothing that comes from the file.
_STAND_INS = [(_inert, "__main__.train")]
# Pickle opcodes that import or call something (GLOBAL, INST, OBJ, BUILD, REDUCE, NEWOBJ,
# EXT1-4, NEWOBJ_EX, STACK_GLOBAL): the weights-only unpickler stops at them.
_CODE_OPCODES = {ord(c) for c in "ciobR"} | {0x81, 0x82, 0x83, 0x84, 0x92, 0x93}
_CODE_REFUSALS = re.compile(r"GLOBAL|unrecognized function|create new object|Can only build")


def _refused_for_code(message: str) -> bool:
    """Whether torch's weights-only refusal is about code (rather than a damaged file)."""
    if _CODE_REFUSALS.search(message):
        return True
    operand = re.search(r"Unsupported operand (\d+)", message)
    return operand is not None and int(operand.group(1)) in _CODE_OPCODES


@dataclass
class RewardCheckpoint:
    """The tensors of a checkpoint (prefixes stripped) and the threshold it carried, if any."""

    state_dict: dict[str, torch.Tensor]
    threshold: float | None


def safe_torch_load(path: str | Path, mmap: bool = False) -> Any:
    """torch.load(path, map_location='cpu', weights_only=True), with one-line errors. `mmap`:
    the tensors stay in the file's pages (shared page cache, copied on write) instead of being
    read into the process's own memory; a file torch cannot map (not a zip archive) is read."""
    path = Path(path)
    if not path.is_file():
        raise WmrlError(f"no such file: {path}")
    if mmap and not zipfile.is_zipfile(path):
        mmap = False  # so that a damaged or legacy file fails as it would when read
    try:
        with torch.serialization.safe_globals(_STAND_INS):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        if _refused_for_code(str(exc)):
            names = sorted(set(re.findall(r"GLOBAL ([\w.]+)", str(exc))))
            what = ", ".join(names) if names else "objects other than tensors and containers"
            raise UnsafeFileError(
                f"refusing to load {path}: its pickle would import or run code ({what}); only "
                "tensors and plain containers are accepted"
            ) from None
        raise WmrlError(f"{path} is not a readable PyTorch checkpoint (damaged pickle)") from None
    except Exception as exc:  # torch raises many types for truncated or foreign files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise WmrlError(
            f"{path} is not a readable PyTorch checkpoint ({type(exc).__name__}: {first})"
        ) from None


def strip_prefixes(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove wrapper prefixes (`module.` from DDP, `model.`) shared by every key."""
    changed = True
    while changed and state_dict:
        changed = False
        for prefix in _PREFIXES:
            if all(k.startswith(prefix) for k in state_dict):
                state_dict = {k[len(prefix) :]: v for k, v in state_dict.items()}
                changed = True
    return state_dict


def _as_threshold(value: Any) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def extract_state_dict(obj: Any, source: str | Path) -> RewardCheckpoint:
    """The state dict inside a loaded checkpoint: the object itself or its `state_dict`,
    `model_state_dict` or `model` entry; plus `threshold` (or `metrics.best_threshold`)."""
    threshold = None
    if isinstance(obj, dict):
        threshold = _as_threshold(obj.get("threshold"))
        metrics = obj.get("metrics")
        if threshold is None and isinstance(metrics, dict):
            threshold = _as_threshold(metrics.get("best_threshold"))
        for key in _WRAPPER_KEYS:
            if isinstance(obj.get(key), dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not obj:
        raise WmrlError(f"{source} holds no state dict (found {type(obj).__name__})")
    others = [str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if others:
        raise WmrlError(f"{source} is not a state dict: non-tensor entries {_preview(others)}")
    return RewardCheckpoint(strip_prefixes(dict(obj)), threshold)


def infer_kind(state_dict: dict[str, torch.Tensor], source: str | Path = "checkpoint") -> str:
    """'videomae', 'taskemb_resnet' or 'resnet', from the key names."""
    if any(k.startswith("videomae.") for k in state_dict):
        return "videomae"
    if "task_embedding.weight" in state_dict:
        return "taskemb_resnet"
    if any(k.startswith("net.") for k in state_dict):
        return "resnet"
    raise WmrlError(
        f"{source} is not a known reward model (keys start {_preview(sorted(state_dict))})"
    )


def infer_resnet_config(
    state_dict: dict[str, torch.Tensor], source: str | Path = "checkpoint"
) -> ResnetRewConfig:
    """Width, blocks per stage and the task-embedding head sizes, from the tensor shapes."""
    task = "task_embedding.weight" in state_dict
    prefix = "visual_encoder." if task else "net."
    stem = state_dict.get(prefix + "0.0.weight")
    if stem is None or stem.dim() != 4:
        raise WmrlError(f"{source} has no ResNet stem convolution {prefix}0.0.weight")
    blocks = 0
    while f"{prefix}1.{blocks}.conv1.weight" in state_dict:
        blocks += 1
    config = ResnetRewConfig(width=stem.shape[0], blocks=max(blocks, 1), task_embedding=task)
    if task:
        emb = state_dict["task_embedding.weight"]
        hidden = state_dict.get("fusion_layer.0.weight")
        if hidden is None:
            raise WmrlError(f"{source} has a task embedding but no fusion_layer.0.weight")
        config = replace(
            config, num_tasks=emb.shape[0], task_embed_dim=emb.shape[1], hidden_dim=hidden.shape[0]
        )
    return config


def _preview(keys: list[str], n: int = 4) -> str:
    shown = ", ".join(keys[:n])
    return f"{shown}, ... ({len(keys)} in all)" if len(keys) > n else shown


def load_matching(module: nn.Module, state_dict: dict[str, torch.Tensor], source: str) -> None:
    """load_state_dict that fails with one line listing missing, unexpected and misshapen keys."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    misshapen = sorted(
        f"{k} {tuple(state_dict[k].shape)} vs {tuple(expected[k].shape)}"
        for k in set(expected) & set(state_dict)
        if state_dict[k].shape != expected[k].shape
    )
    problems = [
        f"{label} {_preview(keys)}"
        for label, keys in (
            ("missing", missing),
            ("unexpected", unexpected),
            ("wrong shape", misshapen),
        )
        if keys
    ]
    if problems:
        raise WmrlError(f"{source} does not match the model: " + "; ".join(problems))
    module.load_state_dict(state_dict)


def _rename_legacy_videomae(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    renamed = {}
    for key, value in state_dict.items():
        for old, new in _LEGACY_VIDEOMAE.items():
            if key.endswith(old):
                key = key[: -len(old)] + new
        renamed[key] = value
    return renamed


def _weights_module(model: AnyRewardModel) -> nn.Module:
    """The module whose state dict is saved: the HF model for VideoMAE (so files carry
    transformers' own key names, as WMPO's do), the model itself otherwise."""
    return model.model if isinstance(model, VideoMAERewardModel) else model


def load_reward_pth(
    path: str | Path, videomae_config: VideoMAERewConfig | None = None
) -> AnyRewardModel:
    """A reward model from a `.pth` (RLinf's resnet_rm.pth / taskemb_resnet_rm.pth, WMPO's
    videomae_{task}.pth), in eval mode. ResNet sizes are inferred from the tensors; a VideoMAE
    file needs its config (default: WMPO's, videomae-base with 8-frame clips) because head
    count and clip length leave no trace in the weights."""
    ckpt = extract_state_dict(safe_torch_load(path), path)
    state_dict = ckpt.state_dict
    kind = infer_kind(state_dict, path)
    if kind == "videomae":
        config = videomae_config or VideoMAERewConfig.full()
        if ckpt.threshold is not None:
            config = replace(config, threshold=ckpt.threshold)
        model: AnyRewardModel = VideoMAERewardModel(config)
        state_dict = _rename_legacy_videomae(state_dict)
    else:
        config = replace(infer_resnet_config(state_dict, path), threshold=ckpt.threshold)
        model = build_resnet_reward_model(config)
    load_matching(_weights_module(model), state_dict, str(path))
    return model.eval()


def save_reward_model(model: AnyRewardModel, directory: str | Path) -> Path:
    """Write config.json and model.safetensors into `directory` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in _weights_module(model).state_dict().items()}
    save_tensors(state, directory / WEIGHTS_NAME)
    config = {"kind": model.kind, **model.config.to_dict()}
    (directory / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
    return directory


def export_reward_pth(model: AnyRewardModel, source: str | Path, target: str | Path) -> Path:
    """Write a ResNet reward model as a `.pth` in the layout of the published file `source` it
    was loaded from: the same container (a plain state dict, or one under `state_dict` /
    `model_state_dict` / `model` beside the file's other entries), the same key names (wrapper
    prefixes included), float tensors in float32 and integer buffers (BatchNorm's counters) in
    theirs; a `threshold` entry, where the source has one, holds the model's calibrated
    threshold. Written to a temporary file and renamed; returns `target`."""
    source, target = Path(source), Path(target)
    obj = safe_torch_load(source)
    wrapper = None
    if isinstance(obj, dict):
        wrapper = next((k for k in _WRAPPER_KEYS if isinstance(obj.get(k), dict)), None)
    raw = extract_state_dict(obj, source).state_dict
    first = next(iter(obj[wrapper] if wrapper else obj))
    prefix = first[: len(first) - len(next(iter(raw)))]
    trained = _weights_module(model).state_dict()
    if set(trained) != set(raw):
        extra, absent = sorted(set(trained) - set(raw)), sorted(set(raw) - set(trained))
        raise WmrlError(
            f"the reward model does not match {source}: "
            f"not in the file {_preview(extra)}; not in the model {_preview(absent)}"
        )
    state = {
        prefix + k: trained[k].detach().to(torch.float32 if v.is_floating_point() else v.dtype)
        for k, v in raw.items()
    }
    out: Any = state
    if wrapper is not None:
        out = dict(obj)
        out[wrapper] = state
        if "threshold" in out and model.threshold is not None:
            out["threshold"] = float(model.threshold)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        torch.save(out, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _config_from(cls: type, values: dict, source: Path) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise WmrlError(f"{source}: unknown reward-model config fields {_preview(unknown)}")
    return cls(**values)


def load_reward_model(
    path: str | Path, videomae_config: VideoMAERewConfig | None = None
) -> AnyRewardModel:
    """A reward model from a wmrl model directory or a `.pth` file, in eval mode."""
    path = Path(path)
    if not path.is_dir():
        return load_reward_pth(path, videomae_config)
    config_path, weights_path = path / CONFIG_NAME, path / WEIGHTS_NAME
    for required in (config_path, weights_path):
        if not required.is_file():
            raise WmrlError(f"{path} is not a reward model directory: {required.name} is missing")
    try:
        values = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise WmrlError(f"{config_path} is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    kind = values.pop("kind", None)
    if kind == "videomae":
        model: AnyRewardModel = VideoMAERewardModel(
            _config_from(VideoMAERewConfig, values, config_path)
        )
    elif kind in ("resnet", "taskemb_resnet"):
        config = _config_from(ResnetRewConfig, values, config_path)
        if config.kind != kind:
            raise WmrlError(f"{config_path}: kind {kind!r} contradicts task_embedding")
        model = build_resnet_reward_model(config)
    elif kind == "latent":
        try:
            model = LatentRewModel(_config_from(LatentRewConfig, values, config_path))
        except (TypeError, ValueError) as exc:  # a hand-edited size of the wrong type
            raise WmrlError(f"{config_path}: not a latent reward model config ({exc})") from None
    else:
        raise WmrlError(f"{config_path}: unknown reward model kind {kind!r}")
    try:
        state_dict = load_file(weights_path)
    except Exception as exc:  # safetensors raises its own error type for damaged files
        raise WmrlError(f"{weights_path} is not a readable safetensors file ({exc})") from None
    load_matching(_weights_module(model), state_dict, str(weights_path))
    return model.eval()


def reward_model_source(path: Path) -> Path:
    """A train-reward run's model directory, a published asset's `*rm.pth`, or `path` itself."""
    if (path / "reward_model" / "config.json").is_file():
        return path / "reward_model"
    if path.is_dir() and not (path / "model.safetensors").is_file():
        published = sorted(path.glob("*rm.pth"))  # resnet_rm.pth, taskemb_resnet_rm.pth
        if len(published) > 1:
            names = ", ".join(p.name for p in published)
            raise WmrlError(f"{path}: several reward models ({names}); pass one file")
        if published:
            return published[0]
    return path
