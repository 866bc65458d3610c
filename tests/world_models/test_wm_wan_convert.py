"""Checkpoints in RLinf's layouts (DiffSynth-named DiT, original Wan2.2 VAE .pth) load and agree."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKLWan
from safetensors.torch import save_file

from tests.helpers.published_layouts import to_diffsynth_name, write_diffsynth_dit, write_wan22_vae
from wmrl_cli.errors import UnsafeFileError, WmrlError
from wmrl_cli.world_models.wan import (
    WanActionTransformer,
    WanTransformerConfig,
    WanWorldModel,
    WanWorldModelConfig,
    tiny_vae_config,
)
from wmrl_cli.world_models.wan import converter as wc


@pytest.fixture(autouse=True)
def _no_onednn_warmup():
    # oneDNN spends seconds building conv3d kernels for every new input shape; the plain kernels
    # are slower in steady state but have no warm-up, which is what short tests want.
    with torch.backends.mkldnn.flags(enabled=False):
        yield


TINY_DIT = WanTransformerConfig(
    patch_size=(1, 1, 1),
    num_attention_heads=2,
    attention_head_dim=16,
    in_channels=16,
    out_channels=16,
    freq_dim=32,
    ffn_dim=64,
    num_layers=2,
    action_dim=7,
)


def _tiny_dit() -> WanActionTransformer:
    torch.manual_seed(0)
    model = WanActionTransformer(TINY_DIT).eval()
    with torch.no_grad():
        for block in model.blocks:  # the norm2/norm3 swap must matter
            block.norm2.weight.normal_()
            block.norm2.bias.normal_()
    return model


def _dit_output(model: WanActionTransformer) -> torch.Tensor:
    gen = torch.Generator().manual_seed(5)
    latents = torch.randn(2, 16, 3, 4, 4, generator=gen)
    actions = torch.randn(2, 9, 7, generator=gen)
    timestep = torch.tensor([[0.0, 0.0, 800.0], [0.0, 0.0, 300.0]])
    with torch.no_grad():
        return model(latents, timestep, *model.embed_actions(actions))


def test_diffsynth_named_dit_loads_and_reproduces_outputs(tmp_path: Path) -> None:
    model = _tiny_dit()
    state = write_diffsynth_dit(model, tmp_path / "model-00001.safetensors")
    assert "model.blocks.1.norm3.weight" in state and "model.action_mlp2.2.bias" in state

    loaded = wc.load_wan_transformer(tmp_path / "model-00001.safetensors", attention_head_dim=16)
    assert loaded.config == TINY_DIT
    assert torch.equal(_dit_output(loaded.eval()), _dit_output(model))

    # Export back to DiffSynth names gives exactly RLinf's keys (without the unused text keys).
    exported = wc.diffusers_to_diffsynth_dit(loaded.state_dict(), prefix="model.")
    assert set(exported) == {k for k in state if "text_embedding" not in k}


def test_sharded_dit_with_index(tmp_path: Path) -> None:
    model = _tiny_dit()
    state = {to_diffsynth_name(k): v.clone() for k, v in model.state_dict().items()}
    keys = sorted(state)
    shards = {"model-00001.safetensors": keys[::2], "model-00002.safetensors": keys[1::2]}
    for name, names in shards.items():
        save_file({k: state[k] for k in names}, str(tmp_path / name))
    weight_map = {k: name for name, names in shards.items() for k in names}
    index = {"metadata": {}, "weight_map": weight_map}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))

    for path in (tmp_path / "model-00001.safetensors", tmp_path):
        loaded = wc.load_wan_transformer(path, config=TINY_DIT)
        assert torch.equal(_dit_output(loaded.eval()), _dit_output(model))


def test_missing_and_unexpected_dit_keys_are_one_line_errors(tmp_path: Path) -> None:
    model = _tiny_dit()
    state = {to_diffsynth_name(k): v for k, v in model.state_dict().items()}
    broken = dict(state)
    del broken["blocks.1.cross_attn.o.weight"]
    broken["blocks.0.cross_attn.k_img.weight"] = torch.zeros(32, 32)
    save_file(broken, str(tmp_path / "broken.safetensors"))
    with pytest.raises(WmrlError) as info:
        wc.load_wan_transformer(tmp_path / "broken.safetensors", config=TINY_DIT)
    message = str(info.value)
    assert "\n" not in message
    assert "missing 1 key(s): blocks.1.attn2.to_out.0.weight" in message
    assert "unexpected 1 key(s): blocks.0.cross_attn.k_img.weight" in message

    no_actions = {k: v for k, v in state.items() if not k.startswith("action_mlp")}
    save_file(no_actions, str(tmp_path / "plain_wan.safetensors"))
    with pytest.raises(WmrlError, match="action_mlp1.0.weight"):
        wc.load_wan_transformer(tmp_path / "plain_wan.safetensors", attention_head_dim=16)


def test_infer_full_size_config_from_shapes() -> None:
    with torch.device("meta"):
        full = WanActionTransformer(WanTransformerConfig())
    inferred = wc.infer_transformer_config(full.state_dict())
    assert inferred == WanTransformerConfig()


def _tiny_vae() -> AutoencoderKLWan:
    torch.manual_seed(0)
    return AutoencoderKLWan(**tiny_vae_config()).eval()


def test_original_wan22_vae_names_convert(tmp_path: Path) -> None:
    vae = _tiny_vae()
    diffusers_state = vae.state_dict()
    original = wc.diffusers_to_original_vae(diffusers_state)
    # Names of the original Wan2.2 VAE layout (Down/Up residual stages, Resample last).
    expected = [
        (
            "encoder.down_blocks.0.resnets.0.norm1.gamma",
            "encoder.downsamples.0.downsamples.0.residual.0.gamma",
        ),
        (
            "encoder.down_blocks.1.resnets.0.conv_shortcut.weight",
            "encoder.downsamples.1.downsamples.0.shortcut.weight",
        ),
        (
            "encoder.down_blocks.0.downsampler.time_conv.weight",
            "encoder.downsamples.0.downsamples.1.time_conv.weight",
        ),
        (
            "decoder.up_blocks.0.upsampler.resample.1.weight",
            "decoder.upsamples.0.upsamples.2.resample.1.weight",
        ),
        (
            "decoder.up_blocks.2.resnets.1.conv2.bias",
            "decoder.upsamples.2.upsamples.1.residual.6.bias",
        ),
        ("encoder.mid_block.resnets.1.conv1.weight", "encoder.middle.2.residual.2.weight"),
        ("decoder.mid_block.attentions.0.to_qkv.weight", "decoder.middle.1.to_qkv.weight"),
        ("encoder.conv_in.weight", "encoder.conv1.weight"),
        ("decoder.norm_out.gamma", "decoder.head.0.gamma"),
        ("decoder.conv_out.bias", "decoder.head.2.bias"),
        ("quant_conv.weight", "conv1.weight"),
        ("post_quant_conv.bias", "conv2.bias"),
    ]
    for diffusers_key, original_key in expected:
        assert original[original_key] is diffusers_state[diffusers_key]
    assert wc.original_to_diffusers_vae(original).keys() == diffusers_state.keys()

    torch.save(original, tmp_path / "Wan2.2_VAE.pth")
    loaded = wc.load_wan_vae(tmp_path / "Wan2.2_VAE.pth", tiny_vae_config())
    video = torch.rand(1, 3, 5, 32, 32) * 2 - 1
    with torch.no_grad():
        a = vae.decode(vae.encode(video).latent_dist.mode()).sample
        b = loaded.decode(loaded.encode(video).latent_dist.mode()).sample
    assert torch.equal(a, b)


class _RunsCode:
    def __reduce__(self):  # a pickle that would call os.getpid on load
        return (os.getpid, ())


def test_pth_that_would_run_code_is_refused(tmp_path: Path) -> None:
    torch.save({"weight": torch.zeros(1), "payload": _RunsCode()}, tmp_path / "evil.pth")
    with pytest.raises(UnsafeFileError, match="refusing to load"):
        wc.load_state_dict_file(tmp_path / "evil.pth")


def test_rlinf_layout_world_model_loads_end_to_end(tmp_path: Path) -> None:
    config = replace(WanWorldModelConfig.tiny(), delta_prediction=False)
    config = replace(
        config, transformer=replace(config.transformer, num_layers=2), height=32, width=32
    )
    torch.manual_seed(0)
    source = WanWorldModel(config).eval()
    write_diffsynth_dit(source.transformer, tmp_path / "model-00001.safetensors")
    write_wan22_vae(source.vae, tmp_path / "Wan2.2_VAE.pth")

    loaded = wc.load_rlinf_wan_world_model(
        tmp_path / "model-00001.safetensors",
        tmp_path / "Wan2.2_VAE.pth",
        config=config,
        attention_head_dim=32,
    ).eval()
    assert loaded.config.transformer == config.transformer
    ref = torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8)
    ctx = torch.randint(0, 256, (2, 4, 32, 32, 3), dtype=torch.uint8)
    ctx_act, act = torch.randn(2, 4, 7), torch.randn(2, 8, 7)
    outs = [
        m.generate(ref, ctx, ctx_act, act, generator=torch.Generator().manual_seed(0))
        for m in (source, loaded)
    ]
    assert torch.equal(outs[0], outs[1])
