"""The tiny OpenSora world model: predict, latent context roll-forward, training loss, save/load."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig

B = 2
STATS = {"action": {"q01": [-1.0] * 6 + [0.0], "q99": [1.0] * 6 + [2.0], "mean": [0.0] * 7}}


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (conftest.py)


def _model(**overrides) -> OpenSoraWorldModel:
    torch.manual_seed(0)
    config = OpenSoraWorldModelConfig.tiny()
    # 2 layers and 2 sampling steps: the same code path as the tiny config, in test time.
    overrides.setdefault("num_inference_steps", 2)
    config = replace(config, transformer=replace(config.transformer, depth=2), **overrides)
    return OpenSoraWorldModel(config).eval()


def _randomize_output(model: OpenSoraWorldModel) -> None:
    # Fresh delta models output exactly zero; give the head weights so outputs depend on inputs.
    with torch.no_grad():
        model.transformer.final_layer.linear.weight.normal_(0, 0.05)


def _frames(*shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*shape, 64, 64, 3), dtype=torch.uint8, generator=gen)


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "reference_frames": _frames(B, seed=seed),
        "context_frames": _frames(B, 4, seed=seed + 1),
        "context_actions": torch.randn(B, 4, 7, generator=gen),
        "target_frames": _frames(B, 8, seed=seed + 2),
        "target_actions": torch.randn(B, 8, 7, generator=gen),
    }


def test_predict_shapes_determinism_and_latent_context_roll() -> None:
    model = _model()
    _randomize_output(model)
    ref, ctx, ctx_act = _frames(B), _frames(B, 4, seed=1), torch.randn(B, 4, 7)
    actions = torch.randn(B, 8, 7)

    model.reset_context(ref, ctx, ctx_act)
    start = model.context_latents.clone()
    assert start.shape == (B, 4, 4, 16, 16)
    first = model.predict(actions, generator=torch.Generator().manual_seed(7))
    assert first.shape == (B, 8, 64, 64, 3) and first.dtype == torch.uint8
    rolled = model.context_latents
    assert rolled.shape == start.shape and not torch.equal(rolled, start)
    # The context stays in latent space: the last 4 predicted latents, not re-encoded frames.
    expected = model.generate_latents(start, actions, torch.Generator().manual_seed(7))
    torch.testing.assert_close(rolled, expected[:, :, -4:])

    # Same context, same seed -> same frames; another seed or the rolled context differ.
    model.reset_context(ref, ctx, ctx_act)
    again = model.predict(actions, generator=torch.Generator().manual_seed(7))
    assert torch.equal(first, again)
    other_seed = model.generate(ref, ctx, ctx_act, actions, torch.Generator().manual_seed(8))
    assert not torch.equal(first, other_seed)
    second = model.predict(actions, generator=torch.Generator().manual_seed(7))
    assert not torch.equal(second, first)

    # A shorter chunk rolls in as many latents as it predicts.
    before = model.context_latents.clone()
    model.predict(actions[:, :2], generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(model.context_latents[:, :, :2], before[:, :, 2:])


def test_untrained_delta_model_starts_at_the_copy_last_frame_baseline() -> None:
    model = _model()  # delta prediction: zero output -> every target latent = last context latent
    ctx = _frames(B, 4, seed=1)
    model.reset_context(_frames(B), ctx, torch.randn(B, 4, 7))
    last_latent = model.context_latents[:, :, -1:]
    latents = model.generate_latents(
        model.context_latents, torch.randn(B, 8, 7), torch.Generator().manual_seed(3)
    )
    torch.testing.assert_close(latents, last_latent.expand_as(latents))
    frames = model.predict(torch.randn(B, 8, 7), generator=torch.Generator().manual_seed(3))
    last = model.decode_latents(last_latent)
    # Equal up to float rounding in the decoder (a pixel value may differ by one).
    assert (frames.int() - last.int()).abs().max() <= 1


def test_training_loss_is_finite_and_reaches_the_action_encoder() -> None:
    model = _model()
    _randomize_output(model)
    model.train()
    batch = _batch()
    loss = model(batch, generator=torch.Generator().manual_seed(0))
    assert loss.ndim == 0 and torch.isfinite(loss)
    loss.backward()
    grad = model.transformer.action_embedder.fc[0].weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    # Seeded noise -> the same loss; cached latents give the same loss as frames.
    latents = model.encode_window(batch)
    assert latents.shape == (B, 4, 12, 16, 16)
    with torch.no_grad():
        from_frames = model(batch, generator=torch.Generator().manual_seed(1))
        from_latents = model(
            {**batch, "latents": latents}, generator=torch.Generator().manual_seed(1)
        )
    torch.testing.assert_close(from_frames, from_latents)


def test_velocity_mode_loss_is_finite() -> None:
    model = _model(delta_prediction=False)
    loss = model(_batch(), generator=torch.Generator().manual_seed(0))
    loss.backward()
    assert torch.isfinite(loss) and model.transformer.final_layer.linear.weight.grad is not None


def test_the_loss_only_sees_the_target_frames_and_their_actions() -> None:
    model = _model()
    _randomize_output(model)
    batch = _batch()
    with torch.no_grad():
        base = model(batch, generator=torch.Generator().manual_seed(0))
        other_ref = {**batch, "reference_frames": _frames(B, seed=9)}
        other_ctx_actions = {**batch, "context_actions": torch.randn(B, 4, 7)}
        other_actions = {**batch, "target_actions": torch.randn(B, 8, 7)}
        for unused in (other_ref, other_ctx_actions):
            assert model(unused, generator=torch.Generator().manual_seed(0)) == base
        assert model(other_actions, generator=torch.Generator().manual_seed(0)) != base


def test_actions_are_normalized_with_q01_q99() -> None:
    model = OpenSoraWorldModel(replace(OpenSoraWorldModelConfig.tiny()), dataset_statistics=STATS)
    actions = torch.tensor([[[-1.0, 0.0, 1.0, 0.5, -0.5, 0.0, 2.0]]])
    expected = torch.tensor([[[-1.0, 0.0, 1.0, 0.5, -0.5, 0.0, 1.0]]])
    torch.testing.assert_close(model.normalize_actions(actions), expected)
    nested = {"libero_spatial_no_noops": STATS}
    model.set_action_statistics(nested)
    torch.testing.assert_close(model.normalize_actions(actions), expected)
    plain = _model()
    torch.testing.assert_close(plain.normalize_actions(actions), actions)
    with pytest.raises(WmrlError, match="no 'action'"):
        plain.set_action_statistics({"a": STATS, "b": STATS})


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    model = _model(action_q01=STATS["action"]["q01"], action_q99=STATS["action"]["q99"])
    _randomize_output(model)
    model.set_latent_scaling(0.5, 0.1)
    out_dir = model.save_pretrained(tmp_path / "wm")
    assert sorted(p.name for p in out_dir.iterdir()) == ["config.json", "model.safetensors"]
    model.save_pretrained(tmp_path / "wm")  # overwrite in place, atomically
    assert [p.name for p in tmp_path.iterdir()] == ["wm"]

    loaded = OpenSoraWorldModel.from_pretrained(out_dir)
    assert loaded.config == model.config
    for key, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    ctx, acts = _frames(B, 4, seed=1), torch.randn(B, 8, 7)
    with torch.no_grad():
        torch.testing.assert_close(model.encode_frames(ctx), loaded.encode_frames(ctx))
        context = model.encode_frames(ctx)
    a = model.generate_latents(context, acts, torch.Generator().manual_seed(0))
    b = loaded.generate_latents(context, acts, torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    with pytest.raises(WmrlError, match="not an OpenSora world-model directory"):
        OpenSoraWorldModel.from_pretrained(tmp_path)


def test_bad_input_gives_one_line_errors() -> None:
    model = _model()
    with pytest.raises(WmrlError, match="no context"):
        model.predict(torch.zeros(B, 8, 7))
    with pytest.raises(WmrlError, match="uint8"):
        model.reset_context(_frames(B).float(), _frames(B, 4), torch.zeros(B, 4, 7))
    with pytest.raises(WmrlError, match="4 context frames"):
        model.reset_context(_frames(B), _frames(B, 3), torch.zeros(B, 3, 7))
    model.reset_context(_frames(B), _frames(B, 4), torch.zeros(B, 4, 7))
    with pytest.raises(WmrlError, match=r"actions must have shape \[2,T,7\]"):
        model.predict(torch.zeros(B, 8, 6))
    with pytest.raises(WmrlError, match="context latents"):
        model.reset_context_latents(torch.zeros(B, 4, 3, 16, 16))
    with pytest.raises(WmrlError) as excinfo:
        model({**_batch(), "latents": torch.zeros(B, 4, 11, 16, 16)})
    assert "\n" not in str(excinfo.value)
