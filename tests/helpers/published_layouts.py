"""Tiny checkpoints written in the publishers' exact layouts (docs/assets.md).

The key names and file names are what RLinf, WMPO and OpenVLA-OFT publish; only the sizes are
small. Pieces are shared by the loader tests; `write_wan_libero`, `write_opensora_libero` and
`write_openvla_oft_sft` write whole hub repositories for the end-to-end test:

    RLinf-Wan-LIBERO-Spatial/        dataset/trajN.npy, dataset/trajN_kir.npy,
                                     model-00001.safetensors (DiffSynth names, `model.` prefix,
                                     bf16), Wan2.2_VAE.pth (original Wan2.2 names), resnet_rm.pth
    RLinf-OpenSora-LIBERO-Spatial/   config.json, model-0000N.safetensors +
                                     model.safetensors.index.json (Open-Sora names), vae/
                                     (diffusers AutoencoderKL), resnet_rm.pth,
                                     dataset_statistics.json, dataset/trajN.npy
    Openvla-oft-SFT-libero-*-traj1/  config.json (prismatic), model-0000N-of-0000M.safetensors +
                                     index (prismatic keys, bf16), dataset_statistics.json under
                                     the unnorm key, tokenizer files, the remote-code .py files
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from wmrl_cli.policies.config import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    SIGLIP_MEAN,
    SIGLIP_STD,
    LlamaSpec,
    OpenVLAOFTConfig,
    VisionTowerConfig,
)
from wmrl_cli.policies.normalization import compute_statistics
from wmrl_cli.policies.openvla_oft import OpenVLAOFT
from wmrl_cli.policies.text_tokenizer import build_word_tokenizer
from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
from wmrl_cli.world_models.opensora import STDiT3
from wmrl_cli.world_models.wan import WanActionTransformer

# ----------------------------------------------------------------------------------------------
# Files in a directory, safetensors shards
# ----------------------------------------------------------------------------------------------


def directory_files(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` by its repo-relative path (what `write_repo` serves)."""
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def write_shards(
    directory: Path,
    state: dict[str, torch.Tensor],
    names: tuple[str, ...] = ("model-00001.safetensors", "model-00002.safetensors"),
) -> Path:
    """Safetensors shards (keys dealt round-robin) and the `model.safetensors.index.json` that
    maps every key to its shard."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = sorted(state)
    weight_map = {}
    for i, name in enumerate(names):
        part = keys[i :: len(names)]
        save_file({k: state[k].contiguous() for k in part}, str(directory / name))
        weight_map.update(dict.fromkeys(part, name))
    size = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": size}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return directory


# ----------------------------------------------------------------------------------------------
# Wan (RLinf / DiffSynth)
# ----------------------------------------------------------------------------------------------

# DiffSynth's WanModel names, written out independently of wan/converter.py's table.
DIFFSYNTH_NAMES = {
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.time_proj": "time_projection.1",
    "proj_out": "head.head",
}
DIFFSYNTH_BLOCK_NAMES = {
    "attn1.to_q": "self_attn.q",
    "attn1.to_k": "self_attn.k",
    "attn1.to_v": "self_attn.v",
    "attn1.to_out.0": "self_attn.o",
    "attn1.norm_q": "self_attn.norm_q",
    "attn1.norm_k": "self_attn.norm_k",
    "attn2.to_q": "cross_attn.q",
    "attn2.to_k": "cross_attn.k",
    "attn2.to_v": "cross_attn.v",
    "attn2.to_out.0": "cross_attn.o",
    "attn2.norm_q": "cross_attn.norm_q",
    "attn2.norm_k": "cross_attn.norm_k",
    "norm2": "norm3",
    "ffn.net.0.proj": "ffn.0",
    "ffn.net.2": "ffn.2",
}


def to_diffsynth_name(key: str) -> str:
    if key == "scale_shift_table":
        return "head.modulation"
    if m := re.fullmatch(r"blocks\.(\d+)\.scale_shift_table", key):
        return f"blocks.{m.group(1)}.modulation"
    if m := re.fullmatch(r"blocks\.(\d+)\.(.+)\.(weight|bias)", key):
        return f"blocks.{m.group(1)}.{DIFFSYNTH_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"
    module, leaf = key.rsplit(".", 1)
    return f"{DIFFSYNTH_NAMES.get(module, module)}.{leaf}"


def write_diffsynth_dit(
    model: WanActionTransformer,
    path: Path,
    extra: dict | None = None,
    dtype: torch.dtype | None = None,
) -> dict:
    """RLinf's `model-00001.safetensors`: DiffSynth names under a `model.` prefix, plus Wan's
    (unused) text projection."""
    state = {"model." + to_diffsynth_name(k): v.clone() for k, v in model.state_dict().items()}
    state["model.text_embedding.0.weight"] = torch.randn(32, 8)
    state.update(extra or {})
    if dtype is not None:
        state = {k: v.to(dtype) for k, v in state.items()}
    save_file(state, str(path))
    return state


def write_wan22_vae(vae, path: Path) -> None:
    """`Wan2.2_VAE.pth`: the original Wan2.2 key names, a plain torch.save'd state dict."""
    from wmrl_cli.world_models.wan.converter import diffusers_to_original_vae

    torch.save(diffusers_to_original_vae(vae.state_dict()), path)


