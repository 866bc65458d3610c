"""Native loading of published OpenVLA-OFT directories (prismatic key layout).

A helper (tests/helpers/published_layouts.py) writes a tiny checkpoint in that exact layout:
config.json in prismatic style, timm ViT names under vision_backbone.{featurizer,fused_featurizer}
(fused qkv, LayerScale renamed `scale_factor` as the remote code does, the final block, norm and
SigLIP attention pool that OpenVLA never uses), projector.fc1..fc3 and HF Llama names. A minimal
timm-style ViT forward written here checks that the loaded towers compute what timm would.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from tests.helpers.published_layouts import HEADS, source_policy, write_prismatic_dir
from wmrl_cli.errors import WmrlError
from wmrl_cli.policies.checkpoint import from_pretrained, load_prismatic
from wmrl_cli.policies.openvla_oft import OpenVLAOFT

INSTRUCTIONS = ["put the bowl on the plate", "open the top drawer"]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (conftest.py)


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
    policy = source_policy(INSTRUCTIONS)
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


def test_loads_in_the_training_weights_dtype_with_float32_normalization(prismatic_dir):
    """RL with `training.param_dtype=bf16` loads the published bf16 weights as they are (not
    read into float32 and cast: twice the memory at load); the pixel statistics stay float32
    (a bf16 buffer would round ImageNet's 0.485 to 0.484), so the towers' inputs are those of
    the float32 load."""
    from wmrl_cli.jobs.assembly import load_policy
    from wmrl_cli.jobs.inputs import Inputs

    _, directory = prismatic_dir
    inputs = Inputs(directory, None, None, None, unnorm_key="libero_spatial")
    weights = load_policy(inputs, "cpu", "bfloat16")
    master = load_policy(inputs, "cpu", "float32")
    assert {p.dtype for p in weights.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in master.parameters()} == {torch.float32}
    for (name, a), (_, b) in zip(weights.named_buffers(), master.named_buffers(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b), name  # float32 or integer
    pixels = torch.rand(1, 3, 56, 56)
    for a, b in zip(weights.vision_towers, master.vision_towers, strict=True):
        torch.testing.assert_close(a.preprocess(pixels), b.preprocess(pixels), rtol=0, atol=0)


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
