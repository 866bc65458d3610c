"""The tiny Wan world model: predict, context roll-forward, training loss, save/load, bad input."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig


@pytest.fixture(autouse=True)
def _no_onednn_warmup():
    # oneDNN spends seconds building conv3d kernels for every new input shape; the plain kernels
    # are slower in steady state but have no warm-up, which is what short tests want.
    with torch.backends.mkldnn.flags(enabled=False):
        yield


B = 2
S = 32  # frames of 32x32 keep the tests fast; the code path is the tiny (64x64) config's


def _model(**overrides) -> WanWorldModel:
    torch.manual_seed(0)
    config = WanWorldModelConfig.tiny()
    config = replace(
        config,
        transformer=replace(config.transformer, num_layers=2),
        height=S,
        width=S,
        **overrides,
    )
    return WanWorldModel(config).eval()


def _frames(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*shape, S, S, 3), dtype=torch.uint8, generator=gen)


def _randomize_output(model: WanWorldModel) -> None:
    # Fresh delta models output exactly zero; give the head weights so outputs depend on inputs.
    with torch.no_grad():
        model.transformer.proj_out.weight.normal_(0, 0.02)


def test_predict_shapes_determinism_and_context_roll() -> None:
    model = _model()
    _randomize_output(model)
    ref, ctx, ctx_act = _frames(B), _frames(B, 4, seed=1), torch.randn(B, 4, 7)
    actions = torch.randn(B, 8, 7)

    model.reset_context(ref, ctx, ctx_act)
    first = model.predict(actions, generator=torch.Generator().manual_seed(7))
    assert first.shape == (B, 8, S, S, 3) and first.dtype == torch.uint8

    reference, new_ctx, new_act = model.context()
    assert torch.equal(reference, ref)
    assert torch.equal(new_ctx, first[:, -4:])
    assert torch.equal(new_act, actions[:, -4:])

    # Same context, same seed -> same frames; the rolled context changes the next chunk.
    model.reset_context(ref, ctx, ctx_act)
    again = model.predict(actions, generator=torch.Generator().manual_seed(7))
    assert torch.equal(first, again)
    other_seed = model.generate(ref, ctx, ctx_act, actions, torch.Generator().manual_seed(8))
    assert not torch.equal(first, other_seed)
    second = model.predict(actions, generator=torch.Generator().manual_seed(7))
    assert not torch.equal(second, first)
    assert torch.equal(model.context()[1], second[:, -4:])

    # A 4-frame chunk keeps the last 4 frames too.
    four = model.predict(actions[:, :4], generator=torch.Generator().manual_seed(7))
    assert four.shape == (B, 4, S, S, 3) and torch.equal(model.context()[1], four)


def test_untrained_delta_model_copies_the_context_whatever_the_noise() -> None:
    model = _model()  # delta prediction: zero output -> clean target = last context latent
    ref, ctx, ctx_act = _frames(B), _frames(B, 4, seed=1), torch.randn(B, 4, 7)
    outs = [
        model.generate(ref, ctx, ctx_act, torch.randn(B, 8, 7), torch.Generator().manual_seed(s))
        for s in (0, 1)
    ]
    # Identical up to float rounding at the uint8 boundary.
    assert (outs[0].int() - outs[1].int()).abs().max() <= 1


def test_training_loss_backward_is_finite_and_cached_latents_match() -> None:
    model = _model().train()
    _randomize_output(model)
    batch = {
        "reference_frames": _frames(B),
        "context_frames": _frames(B, 4, seed=1),
        "context_actions": torch.randn(B, 4, 7),
        "target_frames": _frames(B, 8, seed=2),
        "target_actions": torch.randn(B, 8, 7),
    }
    loss = model(batch, generator=torch.Generator().manual_seed(0))
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.transformer.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.transformer.action_mlp1[0].weight.grad.abs().sum() > 0
    assert model.transformer.action_mlp2[0].weight.grad.abs().sum() > 0

    cached = dict(batch, latents=model.encode_window(batch))
    assert cached["latents"].shape == (B, 16, 4, S // 8, S // 8)
    again = model.training_loss(cached, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(loss.detach(), again.detach())
    latents_only = {k: v for k, v in cached.items() if k != "target_frames"}
    third = model.training_loss(latents_only, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(loss.detach(), third.detach())


def test_velocity_parameterisation_loss_and_vae_loss() -> None:
    model = _model(delta_prediction=False, context_noise_sigma=0.0).train()
    batch = {
        "reference_frames": _frames(B),
        "context_frames": _frames(B, 4, seed=1),
        "context_actions": torch.randn(B, 4, 7),
        "target_frames": _frames(B, 4, seed=2),
        "target_actions": torch.randn(B, 4, 7),
    }
    loss = model(batch)
    loss.backward()
    assert torch.isfinite(loss)
    vae_loss = model.autoencoder_loss(_frames(B, 5), generator=torch.Generator().manual_seed(0))
    vae_loss.backward()
    assert torch.isfinite(vae_loss) and model.vae.encoder.conv_in.weight.grad is not None


def test_save_and_load_roundtrip(tmp_path: Path) -> None:
    model = _model()
    _randomize_output(model)
    model.set_latent_statistics(torch.full((16,), 0.1), torch.full((16,), 2.0))
    target = tmp_path / "wm"
    model.save_pretrained(target)
    model.save_pretrained(target)  # overwriting an existing directory
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    assert [p.name for p in tmp_path.iterdir()] == ["wm"]

    loaded = WanWorldModel.from_pretrained(target).eval()
    assert loaded.config == model.config
    inputs = (_frames(B), _frames(B, 4, seed=1), torch.randn(B, 4, 7), torch.randn(B, 8, 7))
    a = model.generate(*inputs, generator=torch.Generator().manual_seed(3))
    b = loaded.generate(*inputs, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)

    loaded.offload()
    loaded.onload("cpu")
    assert loaded.device == torch.device("cpu")


def test_bad_input_raises_one_line_errors(tmp_path: Path) -> None:
    model = _model()
    with pytest.raises(WmrlError, match="reset_context"):
        model.predict(torch.zeros(B, 8, 7))
    with pytest.raises(WmrlError, match="uint8"):
        model.reset_context(_frames(B).float(), _frames(B, 4), torch.zeros(B, 4, 7))
    with pytest.raises(WmrlError, match="4 context frames"):
        model.reset_context(_frames(B), _frames(B, 3), torch.zeros(B, 3, 7))
    model.reset_context(_frames(B), _frames(B, 4), torch.zeros(B, 4, 7))
    with pytest.raises(WmrlError, match="multiple of 4"):
        model.predict(torch.zeros(B, 6, 7))
    with pytest.raises(WmrlError, match=r"\[2,T,7\]"):
        model.predict(torch.zeros(B, 8, 6))
    with pytest.raises(WmrlError, match="not a Wan world-model directory"):
        WanWorldModel.from_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="unknown"):
        WanWorldModelConfig.from_dict({"hieght": 64})
    with pytest.raises(ConfigError, match="num_target_frames"):
        WanWorldModel(replace(WanWorldModelConfig.tiny(), num_target_frames=6))


def test_configured_reference_action_is_the_default() -> None:
    rlinf_default = [0.0] * 6 + [-1.0]  # RLinf: zeros with the gripper open, never updated
    assert WanWorldModelConfig.full().reference_action == rlinf_default
    model = _model(reference_action=rlinf_default)
    _randomize_output(model)
    inputs = (_frames(B), _frames(B, 4, seed=1), torch.randn(B, 4, 7), torch.randn(B, 4, 7))

    def run(reference_actions: torch.Tensor | None) -> torch.Tensor:
        gen = torch.Generator().manual_seed(0)
        return model.generate(*inputs, generator=gen, reference_actions=reference_actions)

    implicit = run(None)
    assert torch.equal(implicit, run(torch.tensor([rlinf_default] * B)))
    assert not torch.equal(implicit, run(torch.zeros(B, 7)))


def test_a_bf16_load_keeps_what_diffusers_keeps_in_float32(tmp_path: Path) -> None:
    """A world model loaded in bf16 (as imagination loads it on a GPU): the weights bf16, but
    what diffusers keeps float32 in its Wan DiT (`WanTransformer3DModel._keep_in_fp32_modules`:
    the RoPE tables, the time embedder, the modulation tables, the blocks' norms) and the latent
    statistics stay float32; the VAE's norms (the same names in another model) are bf16, as
    diffusers' VAE keeps nothing. It predicts as loaded. Until 2026-11-29 `.to(bf16)` cast all."""
    _model().save_pretrained(tmp_path / "wm")
    model = WanWorldModel.from_pretrained(tmp_path / "wm", dtype=torch.bfloat16)
    t, block = model.transformer, model.transformer.blocks[0]
    kept = [
        t.rope.freqs_cos,
        t.rope.freqs_sin,
        t.condition_embedder.time_embedder.linear_1.weight,
        t.scale_shift_table,
        block.scale_shift_table,
        block.norm2.weight,
        model.latents_mean,
        model.latents_std,
    ]
    assert all(tensor.dtype == torch.float32 for tensor in kept)
    vae_norms = [p for n, p in model.vae.named_parameters() if "norm1" in n.split(".")]
    assert vae_norms and all(p.dtype == torch.bfloat16 for p in vae_norms)
    assert block.attn1.to_q.weight.dtype == model.dtype == model.vae_dtype == torch.bfloat16
    model.reset_context(_frames(B), _frames(B, 4, seed=1), torch.randn(B, 4, 7))
    frames = model.predict(torch.randn(B, 8, 7), generator=torch.Generator().manual_seed(7))
    assert frames.shape == (B, 8, S, S, 3) and frames.dtype == torch.uint8