# ----------------------------------------------------------------------------------------------
# OpenSora (WMPO / RLinf)
# ----------------------------------------------------------------------------------------------


def stdit3_published_state(model: STDiT3) -> dict[str, torch.Tensor]:
    """The model's tensors as a WMPO / RLinf file holds them: `model.` prefix, plus the unused
    caption and fps embedders."""
    hidden = model.config.hidden_size
    state = {f"model.{k}": v.clone() for k, v in model.state_dict().items()}
    state["model.y_embedder.y_embedding"] = torch.randn(300, 32)
    state["model.y_embedder.y_proj.fc1.weight"] = torch.randn(hidden, 32)
    state["model.y_embedder.y_proj.fc2.weight"] = torch.randn(hidden, hidden)
    state["model.fps_embedder.mlp.0.weight"] = torch.randn(hidden, 256)
    return state


# ----------------------------------------------------------------------------------------------
# Reward model and reset set (RLinf)
# ----------------------------------------------------------------------------------------------


def write_resnet_rm(path: Path, width: int = 4, seed: int = 0) -> None:
    """`resnet_rm.pth`: RLinf's ResnetRewModel state dict (`net.*` keys), plain tensors."""
    torch.manual_seed(seed)
    model = build_resnet_reward_model(ResnetRewConfig(width=width))
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, path)


def write_taskemb_resnet_rm(path: Path, width: int = 4, num_tasks: int = 10, seed: int = 0) -> None:
    """`taskemb_resnet_rm.pth` (LIBERO-Goal's): RLinf's TaskEmbedResnetRewModel state dict
    (`visual_encoder.*`, `task_embedding.weight`, `fusion_layer.*`), plain tensors."""
    torch.manual_seed(seed)
    config = ResnetRewConfig(width=width, task_embedding=True, num_tasks=num_tasks)
    model = build_resnet_reward_model(config)
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, path)


def _frame(image: np.ndarray, action: np.ndarray, instruction: str) -> dict:
    return {"image": image, "instruction": instruction, "delta_action": action.astype(np.float32)}


def _save_frames(path: Path, frames: list[dict]) -> None:
    array = np.empty(len(frames), dtype=object)
    for i, frame in enumerate(frames):
        array[i] = frame
    np.save(path, array, allow_pickle=True)


def write_rlinf_reset_set(
    directory: Path,
    instructions: list[str],
    size: int = 256,
    kir: bool = True,
    context: int = 4,
    seed: int = 0,
) -> None:
    """`dataset/trajN.npy` (the initial frame) and, with kir, `dataset/trajN_kir.npy` (the
    reference frame, then the keyframe's preceding frames and the keyframe), one per
    instruction, with only the keys RLinf reads: image, instruction, delta_action."""
    rng = np.random.default_rng(seed)
    dataset = directory / "dataset"
    dataset.mkdir(parents=True, exist_ok=True)
    rest = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float32)
    for n, instruction in enumerate(instructions):
        images = rng.integers(0, 256, size=(context + 1, size, size, 3), dtype=np.uint8)
        _save_frames(dataset / f"traj{n}.npy", [_frame(images[0], rest, instruction)])
        if kir:
            actions = rng.uniform(-1, 1, size=(context + 1, 7)).astype(np.float32)
            frames = [_frame(images[0], rest, instruction)] + [
                _frame(images[i], actions[i], instruction) for i in range(1, context + 1)
            ]
            _save_frames(dataset / f"traj{n}_kir.npy", frames)


# ----------------------------------------------------------------------------------------------
# OpenVLA-OFT (prismatic layout)
# ----------------------------------------------------------------------------------------------

