"""Published OpenVLA(-OFT) checkpoints in the prismatic layout, read natively.

The remote code (`modeling_prismatic.py`) is never run. Its config.json names timm models;
the weights use timm's ViT names under `vision_backbone.featurizer.` (DINOv2 ViT-L/14-reg4)
and `vision_backbone.fused_featurizer.` (SigLIP SO400M/14), `projector.fc1..fc3`, and HF Llama
names under `language_model.`. This module maps those names onto the transformers modules
of `OpenVLAOFT`: timm's fused qkv splits into q/k/v, LayerScale `gamma` (renamed
`scale_factor` by the remote code) becomes `lambda1`, DINOv2's class-free position table
gains a zero row for the class token. The last ViT block and the final norm / attention-pool
head are dropped by design: OpenVLA reads the second-to-last block's patch features.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.config import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    SIGLIP_MEAN,
    SIGLIP_STD,
    LlamaSpec,
    VisionTowerConfig,
)

FEATURIZER_PREFIXES = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")


@dataclass(frozen=True)
class TimmTower:
    kind: str
    num_heads: int
    depth: int
    hidden_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    hidden_act: str = "gelu"


# Facts from timm's vision_transformer.py; OpenVLA overrides no activation for these.
TIMM_TOWERS: dict[str, TimmTower] = {
    "vit_large_patch14_reg4_dinov2.lvd142m": TimmTower(
        "dinov2", 16, 24, 1024, IMAGENET_MEAN, IMAGENET_STD
    ),
    "vit_so400m_patch14_siglip_224": TimmTower("siglip", 16, 27, 1152, SIGLIP_MEAN, SIGLIP_STD),
    "vit_so400m_patch14_siglip_384": TimmTower("siglip", 16, 27, 1152, SIGLIP_MEAN, SIGLIP_STD),
}

# Llama-2-7B as openvla-7b's text_config leaves it: LlamaConfig defaults fill what it omits.
LLAMA_DEFAULTS: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 2048,
}

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
# Keys of the prismatic layout that the policy never builds (see the module docstring).
_UNUSED_TOP = ("norm.", "fc_norm.", "head.", "attn_pool.")


@dataclass
class LoadReport:
    """What a native load ignored on purpose, kept on the model for inspection."""

    dropped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def short_list(keys: list[str], limit: int = 6) -> str:
    more = f" ... (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


def tower_config(
    timm_id: str, image_size: int, weights: dict[str, torch.Tensor], prefix: str
) -> VisionTowerConfig:
    """Tower config from the timm id (heads, kind, preprocessing) and weight shapes (sizes)."""
    spec = TIMM_TOWERS.get(timm_id)
    if spec is None:
        raise WmrlError(
            f"unsupported vision backbone '{timm_id}'; supported: {sorted(TIMM_TOWERS)}"
        )
    try:
        patch = weights[prefix + "patch_embed.proj.weight"]
        fc1 = weights[prefix + "blocks.0.mlp.fc1.weight"]
    except KeyError as exc:
        raise WmrlError(f"checkpoint lacks {exc.args[0]}") from None
    hidden, patch_size = int(patch.shape[0]), int(patch.shape[-1])
    names = [k[len(prefix) :] for k in weights if k.startswith(prefix)]
    depth = 1 + max(int(m.group(1)) for n in names if (m := _BLOCK.match(n)))
    if hidden == spec.hidden_size and depth != spec.depth:
        raise WmrlError(f"{prefix}: {depth} blocks, but {timm_id} has {spec.depth}")
    if depth < 2:
        raise WmrlError(
            f"{prefix}: needs at least 2 blocks (features come from the second-to-last)"
        )
    registers = weights.get(prefix + "reg_token")
    return VisionTowerConfig(
        kind=spec.kind,
        image_size=image_size,
        patch_size=patch_size,
        hidden_size=hidden,
        num_layers=depth - 1,
        num_heads=spec.num_heads,
        mlp_dim=int(fc1.shape[0]),
        num_register_tokens=0 if registers is None else int(registers.shape[1]),
        hidden_act=spec.hidden_act,
        image_mean=spec.mean,
        image_std=spec.std,
        timm_id=timm_id,
    )


def llama_spec(text_config: dict[str, Any], embedding_rows: int) -> LlamaSpec:
    if text_config.get("model_type", "llama") != "llama":
        raise WmrlError(
            f"only Llama language models are supported, got {text_config['model_type']}"
        )
    if text_config.get("rope_scaling"):
        raise WmrlError("checkpoints with rope_scaling are not supported")
    merged = {**LLAMA_DEFAULTS, **{k: v for k, v in text_config.items() if k in LLAMA_DEFAULTS}}
    rows = int(text_config.get("vocab_size", embedding_rows))
    if rows != embedding_rows:
        raise WmrlError(f"text_config.vocab_size {rows} != {embedding_rows} embedding rows")
    return LlamaSpec(
        hidden_size=merged["hidden_size"],
        intermediate_size=merged["intermediate_size"],
        num_layers=merged["num_hidden_layers"],
        num_heads=merged["num_attention_heads"],
        num_kv_heads=merged["num_key_value_heads"],
        rms_norm_eps=merged["rms_norm_eps"],
        rope_theta=merged["rope_theta"],
        max_position_embeddings=merged["max_position_embeddings"],
        embedding_size=rows,
    )


def _split_qkv(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # timm reshapes qkv output as (3, heads, head_dim): rows are [q; k; v].
    q, k, v = tensor.chunk(3, dim=0)
    return q, k, v


def _block_names(kind: str, n: int) -> dict[str, str | tuple[str, str, str]]:
    if kind == "dinov2":
        base = f"encoder.layer.{n}."
        return {
            "norm1": base + "norm1",
            "attn.qkv": tuple(base + f"attention.{p}_proj" for p in "qkv"),
            "attn.proj": base + "attention.o_proj",
            "norm2": base + "norm2",
            "mlp.fc1": base + "mlp.fc1",
            "mlp.fc2": base + "mlp.fc2",
        }
    base = f"encoder.layers.{n}."
    return {
        "norm1": base + "layer_norm1",
        "attn.qkv": tuple(base + f"self_attn.{p}_proj" for p in "qkv"),
        "attn.proj": base + "self_attn.out_proj",
        "norm2": base + "layer_norm2",
        "mlp.fc1": base + "mlp.fc1",
        "mlp.fc2": base + "mlp.fc2",
    }


def convert_tower(
    weights: dict[str, torch.Tensor], prefix: str, cfg: VisionTowerConfig, dest: str
) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
    """timm ViT keys under `prefix` -> transformers keys under `dest`.

    Returns (converted, dropped-by-design keys, unrecognized keys).
    """
    out: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    unknown: list[str] = []
    last_block = cfg.num_layers  # index of the pretrained model's final block
    for key in [k for k in weights if k.startswith(prefix)]:
        name, tensor = key[len(prefix) :], weights[key]
        block = _BLOCK.match(name)
        if block:
            n, rest = int(block.group(1)), block.group(2)
            if n == last_block:
                dropped.append(key)
                continue
            if n > last_block:
                unknown.append(key)
                continue
            module, _, param = rest.rpartition(".")
            if module in ("ls1", "ls2") and param in ("gamma", "scale_factor"):
                if cfg.kind != "dinov2":
                    unknown.append(key)
                    continue
                idx = module[-1]
                out[f"{dest}encoder.layer.{n}.layer_scale{idx}.lambda1"] = tensor
                continue
            target = _block_names(cfg.kind, n).get(module)
            if target is None or param not in ("weight", "bias"):
                unknown.append(key)
            elif isinstance(target, tuple):
                for t, part in zip(target, _split_qkv(tensor), strict=True):
                    out[f"{dest}{t}.{param}"] = part
            else:
                out[f"{dest}{target}.{param}"] = tensor
        elif name.startswith(_UNUSED_TOP):
            dropped.append(key)
        elif name in ("patch_embed.proj.weight", "patch_embed.proj.bias"):
            param = name.rsplit(".", 1)[1]
            sub = "patch_embeddings.projection" if cfg.kind == "dinov2" else "patch_embedding"
            out[f"{dest}embeddings.{sub}.{param}"] = tensor
        elif name == "pos_embed":
            out.update(_position_table(tensor, cfg, dest, key))
        elif name == "cls_token" and cfg.kind == "dinov2":
            out[f"{dest}embeddings.cls_token"] = tensor
        elif name == "reg_token" and cfg.kind == "dinov2":
            out[f"{dest}embeddings.register_tokens"] = tensor
        else:
            unknown.append(key)
    return out, dropped, unknown


def _position_table(
    tensor: torch.Tensor, cfg: VisionTowerConfig, dest: str, key: str
) -> dict[str, torch.Tensor]:
    n, dim = int(tensor.shape[1]), int(tensor.shape[2])
    if cfg.kind == "siglip":
        if n != cfg.num_patches:
            raise WmrlError(f"{key}: {n} positions for {cfg.num_patches} patches")
        return {f"{dest}embeddings.position_embedding.weight": tensor[0]}
    if n == cfg.num_patches:
        # DINOv2-reg4 in timm adds no position to the class token; transformers adds row 0.
        tensor = torch.cat([tensor.new_zeros((1, 1, dim)), tensor], dim=1)
    elif n != cfg.num_patches + 1:
        raise WmrlError(f"{key}: {n} positions for {cfg.num_patches} patches")
    return {f"{dest}embeddings.position_embeddings": tensor}
