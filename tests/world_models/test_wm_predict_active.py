"""`WorldModel.predict_active`: ended episodes skip the denoiser, on both backends."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig
from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig


@pytest.fixture(autouse=True)
def _small_and_quiet():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.backends.mkldnn.flags(enabled=False):  # no oneDNN warm-up per input shape
        yield
    torch.set_num_threads(threads)


def _model(backend: str) -> OpenSoraWorldModel | WanWorldModel:
    """A tiny model of each backend (2 layers) with a random head, carrying the frames' detail."""
    torch.manual_seed(0)
    if backend == "opensora":
        config = OpenSoraWorldModelConfig.tiny()
        config = replace(
            config,
            transformer=replace(config.transformer, depth=2),
            num_inference_steps=2,
            carry_detail=True,
        )
        model = OpenSoraWorldModel(config).eval()
        head = model.transformer.final_layer.linear.weight
    else:
        config = WanWorldModelConfig.tiny()
        config = replace(
            config,
            transformer=replace(config.transformer, num_layers=2),
            height=32,
            width=32,
            carry_detail=True,
        )
        model = WanWorldModel(config).eval()
        head = model.transformer.proj_out.weight
    with torch.no_grad():
        head.normal_(0, 0.05)  # fresh delta models output exactly zero
    return model


def _inputs(model, batch: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    k, size = model.num_context_frames, (model.height, model.width, 3)
    ref = torch.randint(0, 256, (batch, *size), dtype=torch.uint8, generator=gen)
    ctx = torch.randint(0, 256, (batch, k, *size), dtype=torch.uint8, generator=gen)
    ctx_actions = torch.randn(batch, k, model.action_dim, generator=gen)
    actions = torch.randn(batch, 8, model.action_dim, generator=gen)
    return ref, ctx, ctx_actions, actions


def _state(model) -> dict[str, torch.Tensor | None]:
    return {
        name: None if getattr(model, name) is None else getattr(model, name).clone()
        for name in model.context_state_names
    }


@pytest.mark.parametrize("backend", ["opensora", "wan"])
def test_active_envs_predict_as_alone_and_the_others_hold(backend: str) -> None:
    model = _model(backend)
    alone = copy.deepcopy(model)
    ref, ctx, ctx_actions, actions = _inputs(model, 3)
    model.reset_context(ref, ctx, ctx_actions)
    start = _state(model)
    assert any(value is not None for value in start.values())

    active = torch.tensor([True, False, True])
    frames = model.predict_active(actions, active, torch.Generator().manual_seed(5))
    assert frames.shape == (3, 8, model.height, model.width, 3) and frames.dtype == torch.uint8
    assert not frames[1].any()  # an ended env's frames: zeros, its context untouched

    pick = torch.tensor([0, 2])
    alone.reset_context(ref[pick], ctx[pick], ctx_actions[pick])
    expected = alone.predict(actions[pick], torch.Generator().manual_seed(5))
    assert torch.equal(frames[pick], expected)
    for name, before in start.items():
        if before is None:
            continue
        now = getattr(model, name)
        assert torch.equal(now[1], before[1])
        assert torch.equal(now[pick], getattr(alone, name))
    assert any(
        before is not None and not torch.equal(getattr(model, name)[pick], before[pick])
        for name, before in start.items()
    )  # the active envs' contexts rolled forward


@pytest.mark.parametrize("backend", ["opensora", "wan"])
def test_all_active_is_predict_and_none_active_costs_nothing(backend: str, monkeypatch) -> None:
    model = _model(backend)
    ref, ctx, ctx_actions, actions = _inputs(model, 2)
    model.reset_context(ref, ctx, ctx_actions)
    every = model.predict_active(actions, torch.ones(2, dtype=torch.bool), torch.Generator())
    model.reset_context(ref, ctx, ctx_actions)
    assert torch.equal(every, model.predict(actions, torch.Generator()))

    start = _state(model)
    monkeypatch.setattr(model, "predict", lambda *a, **k: pytest.fail("predict was called"))
    none = model.predict_active(actions, torch.zeros(2, dtype=torch.bool))
    assert none.shape == (2, 8, model.height, model.width, 3) and not none.any()
    for name, before in start.items():
        if before is not None:
            assert torch.equal(getattr(model, name), before)


@pytest.mark.parametrize("backend", ["opensora", "wan"])
def test_a_vae_batch_bounds_each_vae_call_and_gives_the_same_frames(backend, monkeypatch):
    """`world_model.vae_batch`: the envs go through the VAE a few at a time (the decode's
    working set grows with each), and the frames are those of one call for all (to a grey
    level: a convolution's float sums may round apart at another batch size)."""
    model = _model(backend)
    ref, ctx, ctx_actions, actions = _inputs(model, 3)
    sizes: list[int] = []  # rows of each VAE call: envs (Wan) or envs x frames (OpenSora)
    decode, encode = model.vae.decode, model.vae.encode
    monkeypatch.setattr(model.vae, "decode", lambda z, **k: sizes.append(len(z)) or decode(z, **k))
    monkeypatch.setattr(model.vae, "encode", lambda x, **k: sizes.append(len(x)) or encode(x, **k))
    model.reset_context(ref, ctx, ctx_actions)
    whole = model.predict(actions, torch.Generator().manual_seed(5))
    calls, sizes[:] = list(sizes), []
    model.vae_batch = 2
    model.reset_context(ref, ctx, ctx_actions)
    batched = model.predict(actions, torch.Generator().manual_seed(5))
    assert (batched.int() - whole.int()).abs().max() <= 1
    assert (batched != whole).float().mean() < 0.01
    assert len(sizes) == 2 * len(calls)  # 2 envs, then 1, in each call's place
    assert [a + b for a, b in zip(sizes[::2], sizes[1::2])] == calls
    assert all(a == 2 * b for a, b in zip(sizes[::2], sizes[1::2]))