DINO_ID = "vit_large_patch14_reg4_dinov2.lvd142m"
SIGLIP_ID = "vit_so400m_patch14_siglip_224"
HEADS = 16  # both timm models use 16 heads; the tiny dims keep that
FEATURIZERS = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")
REMOTE_CODE = (
    "configuration_prismatic.py",
    "modeling_prismatic.py",
    "processing_prismatic.py",
)


def source_policy(
    instructions: list[str],
    image_size: int = 56,
    unnorm_key: str = "libero_spatial_no_noops",
    seed: int = 0,
) -> OpenVLAOFT:
    """A tiny fused DINOv2 + SigLIP policy shaped like what the loader infers from the files,
    every weight random (LayerScale starts at 1e-5 otherwise)."""
    torch.manual_seed(seed)
    tok = build_word_tokenizer(instructions)
    vocab = len(tok) + 256
    dino = VisionTowerConfig(
        kind="dinov2", image_size=image_size, patch_size=14, hidden_size=64, num_layers=2,
        num_heads=HEADS, mlp_dim=256, num_register_tokens=4,
        image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD, timm_id=DINO_ID,
    )  # fmt: skip
    siglip = VisionTowerConfig(
        kind="siglip", image_size=image_size, patch_size=14, hidden_size=48, num_layers=2,
        num_heads=HEADS, mlp_dim=112, image_mean=SIGLIP_MEAN, image_std=SIGLIP_STD,
        timm_id=SIGLIP_ID,
    )  # fmt: skip
    cfg = OpenVLAOFTConfig(
        name="prismatic-tiny",
        vision=[dino, siglip],
        llm=LlamaSpec(
            hidden_size=64,
            intermediate_size=128,
            num_layers=2,
            num_heads=4,
            embedding_size=vocab + 64,
        ),  # fmt: skip
        vocab_size=vocab,
        pad_token_id=tok.pad_token_id,
        attention="bidirectional",
    )
    stats = {unnorm_key: compute_statistics(np.random.default_rng(seed).normal(size=(99, 7)))}
    policy = OpenVLAOFT(cfg, tok, stats).eval()
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "mask_token" not in name:
                p.copy_(
                    torch.randn(p.shape) * (0.3 if "lambda1" in name else 0.05)
                    + ("lambda1" in name)
                )
    return policy


def _qkv(sd: dict, base: str, names: tuple[str, str, str]) -> dict[str, torch.Tensor]:
    out = {}
    for param in ("weight", "bias"):
        out[f"attn.qkv.{param}"] = torch.cat([sd[f"{base}{n}.{param}"] for n in names], dim=0)
    return out


