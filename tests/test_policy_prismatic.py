"""Native loading of published OpenVLA-OFT directories (prismatic key layout).

A helper writes a tiny checkpoint in that exact layout: config.json in prismatic style, timm
ViT names under vision_backbone.{featurizer,fused_featurizer} (fused qkv, LayerScale renamed
`scale_factor` as the remote code does, the final block, norm and SigLIP attention pool that
OpenVLA never uses), projector.fc1..fc3 and HF Llama names. A minimal timm-style ViT forward
written here checks that the loaded towers compute what timm would.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.checkpoint import from_pretrained, load_prismatic
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

INSTRUCTIONS = ["put the bowl on the plate", "open the top drawer"]
DINO_ID = "vit_large_patch14_reg4_dinov2.lvd142m"
SIGLIP_ID = "vit_so400m_patch14_siglip_224"
HEADS = 16  # both timm models use 16 heads; the tiny dims keep that


@pytest.fixture(autouse=True)
def _single_thread():
    # Tiny models run fastest on one thread; two OpenMP threads on a shared 2-core box
    # oversubscribe and can be 10-100x slower when other processes are busy.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def source_policy() -> OpenVLAOFT:
    """A tiny policy shaped like what the loader will infer from the prismatic files."""
    torch.manual_seed(0)
    tok = build_word_tokenizer(INSTRUCTIONS)
    vocab = len(tok) + 256
    dino = VisionTowerConfig(
        kind="dinov2", image_size=56, patch_size=14, hidden_size=64, num_layers=2,
        num_heads=HEADS, mlp_dim=256, num_register_tokens=4,
        image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD, timm_id=DINO_ID,
    )  # fmt: skip
    siglip = VisionTowerConfig(
        kind="siglip", image_size=56, patch_size=14, hidden_size=48, num_layers=2,
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
    stats = {
        "libero_spatial_no_noops": compute_statistics(np.random.default_rng(0).normal(size=(99, 7)))
    }
    policy = OpenVLAOFT(cfg, tok, stats).eval()
    with torch.no_grad():  # make every tensor matter (LayerScale starts at 1e-5)
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
    """State dict in the published layout (the inverse of what the loader maps)."""
    sd = {k: v.clone() for k, v in policy.state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    for i, (prefix, tower) in enumerate(
        zip(
            ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer."),
            policy.config.vision,
        )
    ):
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


def write_prismatic_dir(policy: OpenVLAOFT, directory: Path) -> Path:
    directory.mkdir(parents=True)
    cfg = policy.config
    meta = {
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
        "image_sizes": [56, 56],
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
    (directory / "config.json").write_text(json.dumps(meta, indent=2))
    (directory / "dataset_statistics.json").write_text(json.dumps(policy.norm_stats))
    save_file(to_prismatic(policy), str(directory / "model.safetensors"))
    policy.tokenizer.save_pretrained(str(directory))
    return directory


def timm_reference(weights: dict, prefix: str, kind: str, pixels: torch.Tensor) -> torch.Tensor:
    """What timm's get_intermediate_layers(n={depth - 2}) returns, written from timm's forward."""
    w = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
    x = F.conv2d(pixels, w["patch_embed.proj.weight"], w["patch_embed.proj.bias"], stride=14)
    x = x.flatten(2).transpose(1, 2) + w["pos_embed"]
    if kind == "dinov2":  # no_embed_class: position first, then [cls, registers, patches]
        b = x.shape[0]
        x = torch.cat([w["cls_token"].expand(b, -1, -1), w["reg_token"].expand(b, -1, -1), x], 1)
    depth = 1 + max(int(k.split(".")[1]) for k in w if k.startswith("blocks."))
    dim = x.shape[-1]
    for n in range(depth - 1):
        p = f"blocks.{n}."
        h = F.layer_norm(x, (dim,), w[p + "norm1.weight"], w[p + "norm1.bias"], 1e-6)
        qkv = F.linear(h, w[p + "attn.qkv.weight"], w[p + "attn.qkv.bias"])
        qkv = qkv.reshape(x.shape[0], x.shape[1], 3, HEADS, dim // HEADS).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        att = F.linear(
            att.transpose(1, 2).reshape(x.shape), w[p + "attn.proj.weight"], w[p + "attn.proj.bias"]
        )
        x = x + att * w.get(p + "ls1.scale_factor", 1.0)
        h = F.layer_norm(x, (dim,), w[p + "norm2.weight"], w[p + "norm2.bias"], 1e-6)
        h = F.linear(
            F.gelu(F.linear(h, w[p + "mlp.fc1.weight"], w[p + "mlp.fc1.bias"])),
            w[p + "mlp.fc2.weight"],
            w[p + "mlp.fc2.bias"],
        )
        x = x + h * w.get(p + "ls2.scale_factor", 1.0)
    return x[:, 5:] if kind == "dinov2" else x


@pytest.fixture(scope="module")
def prismatic_dir(tmp_path_factory) -> tuple[OpenVLAOFT, Path]:
    policy = source_policy()
    return policy, write_prismatic_dir(policy, tmp_path_factory.mktemp("hub") / "openvla-oft-tiny")


def test_loads_and_matches_the_source_policy(prismatic_dir):
    policy, directory = prismatic_dir
    loaded = from_pretrained(directory, dtype="float32", unnorm_key="libero_spatial")
    cfg = loaded.config
    assert cfg.attention == "bidirectional" and cfg.fused and cfg.unnorm_key == "libero_spatial"
    assert [v.num_layers for v in cfg.vision] == [2, 2] and cfg.vision[0].num_register_tokens == 4
    assert cfg.vocab_size == policy.config.vocab_size and cfg.chunk_len == 8 and cfg.action_dim == 7
    dropped = loaded.load_report.dropped
    assert "vision_backbone.featurizer.blocks.2.attn.qkv.weight" in dropped
    assert "vision_backbone.fused_featurizer.attn_pool.latent" in dropped
    images = np.random.default_rng(1).integers(0, 256, size=(2, 56, 56, 3), dtype=np.uint8)
    torch.testing.assert_close(
        loaded(images, INSTRUCTIONS).logits,
        policy(images, INSTRUCTIONS).logits,
        atol=1e-5,
        rtol=1e-5,
    )
    a = loaded.act(images, INSTRUCTIONS, sample=False)
    np.testing.assert_array_equal(a.tokens, policy.act(images, INSTRUCTIONS, sample=False).tokens)


def test_towers_compute_what_timm_computes(prismatic_dir):
    _, directory = prismatic_dir
    loaded = load_prismatic(directory, dtype="float32")
    weights = load_file(str(directory / "model.safetensors"))
    pixels = torch.rand(2, 3, 56, 56)
    prefixes = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")
    with torch.no_grad():
        for tower, prefix in zip(loaded.vision_towers, prefixes):
            expected = timm_reference(weights, prefix, tower.cfg.kind, pixels)
            torch.testing.assert_close(tower(pixels), expected, atol=1e-5, rtol=1e-4)


def _rewrite(directory: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "edited"
    copy.mkdir()
    for f in directory.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    weights = load_file(str(copy / "model.safetensors"))
    edit(weights)
    save_file(weights, str(copy / "model.safetensors"))
    return copy


def test_missing_key_gives_a_one_line_error(prismatic_dir, tmp_path):
    _, directory = prismatic_dir
    edited = _rewrite(directory, tmp_path, lambda w: w.pop("projector.fc3.bias"))
    with pytest.raises(WmrlError) as err:
        from_pretrained(edited, dtype="float32")
    msg = str(err.value)
    assert "missing keys: projector.fc3.bias" in msg and "\n" not in msg


def test_missing_vit_weight_is_named(prismatic_dir, tmp_path):
    _, directory = prismatic_dir
    key = "vision_backbone.fused_featurizer.blocks.1.attn.qkv.weight"
    edited = _rewrite(directory, tmp_path, lambda w: w.pop(key))
    with pytest.raises(WmrlError, match=r"missing keys: .*encoder\.layers\.1\.self_attn\.k_proj"):
        from_pretrained(edited, dtype="float32")


def test_unexpected_key_gives_a_clear_error(prismatic_dir, tmp_path):
    _, directory = prismatic_dir
    edited = _rewrite(
        directory, tmp_path, lambda w: w.update({"proprio_projector.fc1.weight": torch.zeros(2, 2)})
    )
    with pytest.raises(WmrlError, match="unexpected keys: proprio_projector.fc1.weight"):
        from_pretrained(edited, dtype="float32")


def test_continuous_action_head_is_refused(prismatic_dir, tmp_path):
    _, directory = prismatic_dir
    edited = _rewrite(directory, tmp_path, lambda w: None)
    (edited / "action_head--150000_checkpoint.pt").write_bytes(b"")
    with pytest.raises(WmrlError, match="continuous action head"):
        from_pretrained(edited, dtype="float32")
