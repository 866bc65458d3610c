"""Loading STDiT3-named checkpoints: sharded safetensors + index, RLinf's asset layout, errors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKL

from tests.helpers.published_layouts import stdit3_published_state, write_shards
from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.opensora import (
    OpenSoraWorldModelConfig,
    STDiT3,
    STDiT3Config,
    tiny_vae_config,
)
from wmrl_cli.world_models.opensora.converter import (
    infer_stdit3_config,
    load_opensora_vae,
    load_rlinf_opensora_world_model,
    load_stdit3,
    read_stdit3_state_dict,
)

B = 2
STATS = {"action": {"q01": [-0.5] * 7, "q99": [0.5] * 7}, "num_trajectories": 3}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (conftest.py)


def _source(hidden: int = 64, depth: int = 2) -> STDiT3:
    """A WMPO-fork-shaped STDiT3: its text cross-attention is built (and skipped at run time)."""
    torch.manual_seed(0)
    config = STDiT3Config(depth=depth, hidden_size=hidden, num_heads=4, cross_attention=True)
    model = STDiT3(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.normal_(0, 0.05)
    return model


def _inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    latents = torch.randn(B, 4, 12, 8, 8, generator=gen)
    actions = torch.randn(B, 8, 7, generator=gen)
    mask = torch.tensor([[False] * 4 + [True] * 8] * B)
    return latents, torch.tensor([900.0, 100.0]), actions, mask


def test_sharded_stdit3_checkpoint_loads_and_reproduces_outputs(tmp_path: Path) -> None:
    source = _source()
    directory = write_shards(tmp_path / "ckpt", stdit3_published_state(source))
    (directory / "config.json").write_text(json.dumps({"depth": 2, "num_heads": 4}))

    # The index, a shard (its siblings come along) and the directory all name the same weights.
    loaded = load_stdit3(directory)  # config.json beside the shards is read
    from_index = read_stdit3_state_dict(directory / "model.safetensors.index.json")
    from_shard = read_stdit3_state_dict(directory / "model-00002.safetensors")
    assert set(from_index) == set(from_shard) and "x_embedder.proj.weight" in from_shard

    config = loaded.config
    assert (config.depth, config.hidden_size, config.num_heads, config.in_channels) == (2, 64, 4, 4)
    assert config.pred_sigma and config.qk_norm and config.action_dim == 7
    assert not config.cross_attention  # dropped: the world model never runs it
    latents, timestep, actions, mask = _inputs()
    with torch.no_grad():
        want = source(latents, timestep, actions, frame_mask=mask)
        got = loaded(latents, timestep, actions, frame_mask=mask)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_heads_come_from_config_json_or_the_qk_norm_size() -> None:
    state = dict(_source(hidden=64).state_dict())
    assert infer_stdit3_config(state).num_heads == 4  # q_norm weight: head_dim 16
    no_norm = {k: v for k, v in state.items() if "_norm" not in k}
    assert infer_stdit3_config(no_norm).num_heads == 4  # rope.freqs: half a head
    no_hint = {k: v for k, v in no_norm.items() if k != "rope.freqs"}
    with pytest.raises(WmrlError, match="number of heads"):
        infer_stdit3_config(no_hint)
    assert infer_stdit3_config(no_hint, {"num_heads": 8}).num_heads == 8
    with pytest.raises(WmrlError, match="config.json says depth=3"):
        infer_stdit3_config(state, {"depth": 3})
    with pytest.raises(WmrlError, match="config.json says num_heads=2"):
        infer_stdit3_config(state, {"num_heads": 2})


def test_missing_and_unexpected_keys_are_one_line_errors(tmp_path: Path) -> None:
    state = stdit3_published_state(_source())
    del state["model.spatial_blocks.1.mlp.fc2.weight"]
    directory = write_shards(tmp_path / "missing", state)
    with pytest.raises(WmrlError, match=r"missing 1 key\(s\): spatial_blocks\.1\.mlp\.fc2\.weight"):
        load_stdit3(directory)

    state = stdit3_published_state(_source())
    state["model.temporal_blocks.0.attn.extra.weight"] = torch.zeros(3)
    directory = write_shards(tmp_path / "unexpected", state)
    with pytest.raises(WmrlError) as excinfo:
        load_stdit3(directory)
    assert "unexpected 1 key(s): temporal_blocks.0.attn.extra.weight" in str(excinfo.value)
    assert "\n" not in str(excinfo.value)

    with pytest.raises(WmrlError, match="checkpoint not found"):
        load_stdit3(tmp_path / "nowhere")


def test_open_sora_text_to_video_weights_start_a_world_model(tmp_path: Path) -> None:
    # WMPO starts from OpenSora-STDiT-v3, which has no action embedder.
    state = {
        k: v for k, v in stdit3_published_state(_source()).items() if "action_embedder" not in k
    }
    directory = write_shards(tmp_path / "base", state)
    with pytest.raises(WmrlError, match="missing"):
        load_stdit3(directory)
    model = load_stdit3(directory, allow_missing=("action_embedder.",))
    assert model.action_embedder.fc[0].weight.shape == (256, 7)


def test_pth_checkpoints_load_with_weights_only(tmp_path: Path) -> None:
    source = _source()
    torch.save({"model": stdit3_published_state(source)}, tmp_path / "ema.pth")
    loaded = load_stdit3(tmp_path / "ema.pth")
    torch.testing.assert_close(loaded.t_block[1].weight, source.t_block[1].weight)


def test_rlinf_asset_directory_loads_into_the_world_model(tmp_path: Path) -> None:
    source = _source(hidden=32, depth=1)
    asset = write_shards(tmp_path / "RLinf-OpenSora-LIBERO-Spatial", stdit3_published_state(source))
    (asset / "config.json").write_text(json.dumps({"model_type": "STDiT3", "num_heads": 4}))
    (asset / "dataset_statistics.json").write_text(json.dumps(STATS))
    torch.manual_seed(3)
    vae = AutoencoderKL(**tiny_vae_config())
    vae.save_pretrained(asset / "vae", safe_serialization=True)

    config = replace(OpenSoraWorldModelConfig.tiny(), num_inference_steps=2)
    model = load_rlinf_opensora_world_model(asset, config=config).eval()
    assert model.config.transformer.hidden_size == 32 and not model.config.delta_prediction
    assert model.config.action_q99 == [0.5] * 7
    assert model.config.vae["block_out_channels"] == [16, 32, 64]
    for key, value in vae.state_dict().items():
        assert torch.equal(model.vae.state_dict()[key], value), key
    latents, timestep, actions, mask = _inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            model.transformer(latents, timestep, actions, frame_mask=mask),
            source(latents, timestep, actions, frame_mask=mask),
            rtol=0,
            atol=0,
        )
    frames = torch.randint(0, 256, (B, 4, 64, 64, 3), dtype=torch.uint8)
    model.reset_context(frames[:, 0], frames, torch.zeros(B, 4, 7))
    assert model.predict(torch.zeros(B, 8, 7)).shape == (B, 8, 64, 64, 3)

    (asset / "vae" / "config.json").unlink()
    with pytest.raises(WmrlError, match="not a diffusers VAE folder"):
        load_opensora_vae(asset / "vae")
