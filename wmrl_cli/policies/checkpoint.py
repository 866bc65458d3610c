"""Policy checkpoint directories: wmrl's own format and published prismatic ones.

wmrl format: config.json ({"format": "wmrl-openvla-oft", "policy": {...}}), model.safetensors
(base weights under the plain module names), dataset_statistics.json, tokenizer files and,
with LoRA on, lora_adapter/ (peft adapter files). Written into a temporary sibling directory
and renamed into place, so a reader never sees half a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_dir
from wmrl_cli.policies.config import OpenVLAOFTConfig
from wmrl_cli.policies.normalization import (
    STATISTICS_FILE,
    as_keyed,
    read_statistics,
    resolve_unnorm_key,
    write_statistics,
)
from wmrl_cli.policies.openvla_oft import DTYPES, OpenVLAOFT
from wmrl_cli.policies.prismatic import (
    FEATURIZER_PREFIXES,
    LoadReport,
    convert_tower,
    llama_spec,
    short_list,
    tower_config,
)
from wmrl_cli.policies.text_tokenizer import empty_piece_id, load_tokenizer

FORMAT = "wmrl-openvla-oft"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
ADAPTER_DIR = "lora_adapter"
# OpenVLA-OFT keeps continuous action heads in separate files / key prefixes.
CONTINUOUS_HEADS = ("action_head", "noisy_action_projector")

log = logging.getLogger(__name__)

try:  # skip random init when every weight is about to be overwritten (7B: minutes saved)
    from transformers.initialization import no_init_weights
except ImportError:  # pragma: no cover - older transformers
    no_init_weights = contextlib.nullcontext  # type: ignore[assignment]


# --- writing ---------------------------------------------------------------------------
def canonical_state_dict(model: OpenVLAOFT) -> dict[str, torch.Tensor]:
    """Base weights under plain module names (peft wrappers and LoRA weights removed)."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in model.state_dict().items():
        if "lora_" in key:
            continue
        key = key.replace("language_model.base_model.model.", "language_model.", 1)
        key = key.replace(".base_layer.", ".")
        out[key] = tensor.detach().contiguous().cpu()
    return out


