"""Detail carry-over: what the autoencoder loses of the last real frame is added to predictions."""

from __future__ import annotations

from dataclasses import replace

import torch

from wmrl_cli.world_models.interface import WorldModel
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig
from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig

B = 2


def _frames(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*shape, 64, 64, 3), dtype=torch.uint8, generator=gen)


def test_with_detail_adds_and_clamps() -> None:
    frames = torch.tensor([[[[[10, 250, 0]]], [[[100, 100, 100]]]]], dtype=torch.uint8)
    detail = torch.tensor([[[[-20, 10, 5]]]], dtype=torch.int16)
    out = WorldModel.with_detail(frames, detail)
    assert out.dtype == torch.uint8
    assert out[0, 0, 0, 0].tolist() == [0, 255, 5]
    assert out[0, 1, 0, 0].tolist() == [80, 110, 105]
    assert WorldModel.with_detail(frames, None) is frames
    assert WorldModel.reconstruction_detail(frames[:, 0], out[:, 0]).tolist() == [[[[10, -5, -5]]]]


def _opensora(carry: bool) -> OpenSoraWorldModel:
    torch.manual_seed(0)
    config = OpenSoraWorldModelConfig.tiny()
    config = replace(
        config,
        transformer=replace(config.transformer, depth=2),
        num_inference_steps=2,
        carry_detail=carry,
    )
    return OpenSoraWorldModel(config).eval()


def test_an_untrained_delta_model_with_detail_is_exactly_the_copy_baseline() -> None:
    # Zero delta: every target latent is the last context latent, so the decoded prediction is
    # the last frame's reconstruction, and adding back the lost detail gives the frame itself.
    ctx, actions = _frames(B, 4, seed=1), torch.randn(B, 8, 7)
    plain, carried = _opensora(False), _opensora(True)
    for model in (plain, carried):
        model.reset_context(_frames(B), ctx, torch.randn(B, 4, 7))
    expected = ctx[:, -1:].expand(B, 8, 64, 64, 3)
    out = carried.predict(actions, generator=torch.Generator().manual_seed(3))
    assert (out.int() - expected.int()).abs().max() <= 1  # float rounding in the decoder
    blurred = plain.predict(actions, generator=torch.Generator().manual_seed(3))
    assert (blurred.int() - expected.int()).abs().float().mean() > 10  # an untrained VAE
    # The detail rolls with the episode, and the stateless call agrees with predict.
    same = carried.generate(_frames(B), ctx, torch.randn(B, 4, 7), actions)
    assert (same.int() - expected.int()).abs().max() <= 1


def test_wan_adds_the_detail_of_the_last_context_frame() -> None:
    torch.manual_seed(0)
    config = WanWorldModelConfig.tiny(action_dim=4)
    config.num_inference_steps = 1
    model = WanWorldModel(config).eval()
    ref, ctx = _frames(B), _frames(B, 4, seed=1)
    ctx_act, actions = torch.randn(B, 4, 4), torch.randn(B, 8, 4)
    plain = model.generate(ref, ctx, ctx_act, actions, torch.Generator().manual_seed(1))
    model.config.carry_detail = True
    carried = model.generate(ref, ctx, ctx_act, actions, torch.Generator().manual_seed(1))
    latents = model.encode_frames(torch.cat([ref[:, None], ctx], dim=1))
    detail = WorldModel.reconstruction_detail(ctx[:, -1], model.decode_latents(latents)[:, -1])
    assert torch.equal(carried, WorldModel.with_detail(plain, detail))
