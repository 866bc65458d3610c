"""STDiT3: Open-Sora / WMPO parameter names, causal temporal attention, the frame-mask branch."""

from __future__ import annotations

import pytest
import torch

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.world_models.opensora import (
    OpenSoraWorldModelConfig,
    STDiT3,
    STDiT3Config,
    validate_config,
)
from wmrl_cli.world_models.opensora.blocks import sincos_position_embedding_2d

B, T = 2, 12


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (conftest.py)


def small_config(**overrides) -> STDiT3Config:
    base = dict(depth=2, hidden_size=64, num_heads=4, action_dim=7)
    base.update(overrides)
    return STDiT3Config(**base)


def randomized(config: STDiT3Config, seed: int = 0) -> STDiT3:
    """A model whose zero-initialized projections (temporal blocks) carry weights too."""
    torch.manual_seed(seed)
    model = STDiT3(config).eval()
    with torch.no_grad():
        for block in model.temporal_blocks:
            block.attn.proj.weight.normal_(0, 0.05)
            block.mlp.fc2.weight.normal_(0, 0.05)
    return model


def inputs(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    latents = torch.randn(B, 4, T, 8, 8, generator=gen)
    timestep = torch.tensor([700.0, 250.0])
    actions = torch.randn(B, 8, 7, generator=gen)
    mask = torch.tensor([[False] * 4 + [True] * 8] * B)
    return latents, timestep, actions, mask


def test_parameter_names_follow_open_sora_and_wmpo() -> None:
    expected = {
        "rope.freqs",
        "x_embedder.proj.weight",
        "x_embedder.proj.bias",
        "t_embedder.mlp.0.weight",
        "t_embedder.mlp.0.bias",
        "t_embedder.mlp.2.weight",
        "t_embedder.mlp.2.bias",
        "action_embedder.fc.0.weight",
        "action_embedder.fc.0.bias",
        "action_embedder.fc.2.weight",
        "action_embedder.fc.2.bias",
        "action_embedder.none_action.weight",
        "t_block.1.weight",
        "t_block.1.bias",
        "final_layer.linear.weight",
        "final_layer.linear.bias",
        "final_layer.scale_shift_table",
    }
    block_keys = [
        "attn.qkv.weight",
        "attn.qkv.bias",
        "attn.q_norm.weight",
        "attn.k_norm.weight",
        "attn.proj.weight",
        "attn.proj.bias",
        "mlp.fc1.weight",
        "mlp.fc1.bias",
        "mlp.fc2.weight",
        "mlp.fc2.bias",
        "scale_shift_table",
    ]
    cross_keys = [f"cross_attn.{m}.{p}" for m in ("q_linear", "kv_linear", "proj") for p in "wb"]
    for kind in ("spatial_blocks", "temporal_blocks"):
        expected |= {f"{kind}.0.{k}" for k in block_keys}
    model = STDiT3(small_config(depth=1))
    assert set(model.state_dict()) == expected

    with_cross = STDiT3(small_config(depth=1, cross_attention=True))
    cross = {k.replace(".w", ".weight").replace(".b", ".bias") for k in cross_keys}
    extra = set(with_cross.state_dict()) - expected
    assert extra == {
        f"{kind}.0.{k}" for kind in ("spatial_blocks", "temporal_blocks") for k in cross
    }

    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes["action_embedder.fc.0.weight"] == (4 * 64, 7)
    assert shapes["action_embedder.none_action.weight"] == (1, 64)
    assert shapes["t_block.1.weight"] == (6 * 64, 64)
    assert shapes["spatial_blocks.0.scale_shift_table"] == (6, 64)
    assert shapes["spatial_blocks.0.attn.q_norm.weight"] == (16,)
    assert shapes["final_layer.linear.weight"] == (2 * 2 * 8, 64)  # pred_sigma: 8 channels
    assert shapes["rope.freqs"] == (8,)


def test_output_shape_dtype_and_pred_sigma_channels() -> None:
    model = randomized(small_config())
    latents, timestep, actions, mask = inputs()
    with torch.no_grad():
        out = model(latents, timestep, actions, frame_mask=mask)
    assert out.shape == (B, 8, T, 8, 8) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    no_sigma = randomized(small_config(pred_sigma=False))
    with torch.no_grad():
        assert no_sigma(latents, timestep, actions, frame_mask=mask).shape == (B, 4, T, 8, 8)


@pytest.mark.parametrize("causal", [True, False])
def test_temporal_attention_is_causal(causal: bool) -> None:
    model = randomized(small_config(causal_temporal=causal))
    latents, timestep, actions, mask = inputs()
    changed_latents = latents.clone()
    changed_latents[:, :, 7] += 1.0
    changed_actions = actions.clone()
    changed_actions[:, 3] += 1.0  # the action of frame 4 + 3 = 7
    with torch.no_grad():
        base = model(latents, timestep, actions, frame_mask=mask)
        later_frame = model(changed_latents, timestep, actions, frame_mask=mask)
        later_action = model(latents, timestep, changed_actions, frame_mask=mask)
    for changed in (later_frame, later_action):
        assert not torch.allclose(changed[:, :, 7:], base[:, :, 7:])
        earlier_same = torch.allclose(changed[:, :, :7], base[:, :, :7], atol=1e-6)
        assert earlier_same == causal


def test_frame_mask_selects_the_t0_branch_per_frame() -> None:
    model = randomized(small_config())
    latents, timestep, actions, _ = inputs()
    with torch.no_grad():
        # Every frame generated: the same as no mask at all.
        all_true = model(latents, timestep, actions, frame_mask=torch.ones(B, T, dtype=torch.bool))
        no_mask = model(latents, timestep, actions)
        # Every frame context: timestep 15 everywhere and no action embedding (WMPO's t0 branch).
        all_false = model(
            latents, timestep, actions, frame_mask=torch.zeros(B, T, dtype=torch.bool)
        )
        t0 = model(latents, torch.full((B,), 15.0))
    torch.testing.assert_close(all_true, no_mask)
    torch.testing.assert_close(all_false, t0)


def test_none_action_rows_fill_the_context_slots() -> None:
    model = randomized(small_config(num_none_actions=4))
    embedded = model.action_embedder(torch.randn(B, 8, 7), num_frames=T)
    assert embedded.shape == (B, T, 64)
    torch.testing.assert_close(embedded[0, :4], model.action_embedder.none_action.weight)
    with pytest.raises(WmrlError, match="do not fit"):
        model.action_embedder(torch.randn(B, 7, 7), num_frames=T)


def test_position_embedding_halves_encode_column_then_row() -> None:
    pos = sincos_position_embedding_2d(32, 3, 5).view(3, 5, 32)
    assert torch.equal(pos[0, :, :16], pos[2, :, :16])  # first half: column only
    assert torch.equal(pos[:, 0, 16:], pos[:, 4, 16:])  # second half: row only
    assert not torch.equal(pos[0, 0, :16], pos[0, 1, :16])
    # index 0 is sin(0) = 0 then cos(0) = 1 in each half.
    assert torch.equal(pos[0, 0], torch.tensor(([0.0] * 8 + [1.0] * 8) * 2))


def test_full_config_on_meta_device_has_stdit3_xl_size() -> None:
    with torch.device("meta"):
        world_model_dit = STDiT3(STDiT3Config())
        with_text_cross_attention = STDiT3(STDiT3Config(cross_attention=True))
    count = sum(p.numel() for p in world_model_dit.parameters())
    count_cross = sum(p.numel() for p in with_text_cross_attention.parameters())
    # 28 x (spatial + temporal) blocks of 12 h^2 (+ 4 h^2 cross-attention), h = 1152.
    assert 0.90e9 < count < 0.92e9
    assert 1.19e9 < count_cross < 1.22e9
    assert world_model_dit.x_embedder.proj.weight.device.type == "meta"


def test_config_validation_names_the_key() -> None:
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.num_none_actions = 3
    with pytest.raises(ConfigError, match="num_none_actions"):
        validate_config(config)
    config = OpenSoraWorldModelConfig.tiny()
    config.height = 60
    with pytest.raises(ConfigError, match="height/width"):
        validate_config(config)
    with pytest.raises(ConfigError, match="patch_size"):
        STDiT3(small_config(patch_size=(2, 2, 2)))
    with pytest.raises(ConfigError, match="unknown OpenSora"):
        OpenSoraWorldModelConfig.from_dict({"transformer": {"depht": 2}})
