"""The latent reward model: a head on a world model's frozen VAE latents, scored and saved as
every wmrl reward model is, loading without the world model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from tests.helpers.world_models import tiny_opensora
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.rewards.latent import LatentRewModel, WorldModelEncoder, latent_reward_model
from wmrl_cli.rewards.loading import load_reward_model, save_reward_model

SIZES = {"task_embed_dim": 4, "hidden_dim": 8}


@pytest.fixture(scope="module")
def world_model():
    """A tiny OpenSora world model at 16x16 whose latents are scaled and shifted."""
    model = tiny_opensora(16)
    model.set_latent_scaling(0.5, 0.1)
    return model.eval()


def _judge(world_model, num_tasks: int = 3) -> LatentRewModel:
    torch.manual_seed(1)
    return latent_reward_model(WorldModelEncoder.of(world_model), 4, num_tasks, **SIZES)


def _frames(b=2, t=3, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (b, t, size, size, 3), dtype=torch.uint8, generator=g)


def test_it_reads_the_latents_the_world_model_encodes(world_model) -> None:
    judge = _judge(world_model)
    frames = _frames()
    with torch.no_grad():
        expected = world_model.encode_frames(frames).transpose(1, 2).flatten(0, 1)
    latents = judge.encode(judge.preprocess(frames.flatten(0, 1)))
    assert latents.shape == (6, 4, 4, 4)
    torch.testing.assert_close(latents, expected)
    assert judge.kind == "latent" and judge.threshold is None


def test_predict_shapes_range_and_task_ids(world_model) -> None:
    judge = _judge(world_model)
    scores = judge.predict(_frames(), [0, 2])
    assert scores.shape == (2, 3) and scores.dtype == torch.float32
    assert bool(((scores > 0) & (scores < 1)).all())
    # frames of another size are scored at the world model's 16x16
    assert judge.preprocess(_frames(1, 2, size=24)[0]).shape == (2, 3, 16, 16)
    assert judge.predict(_frames(1, 2, size=24), [1]).shape == (1, 2)
    with pytest.raises(WmrlError, match="task id"):
        judge.predict(_frames(), None)
    with pytest.raises(WmrlError, match=r"\[0, 3\)"):
        judge.predict(_frames(), [0, 3])


def test_the_encoder_is_frozen_and_only_the_head_learns(world_model) -> None:
    judge = _judge(world_model).train()
    assert judge.training and not judge.vae.training  # the encoder stays in eval mode
    assert not any(p.requires_grad for p in judge.vae.parameters())
    before = {k: v.clone() for k, v in judge.encoder_state_dict().items()}
    optimizer = torch.optim.AdamW([p for p in judge.parameters() if p.requires_grad], lr=0.1)
    images = judge.preprocess(_frames().flatten(0, 1))
    for _ in range(3):
        loss = judge.logits(images, torch.zeros(6, dtype=torch.long)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert all(p.grad is None for p in judge.vae.parameters())
    assert all(torch.equal(v, before[k]) for k, v in judge.encoder_state_dict().items())
    assert judge.head[0].weight.grad is not None
    world = {k: v for k, v in world_model.vae.state_dict().items() if k in before}
    assert world.keys() == before.keys() and all(torch.equal(world[k], before[k]) for k in world)


def test_directory_round_trip_without_the_world_model(world_model, tmp_path) -> None:
    judge = _judge(world_model)
    judge.config.threshold = 0.37
    save_reward_model(judge, tmp_path / "rm")
    assert sorted(p.name for p in (tmp_path / "rm").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    config = json.loads((tmp_path / "rm" / "config.json").read_text())
    assert config["kind"] == "latent" and config["vae"]["scaling_factor"] == 0.5
    keys = load_file(tmp_path / "rm" / "model.safetensors").keys()
    assert any(k.startswith("vae.encoder.") for k in keys)
    assert not any(k.startswith(("vae.decoder.", "vae.post_quant_conv.")) for k in keys)
    loaded = load_reward_model(tmp_path / "rm")
    assert type(loaded) is LatentRewModel and loaded.config == judge.config
    assert loaded.threshold == 0.37
    frames = _frames(seed=3)
    torch.testing.assert_close(loaded.predict(frames, [1, 2]), judge.predict(frames, [1, 2]))


def test_a_tampered_directory_is_one_error(world_model, tmp_path) -> None:
    save_reward_model(_judge(world_model), tmp_path / "rm")
    path = tmp_path / "rm" / "config.json"
    good = json.loads(path.read_text())
    for change, said in (
        ({"kind": "latent2"}, "unknown reward model kind 'latent2'"),
        ({"depth": 3}, "unknown reward-model config fields depth"),
        ({"width": 8}, "does not match the model"),
        ({"vae": {**good["vae"], "blocks": 2}}, "not an AutoencoderKL config"),
        ({"width": "wide"}, "not a latent reward model config"),
    ):
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(WmrlError, match=said):
            load_reward_model(tmp_path / "rm")


def test_a_world_model_without_a_per_frame_vae_is_refused() -> None:
    wan_like = SimpleNamespace(vae=nn.Conv3d(3, 4, 1), config=SimpleNamespace(vae={}))
    with pytest.raises(ConfigError, match="per-frame VAE"):
        WorldModelEncoder.of(wan_like)