def to_prismatic(policy: OpenVLAOFT) -> dict[str, torch.Tensor]:
    """State dict in the published layout (the inverse of what the loader maps): timm ViT names
    (fused qkv, LayerScale as `scale_factor`, one more block than OpenVLA reads, the final norm
    and SigLIP's attention pool), projector.fc1..3 and HF Llama names."""
    sd = {k: v.clone() for k, v in policy.state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    for i, (prefix, tower) in enumerate(zip(FEATURIZERS, policy.config.vision)):
        src = f"vision_towers.{i}.model."
        emb = src + "embeddings."
        for n in range(tower.num_layers + 1):  # one more block than OpenVLA reads
            blk: dict[str, torch.Tensor] = {}
            m = min(n, tower.num_layers - 1)  # the extra final block copies the shapes of the last
            if tower.kind == "dinov2":
                b = f"{src}encoder.layer.{m}."
                blk.update(_qkv(sd, b + "attention.", ("q_proj", "k_proj", "v_proj")))
                blk["attn.proj.weight"] = sd[b + "attention.o_proj.weight"]
                blk["attn.proj.bias"] = sd[b + "attention.o_proj.bias"]
                blk["ls1.scale_factor"] = sd[b + "layer_scale1.lambda1"]
                blk["ls2.scale_factor"] = sd[b + "layer_scale2.lambda1"]
                norms = ("norm1", "norm2")
            else:
                b = f"{src}encoder.layers.{m}."
                blk.update(_qkv(sd, b + "self_attn.", ("q_proj", "k_proj", "v_proj")))
                blk["attn.proj.weight"] = sd[b + "self_attn.out_proj.weight"]
                blk["attn.proj.bias"] = sd[b + "self_attn.out_proj.bias"]
                norms = ("layer_norm1", "layer_norm2")
            for timm_norm, hf_norm in zip(("norm1", "norm2"), norms):
                for param in ("weight", "bias"):
                    blk[f"{timm_norm}.{param}"] = sd[f"{b}{hf_norm}.{param}"]
            for fc in ("fc1", "fc2"):
                for param in ("weight", "bias"):
                    blk[f"mlp.{fc}.{param}"] = sd[f"{b}mlp.{fc}.{param}"]
            if n == tower.num_layers:
                blk = {k: torch.randn_like(v) for k, v in blk.items()}
            out.update({f"{prefix}blocks.{n}.{k}": v for k, v in blk.items()})
        d = tower.hidden_size
        out[prefix + "norm.weight"], out[prefix + "norm.bias"] = torch.ones(d), torch.zeros(d)
        if tower.kind == "dinov2":
            pos = sd[emb + "position_embeddings"]
            out[prefix + "cls_token"] = sd[emb + "cls_token"] + pos[:, :1]  # timm: no class pos
            out[prefix + "reg_token"] = sd[emb + "register_tokens"]
            out[prefix + "pos_embed"] = pos[:, 1:]
            out[prefix + "patch_embed.proj.weight"] = sd[emb + "patch_embeddings.projection.weight"]
            out[prefix + "patch_embed.proj.bias"] = sd[emb + "patch_embeddings.projection.bias"]
        else:
            out[prefix + "pos_embed"] = sd[emb + "position_embedding.weight"][None]
            out[prefix + "patch_embed.proj.weight"] = sd[emb + "patch_embedding.weight"]
            out[prefix + "patch_embed.proj.bias"] = sd[emb + "patch_embedding.bias"]
            pool = {
                "latent": (1, 1, d), "q.weight": (d, d), "q.bias": (d,), "kv.weight": (2 * d, d),
                "kv.bias": (2 * d,), "proj.weight": (d, d), "proj.bias": (d,), "norm.weight": (d,),
                "norm.bias": (d,), "mlp.fc1.weight": (4 * d, d), "mlp.fc1.bias": (4 * d,),
                "mlp.fc2.weight": (d, 4 * d), "mlp.fc2.bias": (d,),
            }  # fmt: skip
            out.update({f"{prefix}attn_pool.{k}": torch.randn(s) for k, s in pool.items()})
    for key, value in sd.items():
        if key.startswith(("projector.", "language_model.")):
            out[key] = value
    return {k: v.contiguous() for k, v in out.items()}


def prismatic_config(policy: OpenVLAOFT) -> dict:
    """config.json of a published OpenVLA-OFT checkpoint (prismatic `OpenVLAConfig`)."""
    cfg = policy.config
    sizes = [tower.image_size for tower in cfg.vision]
    return {
        "architectures": ["OpenVLAForActionPrediction"],
        "auto_map": {
            "AutoConfig": "configuration_prismatic.OpenVLAConfig",
            "AutoModelForVision2Seq": "modeling_prismatic.OpenVLAForActionPrediction",
        },
        "model_type": "openvla",
        "vision_backbone_id": "dinosiglip-vit-so-224px",
        "llm_backbone_id": "llama2-7b-pure",
        "arch_specifier": "no-align+fused-gelu-mlp",
        "use_fused_vision_backbone": True,
        "image_resize_strategy": "resize-naive",
        "image_sizes": sizes,
        "timm_model_ids": [DINO_ID, SIGLIP_ID],
        "timm_override_act_layers": [None, None],
        "hf_llm_id": "meta-llama/Llama-2-7b-hf",
        "llm_max_length": 2048,
        "n_action_bins": 256,
        "norm_stats": policy.norm_stats,
        "pad_token_id": cfg.pad_token_id,
        "pad_to_multiple_of": 64,
        "text_config": {
            "model_type": "llama",
            "vocab_size": cfg.llm.embedding_size,
            "hidden_size": cfg.llm.hidden_size,
            "intermediate_size": cfg.llm.intermediate_size,
            "num_hidden_layers": cfg.llm.num_layers,
            "num_attention_heads": cfg.llm.num_heads,
            "pad_token_id": cfg.pad_token_id,
            "torch_dtype": "bfloat16",
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1",
    }


def write_prismatic_dir(
    policy: OpenVLAOFT, directory: Path, shards: int = 1, dtype: torch.dtype | None = None
) -> Path:
    """A published OpenVLA-OFT directory: config.json, dataset_statistics.json, the tokenizer,
    and model.safetensors (shards=1) or model-0000i-of-0000n.safetensors + index."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(prismatic_config(policy), indent=2))
    (directory / "dataset_statistics.json").write_text(json.dumps(policy.norm_stats))
    weights = to_prismatic(policy)
    if dtype is not None:
        weights = {k: v.to(dtype) for k, v in weights.items()}
    if shards == 1:
        save_file(weights, str(directory / "model.safetensors"))
    else:
        names = tuple(f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1))
        write_shards(directory, weights, names)
    policy.tokenizer.save_pretrained(str(directory))
    return directory


# ----------------------------------------------------------------------------------------------
# Whole published repositories, tiny
# ----------------------------------------------------------------------------------------------

LIBERO_INSTRUCTIONS = [
    "pick up the black bowl between the plate and the ramekin and place it on the plate",
    "pick up the black bowl next to the ramekin and place it on the plate",
    "pick up the black bowl on the stove and place it on the plate",
]


def write_wan_libero(directory: Path, frame_size: int = 256) -> Path:
    """RLinf-Wan-LIBERO-Spatial in its published tree. The DiT keeps Wan's 128-wide heads (the
    head count is not in the weights) and 48 latent channels; the VAE is the Wan2.2 layout
    (residual stages, 16x spatial, 4x temporal) at a small width."""
    from diffusers import AutoencoderKLWan

    from wmrl_cli.world_models.wan import WanTransformerConfig, tiny_vae_config

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    dit = WanActionTransformer(
        WanTransformerConfig(num_attention_heads=1, freq_dim=32, ffn_dim=128, num_layers=1)
    )
    write_diffsynth_dit(dit, directory / "model-00001.safetensors", dtype=torch.bfloat16)
    vae = tiny_vae_config(z_dim=48)
    vae.update(base_dim=8, decoder_base_dim=8, dim_mult=[1, 1, 1, 1], scale_factor_spatial=16)
    vae["temperal_downsample"] = [False, True, True]
    write_wan22_vae(AutoencoderKLWan(**vae), directory / "Wan2.2_VAE.pth")
    write_resnet_rm(directory / "resnet_rm.pth")
    write_rlinf_reset_set(directory, LIBERO_INSTRUCTIONS, size=frame_size, kir=True)
    return directory


def write_opensora_libero(directory: Path, frame_size: int = 256) -> Path:
    """RLinf-OpenSora-LIBERO-Spatial as its doc's tree shows it: a depth-1 STDiT3 with 4
    none-action embeddings in two shards, an 8x SDXL-style VAE folder, the action statistics,
    the reward model and initial frames."""
    from diffusers import AutoencoderKL

    from wmrl_cli.world_models.opensora import STDiT3Config, tiny_vae_config

    torch.manual_seed(0)
    config = STDiT3Config(depth=1, hidden_size=32, num_heads=4, num_none_actions=4)
    write_shards(directory, stdit3_published_state(STDiT3(config)))
    model_json = {"model_type": "STDiT3", "depth": 1, "hidden_size": 32, "num_heads": 4}
    (directory / "config.json").write_text(json.dumps(model_json))
    vae = tiny_vae_config()
    vae.update(
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[8, 8, 8, 8],
        norm_num_groups=4,
        sample_size=frame_size,
        scaling_factor=0.13025,
    )
    AutoencoderKL(**vae).save_pretrained(directory / "vae", safe_serialization=True)
    stats = compute_statistics(np.random.default_rng(1).normal(size=(99, 7)))
    (directory / "dataset_statistics.json").write_text(json.dumps(stats))
    write_resnet_rm(directory / "resnet_rm.pth", seed=1)
    write_rlinf_reset_set(directory, LIBERO_INSTRUCTIONS, size=frame_size, kir=False)
    return directory


def write_openvla_oft_sft(directory: Path, unnorm_key: str = "libero_spatial_no_noops") -> Path:
    """Haozhan72/Openvla-oft-SFT-libero-*-traj1: prismatic keys in bf16 shards, the statistics
    under the unnorm key, tokenizer files, and the remote code (which must never run)."""
    policy = source_policy(LIBERO_INSTRUCTIONS, unnorm_key=unnorm_key)
    write_prismatic_dir(policy, directory, shards=2, dtype=torch.bfloat16)
    for name in REMOTE_CODE:
        (directory / name).write_text(f"raise RuntimeError('{name} must never be executed')\n")
    return directory