def save_pretrained(model: OpenVLAOFT, directory: str | Path) -> Path:
    """Write a complete, self-describing checkpoint directory (atomically)."""
    from wmrl_cli.policies.lora import lora_active, save_lora_adapter

    with atomic_dir(directory) as tmp:
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "policy": model.config.to_dict(),
        }
        (tmp / CONFIG_FILE).write_text(json.dumps(meta, indent=2))
        save_file(canonical_state_dict(model), str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        if model.norm_stats is not None:
            write_statistics(tmp / STATISTICS_FILE, model.norm_stats)
        if model.tokenizer is not None:
            model.tokenizer.save_pretrained(str(tmp))
        if lora_active(model):
            save_lora_adapter(model, tmp / ADAPTER_DIR)
    return Path(directory)


# --- reading ----------------------------------------------------------------------------
def read_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise WmrlError(f"{directory}: not a policy checkpoint (no {CONFIG_FILE})")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise WmrlError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise WmrlError(f"{path}: expected a JSON object")
    return data


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """model.safetensors, or the shards listed in its index (safetensors only, never pickle)."""
    files = []
    if (directory / WEIGHTS_FILE).is_file():
        files = [directory / WEIGHTS_FILE]
    elif (directory / WEIGHTS_INDEX).is_file():
        index = json.loads((directory / WEIGHTS_INDEX).read_text())
        files = [directory / name for name in sorted(set(index.get("weight_map", {}).values()))]
    if not files:
        pickled = sorted(p.name for p in directory.glob("*.bin")) + sorted(
            p.name for p in directory.glob("*.pt*")
        )
        hint = f" (found {short_list(pickled)}; only safetensors are read)" if pickled else ""
        raise WmrlError(f"{directory}: no {WEIGHTS_FILE} or {WEIGHTS_INDEX}{hint}")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        if not f.is_file():
            raise WmrlError(f"{directory}: shard {f.name} listed in the index is missing")
        try:
            weights.update(load_file(str(f)))
        except (SafetensorError, OSError) as exc:
            raise WmrlError(f"{f}: unreadable safetensors file ({exc})") from None
    return weights


def is_prismatic(meta: dict[str, Any]) -> bool:
    return "timm_model_ids" in meta or "vision_backbone_id" in meta


def from_pretrained(
    directory: str | Path,
    *,
    device: str | torch.device | None = None,
    dtype: str | None = None,
    unnorm_key: str | None = None,
    **prismatic_kwargs: Any,
) -> OpenVLAOFT:
    """Load a wmrl checkpoint or a published prismatic-layout OpenVLA-OFT directory."""
    d = Path(directory)
    meta = read_config(d)
    if is_prismatic(meta):
        return load_prismatic(
            d, device=device, dtype=dtype, unnorm_key=unnorm_key, **prismatic_kwargs
        )
    if meta.get("format") != FORMAT:
        raise WmrlError(f"{d}: config.json is neither a wmrl policy nor a prismatic OpenVLA config")
    if prismatic_kwargs:
        raise WmrlError(f"unexpected options for a wmrl checkpoint: {sorted(prismatic_kwargs)}")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise WmrlError(f"{d}: checkpoint format {meta['format_version']} is newer than this wmrl")
    config = OpenVLAOFTConfig.from_dict(meta["policy"])
    if dtype is not None:
        config.dtype = dtype
    if unnorm_key is not None:
        config.unnorm_key = unnorm_key
    config.lora = None  # re-applied below from the saved adapter, if any
    stats = read_statistics(d) if (d / STATISTICS_FILE).is_file() else None
    tokenizer = load_tokenizer(d) if _has_tokenizer(d) else None
    weights = read_weights(d)
    with no_init_weights():
        model = OpenVLAOFT(config, tokenizer, stats)
    _load_checked(model, weights, d, allowed_missing=())
    if (d / ADAPTER_DIR).is_dir():
        from wmrl_cli.policies.lora import load_lora_adapter

        load_lora_adapter(model, d / ADAPTER_DIR)
    if device is not None:
        model.to(device)
    _check_unnorm_key(model)
    return model


def load_prismatic(
    directory: str | Path,
    *,
    device: str | torch.device | None = None,
    dtype: str | None = None,
    unnorm_key: str | None = None,
    chunk_len: int = 8,
    value_head: bool = False,
) -> OpenVLAOFT:
    """Read a published OpenVLA-OFT directory (prismatic keys) without its remote code.

    chunk_len is a code constant in OpenVLA-OFT (8 for LIBERO), not part of its config.
    """
    d = Path(directory)
    meta = read_config(d)
    report = LoadReport()
    _check_heads(d, report)
    weights = read_weights(d)
    bad_heads = [k for k in weights if k.split(".", 1)[0] in CONTINUOUS_HEADS]
    if bad_heads:
        raise WmrlError(
            f"{d}: continuous action head weights ({short_list(bad_heads)}); "
            "wmrl supports the discrete-token OpenVLA-OFT variant"
        )

    timm_ids = list(meta.get("timm_model_ids") or [])
    image_sizes = list(meta.get("image_sizes") or [])
    fused = bool(meta.get("use_fused_vision_backbone", len(timm_ids) == 2))
    if len(timm_ids) != (2 if fused else 1) or len(image_sizes) != len(timm_ids):
        raise WmrlError(
            f"{d}: config.json timm_model_ids {timm_ids} / image_sizes {image_sizes} "
            f"do not describe {'two fused' if fused else 'one'} vision backbone(s)"
        )
    towers = [
        tower_config(tid, int(size), weights, prefix)
        for tid, size, prefix in zip(timm_ids, image_sizes, FEATURIZER_PREFIXES, strict=False)
    ]
    embed_key = "language_model.model.embed_tokens.weight"
    if embed_key not in weights:
        raise WmrlError(f"{d}: checkpoint lacks {embed_key}")
    rows = int(weights[embed_key].shape[0])
    llm = llama_spec(dict(meta.get("text_config") or {}), rows)
    vocab_size = rows - int(meta.get("pad_to_multiple_of", 64))

    tokenizer = load_tokenizer(d)
    stats_raw = read_statistics(d) if (d / STATISTICS_FILE).is_file() else meta.get("norm_stats")
    stats = as_keyed(stats_raw) if stats_raw else None
    action_dim = 7
    if stats is not None:
        key = resolve_unnorm_key(stats, unnorm_key) if unnorm_key or len(stats) == 1 else None
        entry = stats[key] if key is not None else next(iter(stats.values()))
        action_dim = len(entry["action"]["q01"])
    pad_id = tokenizer.pad_token_id
    config = OpenVLAOFTConfig.from_dict(
        {
            "name": d.name or "prismatic",
            "vision": [t.model_dump() for t in towers],
            "llm": llm.model_dump(),
            "vocab_size": vocab_size,
            "chunk_len": chunk_len,
            "action_dim": action_dim,
            "bos_token_id": _or(tokenizer.bos_token_id, 1),
            "stop_token_id": _or(tokenizer.eos_token_id, 2),
            "pad_token_id": _or(pad_id, int(meta.get("pad_token_id", 0))),
            "prompt_suffix_token_id": empty_piece_id(tokenizer),
            "attention": "bidirectional",
            "value_head": value_head,
            "value_hidden_size": min(1024, llm.hidden_size),
            "dtype": dtype or _json_dtype(meta),
            "unnorm_key": unnorm_key,
        }
    )

    converted: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for i, (tower, prefix) in enumerate(zip(config.vision, FEATURIZER_PREFIXES, strict=False)):
        part, dropped, bad = convert_tower(weights, prefix, tower, f"vision_towers.{i}.model.")
        converted.update(part)
        report.dropped.extend(dropped)
        unknown.extend(bad)
    for key, tensor in weights.items():
        if key.startswith(FEATURIZER_PREFIXES):
            continue
        if key.startswith("language_model.") and key.endswith("rotary_emb.inv_freq"):
            report.dropped.append(key)
        elif key.startswith(("projector.", "language_model.")):
            converted[key] = tensor
        else:
            unknown.append(key)
    if unknown:
        listed = short_list(sorted(unknown))
        raise WmrlError(f"{d}: checkpoint does not fit the policy; unexpected keys: {listed}")

    with no_init_weights():
        model = OpenVLAOFT(config, tokenizer, stats)
    allowed = ("value_head.",) + tuple(
        f"vision_towers.{i}.model.embeddings.mask_token" for i in range(len(towers))
    )
    _load_checked(model, converted, d, allowed_missing=allowed)
    model.load_report = report
    for note in report.notes:
        log.warning("%s: %s", d, note)
    if device is not None:
        model.to(device)
    _check_unnorm_key(model)
    return model


# --- helpers ----------------------------------------------------------------------------
def _has_tokenizer(d: Path) -> bool:
    return (d / "tokenizer.json").is_file() or (d / "tokenizer.model").is_file()


def _or(value: int | None, default: int) -> int:
    return default if value is None else int(value)


def _json_dtype(meta: dict[str, Any]) -> str:
    name = str(meta.get("torch_dtype") or meta.get("dtype") or "bfloat16")
    return name if name in DTYPES else "bfloat16"


def _check_heads(d: Path, report: LoadReport) -> None:
    heads = sorted(p.name for h in CONTINUOUS_HEADS for p in d.glob(f"{h}--*"))
    if heads:
        raise WmrlError(
            f"{d}: continuous action head files ({short_list(heads)}); "
            "wmrl supports the discrete-token OpenVLA-OFT variant"
        )
    proprio = sorted(p.name for p in d.glob("proprio_projector--*"))
    if proprio:
        report.notes.append(
            f"ignoring {short_list(proprio)}: wmrl policies do not feed proprioception"
        )


def _load_checked(
    model: OpenVLAOFT, weights: dict[str, torch.Tensor], where: Path, allowed_missing: tuple
) -> None:
    """Load with a one-line error for missing / unexpected / mis-shaped keys."""
    expected = {k: v for k, v in model.state_dict().items()}
    missing = sorted(k for k in expected if k not in weights and not k.startswith(allowed_missing))
    unexpected = sorted(k for k in weights if k not in expected)
    problems = []
    if missing:
        problems.append(f"missing keys: {short_list(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {short_list(unexpected)}")
    shapes = [
        f"{k} {tuple(weights[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights and weights[k].shape != v.shape
    ]
    if shapes:
        problems.append(f"shape mismatches: {short_list(shapes, 3)}")
    if problems:
        raise WmrlError(f"{where}: checkpoint does not fit the policy; " + "; ".join(problems))
    with torch.no_grad():
        model.load_state_dict(weights, strict=False)
        # Keys allowed to be absent get their deterministic fresh values (init was skipped).
        for key, tensor in model.state_dict().items():
            if key not in weights and key.endswith("mask_token"):
                tensor.zero_()
        if model.value_head is not None and not any(k.startswith("value_head.") for k in weights):
            model.value_head.reset_parameters()


def _check_unnorm_key(model: OpenVLAOFT) -> None:
    if model.norm_stats is not None and (
        model.config.unnorm_key is not None or len(model.norm_stats) == 1
    ):
        model.action_statistics()
