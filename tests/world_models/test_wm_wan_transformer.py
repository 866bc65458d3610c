"""The action-conditioned Wan DiT against diffusers' WanTransformer3DModel, and the full size."""

from __future__ import annotations

import torch
from diffusers import WanTransformer3DModel

from wmrl_cli.world_models.wan import (
    WanActionTransformer,
    WanTransformerConfig,
    WanWorldModel,
    WanWorldModelConfig,
)

TINY = dict(
    patch_size=(1, 2, 2),
    num_attention_heads=2,
    attention_head_dim=16,
    in_channels=4,
    out_channels=4,
    freq_dim=32,
    ffn_dim=64,
    num_layers=2,
)


def _tiny_pair() -> tuple[WanTransformer3DModel, WanActionTransformer]:
    torch.manual_seed(0)
    reference = WanTransformer3DModel(
        **TINY, text_dim=8, cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6
    ).eval()
    ours = WanActionTransformer(WanTransformerConfig(**TINY, action_dim=3)).eval()
    return reference, ours


def test_diffusers_weights_load_and_match_with_zero_action_modulation() -> None:
    reference, ours = _tiny_pair()
    with torch.no_grad():  # make the affine cross-attention norm non-trivial
        for block in reference.blocks:
            block.norm2.weight.normal_()
            block.norm2.bias.normal_()
    non_action = {
        k: v
        for k, v in reference.state_dict().items()
        if "condition_embedder.text_embedder" not in k
    }
    result = ours.load_state_dict(non_action, strict=False)
    assert result.unexpected_keys == []
    assert sorted({k.split(".")[0] for k in result.missing_keys}) == ["action_mlp1", "action_mlp2"]

    gen = torch.Generator().manual_seed(1)
    batch, frames, height, width = 2, 3, 4, 6
    latents = torch.randn(batch, 4, frames, height, width, generator=gen)
    text = torch.randn(batch, 5, 8, generator=gen)
    # Per latent frame: clean conditioning frame (t=0), then two noisy frames.
    per_frame = torch.tensor([[0.0, 700.0, 700.0], [0.0, 120.0, 120.0]])
    tokens_per_frame = (height // 2) * (width // 2)
    per_token = per_frame.repeat_interleave(tokens_per_frame, dim=1)

    with torch.no_grad():
        expected = reference(latents, per_token, text, return_dict=False)[0]
        context = reference.condition_embedder.text_embedder(text)
        zero_mod = torch.zeros(batch, frames, ours.config.dim)
        got = ours(latents, per_frame, context, zero_mod)
        got_without = ours(latents, per_frame, context, None)
    assert got.shape == expected.shape == (batch, 4, frames, height, width)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4)
    assert torch.equal(got, got_without)


def test_action_modulation_changes_output_and_grouping_repeats_first_action() -> None:
    _, ours = _tiny_pair()
    actions = torch.randn(2, 9, 3)  # 1 + 4 * 2 frames -> 3 latent frames
    context, modulation, _ = ours.embed_actions(actions)
    assert context.shape == (2, 9, 32) and modulation.shape == (2, 3, 32)
    first = ours.action_mlp2(actions[:, :1].repeat(1, 4, 1).reshape(2, 12))
    assert torch.allclose(modulation[:, 0], first, atol=1e-6)
    second = ours.action_mlp2(actions[:, 1:5].reshape(2, 12))
    assert torch.allclose(modulation[:, 1], second, atol=1e-6)

    latents = torch.randn(2, 4, 3, 4, 4)
    timestep = torch.tensor([[0.0, 500.0, 500.0]] * 2)
    with torch.no_grad():
        a = ours(latents, timestep, context, modulation)
        b = ours(latents, timestep, context, torch.zeros_like(modulation))
    assert not torch.allclose(a, b)


def test_full_config_on_meta_device_has_5b_transformer() -> None:
    config = WanWorldModelConfig.full()
    assert config.transformer.dim == 3072 and config.transformer.num_layers == 30
    with torch.device("meta"):
        model = WanWorldModel(config)
    dit = sum(p.numel() for p in model.transformer.parameters())
    vae = sum(p.numel() for p in model.vae.parameters())
    assert 4.9e9 < dit < 5.1e9, dit
    assert 6e8 < vae < 8e8, vae  # the Wan2.2 VAE
    assert model.transformer.action_mlp1[0].weight.shape == (3072, 7)
    assert model.transformer.action_mlp2[0].weight.shape == (4 * 3072, 28)
    assert model.transformer.action_mlp2[2].weight.shape == (3072, 4 * 3072)
    assert model.transformer.patch_embedding.weight.shape == (3072, 48, 1, 2, 2)
