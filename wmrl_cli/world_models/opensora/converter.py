"""Load published OpenSora (WMPO / RLinf) checkpoints into the wmrl OpenSora world model.

RLinf's OpenSora asset (RLinf-OpenSora-LIBERO-*) is a directory holding

    model.safetensors.index.json + model-00001.safetensors ...   the STDiT3 (Open-Sora names)
    config.json                                                  STDiT3 hyperparameters
    vae/                                                         a diffusers AutoencoderKL folder
    dataset_statistics.json                                      action q01 / q99

The STDiT3 state dict uses the names of Open-Sora's `STDiT3` and WMPO's fork, which
`opensora.blocks.STDiT3` keeps, so no renaming is needed beyond stripping a wrapper
prefix (`model.`, `module.`). Weights the world model never uses are dropped by name:

    y_embedder.*      the T5 caption projection (and its null-caption buffer)
    fps_embedder.*    the fps embedding (WMPO's fork does not call it)
    *.cross_attn.*    the text cross-attention (kept when the config asks for it)

Everything else must match: missing or unexpected keys raise `WmrlError` with one line that lists
them. Sizes are inferred from the weights (the head count from the q/k-norm or RoPE sizes, or
from config.json). `.pth` files are read only through `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderKL

from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.opensora.blocks import RotaryEmbedding, STDiT3, STDiT3Config
from wmrl_cli.world_models.opensora.model import (
    OpenSoraWorldModel,
    OpenSoraWorldModelConfig,
    action_statistics,
    vae_downsample_factor,
)
from wmrl_cli.world_models.state_dicts import (
    StateDict,
    load_into,
    load_state_dict_file,
    strip_wrapper_prefix,
)

UNUSED_PREFIXES = ("y_embedder.", "fps_embedder.")
CROSS_ATTENTION = re.compile(r"^(spatial|temporal)_blocks\.\d+\.cross_attn\.")
_BLOCK_INDEX = re.compile(r"^(spatial|temporal)_blocks\.(\d+)\.")
_STDIT3_JSON_KEYS = ("depth", "hidden_size", "num_heads", "mlp_ratio", "qk_norm", "action_dim")


# ----------------------------------------------------------------------------------------------
# The STDiT3
# ----------------------------------------------------------------------------------------------


def read_stdit3_state_dict(path: str | Path) -> StateDict:
    """STDiT3 tensors from a `.safetensors` file (with its shards), an index, a directory holding
    either, or a `.pth`; the wrapper prefix stripped."""
    return strip_wrapper_prefix(load_state_dict_file(path))


def drop_unused(
    state_dict: Mapping[str, torch.Tensor], keep_cross_attention: bool = False
) -> tuple[StateDict, list[str]]:
    """(the weights the world model uses, the names of those dropped; see the module doc)."""
    kept: StateDict = {}
    dropped: list[str] = []
    for key, value in state_dict.items():
        unused = key.startswith(UNUSED_PREFIXES) or (
            not keep_cross_attention and CROSS_ATTENTION.match(key) is not None
        )
        if unused:
            dropped.append(key)
        else:
            kept[key] = value
    return kept, dropped


def read_stdit3_json(path: str | Path) -> dict[str, Any]:
    """The STDiT3 hyperparameters in a config.json (Open-Sora's `STDiT3Config` fields)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise WmrlError(f"cannot read {path}: {exc}") from exc
    if not isinstance(data, Mapping):
        raise WmrlError(f"{path} does not hold a JSON object")
    return dict(data)


def _tensor(state: Mapping[str, torch.Tensor], key: str, what: str) -> torch.Tensor:
    if key not in state:
        raise WmrlError(f"cannot infer STDiT3 sizes: {what} has no {key}")
    return state[key]


def infer_stdit3_config(
    state_dict: Mapping[str, torch.Tensor],
    model_json: Mapping[str, Any] | None = None,
    keep_cross_attention: bool = False,
    what: str = "the checkpoint",
) -> STDiT3Config:
    """Sizes from an STDiT3 state dict; config.json values (when given) must agree with it.

    The head count is not in a linear layer's shape: it comes from config.json's `num_heads`,
    else from the q/k-norm weights (one per head dimension), else from `rope.freqs` (half a head).
    """
    model_json = dict(model_json or {})
    embed = _tensor(state_dict, "x_embedder.proj.weight", what)
    hidden, in_channels = int(embed.shape[0]), int(embed.shape[1])
    patch = tuple(int(s) for s in embed.shape[2:])
    volume = math.prod(patch)
    out_features = int(_tensor(state_dict, "final_layer.linear.weight", what).shape[0])
    if out_features not in (volume * in_channels, 2 * volume * in_channels):
        raise WmrlError(
            f"{what}: final layer has {out_features} outputs, expected {volume * in_channels} "
            f"or {2 * volume * in_channels} for {in_channels} channels"
        )
    indices: dict[str, set[int]] = {"spatial": set(), "temporal": set()}
    for key in state_dict:
        if match := _BLOCK_INDEX.match(key):
            indices[match.group(1)].add(int(match.group(2)))
    depth = len(indices["spatial"])
    if depth == 0 or indices["temporal"] != indices["spatial"]:
        raise WmrlError(
            f"{what}: expected matching spatial and temporal blocks, found "
            f"{len(indices['spatial'])} spatial and {len(indices['temporal'])} temporal"
        )

    q_norm = state_dict.get("spatial_blocks.0.attn.q_norm.weight")
    freqs = state_dict.get("rope.freqs")
    head_dim = None
    if q_norm is not None:
        head_dim = int(q_norm.numel())
    elif freqs is not None:
        head_dim = 2 * int(freqs.numel())
    if "num_heads" in model_json:
        num_heads = int(model_json["num_heads"])
        if head_dim is not None and num_heads * head_dim != hidden:
            raise WmrlError(
                f"{what}: config.json says num_heads={num_heads}, the weights have "
                f"{hidden // head_dim} heads of {head_dim}"
            )
    elif head_dim is not None:
        num_heads = hidden // head_dim
    else:
        raise WmrlError(f"{what}: cannot infer the number of heads; pass a config with num_heads")
    inner = int(_tensor(state_dict, "spatial_blocks.0.mlp.fc1.weight", what).shape[0])
    action_fc = state_dict.get("action_embedder.fc.0.weight")
    none_rows = state_dict.get("action_embedder.none_action.weight")
    config = STDiT3Config(
        depth=depth,
        hidden_size=hidden,
        num_heads=num_heads,
        mlp_ratio=inner / hidden,
        patch_size=patch,  # type: ignore[arg-type]
        in_channels=in_channels,
        pred_sigma=out_features == 2 * volume * in_channels,
        qk_norm=q_norm is not None,
        cross_attention=keep_cross_attention and any(CROSS_ATTENTION.match(k) for k in state_dict),
        action_dim=int(action_fc.shape[1]) if action_fc is not None else 7,
        num_none_actions=int(none_rows.shape[0]) if none_rows is not None else 1,
        frequency_embedding_size=int(_tensor(state_dict, "t_embedder.mlp.0.weight", what).shape[1]),
    )
    for key in _STDIT3_JSON_KEYS:
        if key in model_json and key != "num_heads":
            stated, inferred = model_json[key], getattr(config, key)
            if (float(stated) if key == "mlp_ratio" else stated) != inferred:
                raise WmrlError(f"{what}: config.json says {key}={stated}, the weights {inferred}")
    if hidden % num_heads:
        raise WmrlError(f"{what}: hidden size {hidden} is not divisible by {num_heads} heads")
    return config


def prepare_stdit3_state_dict(
    state_dict: Mapping[str, torch.Tensor], config: STDiT3Config
) -> StateDict:
    """Drop the unused weights and fill `rope.freqs` (a fixed table) when a file lacks it."""
    state, _ = drop_unused(state_dict, keep_cross_attention=config.cross_attention)
    if "rope.freqs" not in state:
        state["rope.freqs"] = RotaryEmbedding(config.head_dim).freqs.detach().clone()
    return state


def load_stdit3(
    path: str | Path,
    config: STDiT3Config | None = None,
    model_json: Mapping[str, Any] | None = None,
    allow_missing: Sequence[str] = (),
) -> STDiT3:
    """Build an `STDiT3` from a checkpoint (sizes inferred when no config, with the config.json
    beside it when `path` is a directory and no `model_json` is given).

    allow_missing: key prefixes that may be absent and keep their fresh initialization, e.g.
    ("action_embedder.",) to start a world model from Open-Sora's text-to-video STDiT3 weights,
    as WMPO does.
    """
    what = f"STDiT3 {path}"
    state = read_stdit3_state_dict(path)
    json_path = Path(path) / "config.json"
    if model_json is None and json_path.is_file():
        model_json = read_stdit3_json(json_path)
    config = config or infer_stdit3_config(state, model_json, what=what)
    state = prepare_stdit3_state_dict(state, config)
    model = STDiT3(config)
    if allow_missing:
        fresh = model.state_dict()
        for key, value in fresh.items():
            if key not in state and key.startswith(tuple(allow_missing)):
                state[key] = value
    load_into(model, state, what=what)
    return model


# ----------------------------------------------------------------------------------------------
# The VAE
# ----------------------------------------------------------------------------------------------


def load_opensora_vae(directory: str | Path) -> AutoencoderKL:
    """The OpenSora `vae/` folder (diffusers AutoencoderKL: config.json + safetensors), offline."""
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise WmrlError(f"{directory} is not a diffusers VAE folder (no config.json)")
    try:
        return AutoencoderKL.from_pretrained(
            str(directory), local_files_only=True, use_safetensors=True
        )
    except (OSError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise WmrlError(f"cannot load the VAE in {directory}: {first}") from exc


def vae_init_kwargs(vae: AutoencoderKL) -> dict[str, Any]:
    """The `AutoencoderKL(**kwargs)` that rebuild `vae` (JSON-ready: lists, no private keys)."""
    out: dict[str, Any] = {}
    for key, value in dict(vae.config).items():
        if key.startswith("_"):
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


# ----------------------------------------------------------------------------------------------
# The whole world model
# ----------------------------------------------------------------------------------------------


def load_rlinf_opensora_world_model(
    directory: str | Path,
    config: OpenSoraWorldModelConfig | None = None,
    vae_directory: str | Path | None = None,
    dataset_statistics: str | Path | Mapping[str, Any] | None = None,
) -> OpenSoraWorldModel:
    """An `OpenSoraWorldModel` from RLinf's OpenSora asset directory (see the module doc).

    Non-weight settings (256x256, 4 + 8 frames, 10 steps, velocity output) come from `config`
    (default: the full config); STDiT3 sizes from the weights (and config.json), the VAE from
    `vae/`, the action statistics from dataset_statistics.json when present.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise WmrlError(f"OpenSora world-model directory not found: {directory}")
    json_path = directory / "config.json"
    model_json = read_stdit3_json(json_path) if json_path.is_file() else {}
    what = f"OpenSora world model {directory}"
    stdit_state = read_stdit3_state_dict(directory)
    transformer = infer_stdit3_config(stdit_state, model_json, what=what)

    vae = load_opensora_vae(vae_directory or directory / "vae")
    base = config or OpenSoraWorldModelConfig.full()
    base = replace(base, transformer=transformer, vae=vae_init_kwargs(vae), delta_prediction=False)
    stats_source = dataset_statistics
    if stats_source is None and (directory / "dataset_statistics.json").is_file():
        stats_source = directory / "dataset_statistics.json"
    if stats_source is not None:
        stats = stats_source
        if not isinstance(stats, Mapping):
            stats = read_stdit3_json(stats)
        q01, q99 = action_statistics(stats)
        base = replace(base, action_q01=q01, action_q99=q99)
    factor = vae_downsample_factor(base.vae)
    if base.height % factor or base.width % factor:
        raise WmrlError(f"{base.height}x{base.width} frames do not fit a {factor}x VAE")

    state = {
        f"transformer.{k}": v
        for k, v in prepare_stdit3_state_dict(stdit_state, transformer).items()
    }
    state.update({f"vae.{k}": v for k, v in vae.state_dict().items()})
    return OpenSoraWorldModel.from_state_dict(base, state, what=what)
