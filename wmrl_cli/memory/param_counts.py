"""Parameter counts for the memory plan, without allocating a weight.

Models are built on the meta device (`torch.device("meta")`: shapes only), from a config (the
full-size ones: `policies.config.full_config`, `WanWorldModelConfig.full`,
`OpenSoraWorldModelConfig.full`) or from what a checkpoint directory records: a wmrl policy's or
world model's config.json, a published (prismatic) policy's tensor shapes read from its
safetensors headers. A published world model is counted from its weight files (safetensors
headers; RLinf's Wan VAE `.pth` by its size, float32).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.config import LoraSpec, OpenVLAOFTConfig

# What a micro-batch's sequence holds besides image patches and actions: BOS, the prompt (an
# instruction of about 20 Llama tokens plus the "In: What action ... Out:" template) and stop.
PROMPT_TOKENS = 32


@dataclass(frozen=True)
class Stack:
    """A stack of transformer blocks, for the activation estimate: width, MLP width, depth,
    and tokens per sequence."""

    hidden: int
    mlp: int
    layers: int
    tokens: int
    kind: str  # "llama" (SwiGLU, RMSNorm) or "vit" (GELU, LayerNorm)


@dataclass(frozen=True)
class PolicySize:
    """params: every parameter; trainable: what AdamW updates (full fine-tuning: all of them;
    LoRA: the adapters, the projector and a value head); largest_unit: the parameters of the
    largest unit FSDP gathers at once (a block, or the root's own: embeddings, LM head,
    projector); stacks: the Llama and the vision towers."""

    params: int
    trainable: int
    largest_unit: int
    stacks: tuple[Stack, ...]
    trainable_stacks: tuple[bool, ...]  # whether activations of each stack are kept for backward
    # for the bf16 copies of float32 weights that autograd keeps under autocast: the blocks of
    # the stacks whose activations are kept, all together and the largest one
    kept_block_params: int = 0
    largest_kept_block: int = 0
    # the projector (trained in LoRA and full fine-tuning alike): its parameters, and the
    # elements per sequence its linears and GELUs keep for backward
    projector_params: int = 0
    projector_kept: int = 0
    largest_trainable: int = 0  # the largest trained tensor (a per-tensor AdamW step's copies)


def count(module: nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


@lru_cache(maxsize=8)
def _policy_size(config_json: str, lora_rank: int | None, value_head: bool) -> PolicySize:
    from wmrl_cli.policies.openvla_oft import OpenVLAOFT

    config = OpenVLAOFTConfig.from_dict(json.loads(config_json))
    config.lora, config.value_head = None, value_head
    with torch.device("meta"):
        model = OpenVLAOFT(config)
        if lora_rank:
            from wmrl_cli.policies.lora import apply_lora

            apply_lora(model, LoraSpec(rank=lora_rank, alpha=lora_rank))
    from wmrl_cli.training.sharding import policy_blocks

    blocks = [count(block) for block in policy_blocks(model)]
    units = [*blocks, count(model) - sum(blocks)]  # FSDP's units: each block, and the root
    llm = config.llm
    tokens = 1 + config.num_patches + PROMPT_TOKENS + config.num_action_tokens + 1
    stacks = [Stack(llm.hidden_size, llm.intermediate_size, llm.num_layers, tokens, "llama")]
    for tower in config.vision:
        patches = config.num_patches + (1 if tower.kind == "dinov2" else 0)
        stacks.append(
            Stack(
                tower.hidden_size,
                tower.mlp_dim,
                tower.num_layers,
                patches + tower.num_register_tokens,
                "vit",
            )
        )
    towers_train = any(p.requires_grad for p in model.vision_towers.parameters())
    llm_blocks = len(model.llm().model.layers)
    kept = blocks if towers_train else blocks[:llm_blocks]
    # each linear's input and each GELU's output: fused D -> 4D -> H -> H, else D -> H -> H
    fc1 = model.projector.fc1
    per_patch = (
        fc1.in_features + 2 * fc1.out_features + (2 * llm.hidden_size if config.fused else 0)
    )
    return PolicySize(
        params=count(model),
        trainable=count(model, trainable_only=True),
        largest_unit=max(units),
        stacks=tuple(stacks),
        trainable_stacks=(True,) + (towers_train,) * len(config.vision),
        kept_block_params=sum(kept),
        largest_kept_block=max(kept),
        projector_params=count(model.projector),
        projector_kept=config.num_patches * per_patch,
        largest_trainable=max(p.numel() for p in model.parameters() if p.requires_grad),
    )


def policy_size(
    config: OpenVLAOFTConfig, lora_rank: int | None = None, value_head: bool = False
) -> PolicySize:
    """The policy `config` builds (on the meta device), with LoRA of `lora_rank` applied as RL
    applies it (the Llama's projections; vision towers frozen)."""
    return _policy_size(json.dumps(config.to_dict(), sort_keys=True), lora_rank, value_head)


def safetensors_shapes(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors files in `directory` (not below it), as meta tensors of
    its shape: read from the headers, nothing loaded."""
    from safetensors import SafetensorError, safe_open

    shapes: dict[str, torch.Tensor] = {}
    for path in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt", device="cpu") as f:
                for key in f.keys():  # noqa: SIM118 - safe_open has no __iter__
                    shapes[key] = torch.empty(f.get_slice(key).get_shape(), device="meta")
        except (SafetensorError, OSError) as exc:  # a damaged file: one line, not a traceback
            raise WmrlError(f"{path}: not a readable safetensors file ({exc})") from None
    return shapes


def policy_config_of(directory: Path) -> OpenVLAOFTConfig:
    """The config of the policy in a checkpoint directory: a wmrl policy's config.json, or a
    published (prismatic) one's sizes from its tensor shapes (as `load_prismatic` reads them)."""
    from wmrl_cli.policies.checkpoint import is_prismatic, read_config
    from wmrl_cli.policies.config import full_config
    from wmrl_cli.policies.prismatic import FEATURIZER_PREFIXES, llama_spec, tower_config

    meta = read_config(directory)
    if not is_prismatic(meta):
        return OpenVLAOFTConfig.from_dict(meta["policy"])
    shapes = safetensors_shapes(directory)
    timm_ids, sizes = meta.get("timm_model_ids") or [], meta.get("image_sizes") or []
    towers = [
        tower_config(tid, int(size), shapes, prefix)
        for tid, size, prefix in zip(timm_ids, sizes, FEATURIZER_PREFIXES)
    ]
    rows = int(shapes["language_model.model.embed_tokens.weight"].shape[0])
    llm = llama_spec(dict(meta.get("text_config") or {}), rows)
    update = {"vision": towers, "llm": llm, "vocab_size": max(257, rows - 64), "pad_token_id": 0}
    return full_config().model_copy(update=update)


def world_model_params(path: Path | None, backend: str = "wan") -> int:
    """Parameters of a world model (denoiser and autoencoder): a wmrl run or model directory
    built on the meta device from its config.json, a published folder from its weight files,
    or (path None) the backend's full-size config."""
    return sum(world_model_param_split(path, backend))


def world_model_param_split(path: Path | None, backend: str = "wan") -> tuple[int, int]:
    """(the denoiser's parameters, the rest's: the autoencoder and the frozen embeddings), read
    as `world_model_params` reads them: what a fine-tuning trains and what it keeps frozen."""
    from wmrl_cli.world_models.published import RLINF_OPENSORA, WAN_VAE_FILE, published_layout

    if path is None:
        return _world_model_params(backend, None)
    layout = published_layout(path)
    if layout == RLINF_OPENSORA:  # the STDiT3 as loaded (its unused text cross-attention dropped)
        from wmrl_cli.world_models.opensora.converter import drop_unused
        from wmrl_cli.world_models.state_dicts import strip_wrapper_prefix

        dit, _ = drop_unused(strip_wrapper_prefix(safetensors_shapes(path)))
        return _numel(dit), _numel(safetensors_shapes(path / "vae"))
    if layout is not None:  # RLinf's Wan: the DiT's safetensors and the VAE's .pth
        return _numel(safetensors_shapes(path)), pth_params(path / WAN_VAE_FILE)
    from wmrl_cli.world_models.factory import saved_world_model

    directory, saved_backend = saved_world_model(path)
    config = json.loads((directory / "config.json").read_text())
    return _world_model_params(saved_backend, json.dumps(config, sort_keys=True))


def world_model_geometry(path: Path, frames: tuple[int, int] | None = None) -> tuple[str, int, int]:
    """(backend, height, width) a world model imagines at: a wmrl model's config.json; a
    published model, which imagines at its reset set's size, at `frames` (256 x 256, RLinf's,
    where unknown)."""
    from wmrl_cli.world_models.published import RLINF_OPENSORA, published_layout

    layout = published_layout(path)
    if layout is None:
        backend, config = _saved_config(path)
        return backend, int(config.get("height", 256)), int(config.get("width", 256))
    height, width = frames or (256, 256)
    return ("opensora" if layout == RLINF_OPENSORA else "wan"), height, width


def world_model_context_frames(path: Path, configured: int) -> int:
    """The context frames a world model imagines after: a wmrl model's own (its config.json),
    a published one's as the run configures them (`world_model.context_frames`)."""
    from wmrl_cli.world_models.published import published_layout

    if published_layout(path) is not None:
        return configured
    return int(_saved_config(path)[1].get("num_context_frames", configured))


def _saved_config(path: Path) -> tuple[str, dict]:
    """(backend, config.json) of a wmrl world model (a run or model folder)."""
    from wmrl_cli.world_models.factory import saved_world_model

    directory, backend = saved_world_model(path)
    return backend, json.loads((directory / "config.json").read_text())


def _numel(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() for t in tensors.values())


def pth_params(path: Path) -> int:
    """Elements of every tensor in a torch checkpoint, memory-mapped (nothing read but its
    index; weights_only: no code runs); where it cannot be mapped, its size over 4 (float32)."""

    def numel(obj: object) -> int:
        if isinstance(obj, torch.Tensor):
            return obj.numel()
        if isinstance(obj, dict):
            return sum(numel(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return sum(numel(v) for v in obj)
        return 0

    try:
        return numel(torch.load(path, map_location="cpu", mmap=True, weights_only=True))
    except (RuntimeError, OSError, ValueError):
        return path.stat().st_size // 4


def full_world_model_params(backend: str) -> int:
    """The backend's full size (Wan2.2-TI2V-5B or STDiT3-XL/2, with its VAE)."""
    return sum(_world_model_params(backend, None))


@lru_cache(maxsize=8)
def _world_model_params(backend: str, config_json: str | None) -> tuple[int, int]:
    """(denoiser, the rest) of a world model built on the meta device."""
    if backend == "opensora":
        from wmrl_cli.world_models.opensora import OpenSoraWorldModel as model_cls
        from wmrl_cli.world_models.opensora import OpenSoraWorldModelConfig as config_cls
    else:
        from wmrl_cli.world_models.wan import WanWorldModel as model_cls
        from wmrl_cli.world_models.wan import WanWorldModelConfig as config_cls
    config = (
        config_cls.full() if config_json is None else config_cls.from_dict(json.loads(config_json))
    )
    with torch.device("meta"):
        model = model_cls(config)
    denoiser = count(model.transformer)
    return denoiser, count(model) - denoiser


def published_reward_bytes(kind: str) -> int:
    """Bytes of a published reward model of `kind` not downloaded yet: RLinf's ResNet frame
    classifier (with or without the task embedding) in float32; WMPO's VideoMAE at its
    default config."""
    from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model

    with torch.device("meta"):
        if kind == "videomae":
            from wmrl_cli.rewards.videomae import VideoMAERewardModel, VideoMAERewConfig

            model = VideoMAERewardModel(VideoMAERewConfig())
        else:
            model = build_resnet_reward_model(ResnetRewConfig(task_embedding=kind != "resnet"))
    return 4 * count(model)


def weight_file_bytes(path: Path | None) -> int:
    """Bytes of a model's weight files (a reward model: a `.pth` or a model directory)."""
    if path is None:
        return 0
    if path.is_file():
        return path.stat().st_size
    files = list(path.glob("*.safetensors")) + list(path.glob("*.pth"))
    return sum(f.stat().st_size for f in files)
