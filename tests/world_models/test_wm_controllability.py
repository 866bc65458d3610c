"""Controllability: the stronger action path's options, their metrics, the dot world."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers.toy_world import ShiftModel, toy_episode, toy_episodes, toy_replay
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.evaluation.world_model_eval import alternative_actions, open_loop_eval
from wmrl_cli.sims.dot_world import DotWorld, dot_centroid
from wmrl_cli.world_models.action_conditioning import chunk_action_features, guided
from wmrl_cli.world_models.interface import WorldModel, moving_pixels
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig
from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig


@pytest.mark.parametrize("gain, expected", [(1.0, 1.0), (0.0, 0.0), (0.5, 0.25)])
def test_response_ratio_measures_how_strongly_a_model_reacts(gain: float, expected: float) -> None:
    report = open_loop_eval(
        ShiftModel(gain), toy_episodes(), 8, alternatives=("other",), replay=toy_replay
    )
    assert report.response_ratio is not None
    # MSE scales with the square of the reaction (rounding to grey levels adds a little)
    assert report.response_ratio == pytest.approx([expected] * 8, abs=0.04)
    assert "response_ratio@8" in report.summary()


def test_every_alternative_gives_a_gap_for_a_model_that_follows_its_actions() -> None:
    report = open_loop_eval(
        ShiftModel(1.0), toy_episodes(), 8, alternatives=("other", "shuffled", "random")
    )
    for kind in ("other", "shuffled", "random"):  # (a shuffled chunk ends where it would)
        assert report.action_gap(4, kind) > 5.0, kind
    ignoring = open_loop_eval(
        ShiftModel(0.0), toy_episodes(), 8, alternatives=("other", "shuffled", "random")
    )
    assert all(ignoring.action_gap(4, kind) == 0.0 for kind in ("other", "shuffled", "random"))
    assert report.moving_psnr[7] > ignoring.moving_psnr[7]


def test_other_actions_come_from_the_same_task_when_there_is_one() -> None:
    a = [np.full((4, 2), v, dtype=np.float32) for v in (0.1, 0.2, 0.3, 0.4)]
    episodes = [toy_episode(a[0], 0, 0), toy_episode(a[1], 1, 1), toy_episode(a[2], 2, 0)]
    episodes.append(toy_episode(a[3], 3, 2))
    other = alternative_actions("other", episodes, 4, seed=0)
    assert other[0][0, 0] == pytest.approx(0.3)  # episode 2, same task, not episode 1
    assert other[2][0, 0] == pytest.approx(0.1)
    assert other[3][0, 0] == pytest.approx(0.1)  # task 2 has no other episode: the next one
    random = alternative_actions("random", episodes, 4, seed=0)
    assert all(r.min() >= 0.1 and r.max() <= 0.4 for r in random)


def test_dot_world_replays_its_episodes_and_finds_its_dot() -> None:
    world = DotWorld(distractors=True)
    episode = world.episode(seed=3, length=16, chunk_size=8)
    assert np.array_equal(world.replay([episode], episode.actions[None])[0], episode.frames)
    centres = world.positions(episode.sim_states[0], episode.actions)
    assert np.allclose(centres[8], episode.sim_states[8])
    for t in (0, 8, 16):
        assert np.linalg.norm(dot_centroid(episode.frames[t]) - centres[t]) < 0.2
    moved = world.replay_one(episode, -episode.actions)
    assert not np.array_equal(moved[8], episode.frames[8])


# -- the action-path options ------------------------------------------------------------------


def _opensora(**options) -> OpenSoraWorldModel:
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.depth, config.transformer.hidden_size = 1, 32
    config.transformer.num_heads, config.transformer.action_dim = 2, 2
    config.height = config.width = 32
    for key, value in options.items():
        target = config.transformer if hasattr(config.transformer, key) else config
        setattr(target, key, value)
    torch.manual_seed(0)
    model = OpenSoraWorldModel(config)
    # make the delta head live (it starts at zero: the copy baseline)
    torch.nn.init.normal_(model.transformer.final_layer.linear.weight, std=0.02)
    return model.eval()


def _sample(model: WorldModel, actions: torch.Tensor) -> torch.Tensor:
    frames = torch.randint(
        0,
        255,
        (2, 4, model.height, model.width, 3),
        dtype=torch.uint8,
        generator=torch.Generator().manual_seed(1),
    )
    model.reset_context(frames[:, 0], frames, torch.zeros(2, 4, model.action_dim))
    return model.predict(actions, torch.Generator().manual_seed(2))


def _denoised(model: OpenSoraWorldModel, actions: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(3)
    x = torch.randn(2, 4, 8, 8, 8)
    ctx = torch.randn(2, 4, 4, 8, 8)
    return model._denoiser_output(x, torch.full((2,), 0.7), ctx, actions)


def test_action_tokens_carry_the_actions_into_the_tokens() -> None:
    a, b = torch.zeros(2, 8, 2), torch.ones(2, 8, 2)
    for tokens in (False, True):
        model = _opensora(action_tokens=tokens)
        with torch.no_grad():  # cut the timestep-embedding path: only the tokens remain
            model.transformer.action_embedder.fc[-1].weight.zero_()
            model.transformer.action_embedder.fc[-1].bias.zero_()
            changed = not torch.allclose(_denoised(model, a), _denoised(model, b))
        assert changed == tokens
    features = chunk_action_features(torch.tensor([[[1.0], [2.0], [-1.0]]]))
    assert features[0].tolist() == [[1.0, 1.0], [2.0, 3.0], [-1.0, 2.0]]


def test_action_modulation_all_reaches_the_temporal_blocks_and_the_final_layer() -> None:
    a, b = torch.zeros(2, 8, 2), torch.ones(2, 8, 2)
    for mode, reaches in (("spatial", False), ("all", True)):
        t = _opensora(action_modulation=mode).transformer
        _, temporal_a, final_a = t._modulations(torch.full((2,), 500.0), a, 12, None, 15.0)
        _, temporal_b, final_b = t._modulations(torch.full((2,), 500.0), b, 12, None, 15.0)
        assert (not torch.allclose(temporal_a, temporal_b)) == reaches
        assert (not torch.allclose(final_a, final_b)) == reaches


@pytest.mark.parametrize("backend", ["opensora", "wan"])
def test_guidance_one_is_the_plain_sampler_and_other_scales_differ(backend: str) -> None:
    def build(**options) -> WorldModel:
        if backend == "opensora":
            return _opensora(**options)
        config = WanWorldModelConfig.tiny(action_dim=2)
        config.transformer.num_layers, config.transformer.ffn_dim = 1, 64
        config.height = config.width = 32
        config.transformer.null_action = options.pop("null_action", False)
        config.transformer.action_tokens = True
        for key, value in options.items():
            setattr(config, key, value)
        torch.manual_seed(0)
        model = WanWorldModel(config)
        torch.nn.init.normal_(model.transformer.proj_out.weight, std=0.02)
        return model.eval()

    actions = torch.rand(2, 8, 2, generator=torch.Generator().manual_seed(4)) * 2 - 1
    plain = build()
    guided_model = build(null_action=True, action_guidance=1.0)
    weights = {k: v for k, v in guided_model.state_dict().items() if "null_action" not in k}
    plain.load_state_dict(weights)
    with torch.no_grad():
        for name, p in guided_model.named_parameters():
            if "null_action" in name:
                p.normal_()  # a trained null action must not leak into the plain sampler
    assert torch.equal(_sample(plain, actions), _sample(guided_model, actions))
    guided_model.config.action_guidance = 3.0
    assert not torch.equal(_sample(plain, actions), _sample(guided_model, actions))
    v_cond, v_null = torch.tensor([2.0]), torch.tensor([1.0])
    assert guided(v_cond, v_null, 1.0).item() == 2.0 and guided(v_cond, v_null, 0.0).item() == 1.0
    assert guided(v_cond, v_null, 3.0).item() == 4.0


def test_dropped_actions_do_not_change_the_output() -> None:
    model = _opensora(action_tokens=True, action_modulation="all", null_action=True)
    x, ctx = torch.randn(2, 4, 8, 8, 8), torch.randn(2, 4, 4, 8, 8)
    drop = torch.tensor([True, False])
    sigma = torch.full((2,), 0.7)
    out_a = model._denoiser_output(x, sigma, ctx, torch.zeros(2, 8, 2), drop)
    out_b = model._denoiser_output(x, sigma, ctx, torch.ones(2, 8, 2), drop)
    assert torch.allclose(out_a[0], out_b[0])  # the dropped sample sees the null action
    assert not torch.allclose(out_a[1], out_b[1])


def test_dropout_and_guidance_need_a_null_action() -> None:
    with pytest.raises(ConfigError, match="null_action"):
        _opensora(action_dropout=0.1)
    with pytest.raises(ConfigError, match="action_modulation"):
        _opensora(action_modulation="everywhere")


def test_an_autoencoder_is_adopted_with_its_normalization() -> None:
    source, target = _opensora(), _opensora()
    with torch.no_grad():
        for p in source.vae.parameters():
            p.add_(0.1)
    source.set_latent_scaling(0.5, 0.25)
    target.adopt_autoencoder(source)
    assert all(torch.equal(a, b) for a, b in zip(source.vae.parameters(), target.vae.parameters()))
    assert target.config.vae["scaling_factor"] == 0.5
    wan = WanWorldModel(WanWorldModelConfig.tiny(action_dim=2))
    with pytest.raises(WmrlError, match="OpenSora autoencoder"):
        wan.adopt_autoencoder(source)


# -- the motion-weighted autoencoder loss -----------------------------------------------------


def test_moving_pixels_mark_the_dots_path_not_the_scene() -> None:
    world = DotWorld(distractors=True)
    episode = world.episode(3, length=8, chunk_size=8)
    moving = moving_pixels(torch.as_tensor(episode.frames[None]))[0].numpy()
    assert moving.shape == episode.frames.shape[:3]
    dot = episode.frames.min(axis=-1) > 200  # the white dot, frame by frame
    swept = dot.any(axis=0)
    assert (moving == swept[None]).mean() > 0.99  # the dot's path in every frame, nothing else
    still = torch.as_tensor(np.repeat(episode.frames[:1], 6, axis=0)[None])
    assert not moving_pixels(still).any()


@pytest.mark.parametrize("backend", ["opensora", "wan"])
def test_motion_weight_reweights_only_moving_clips(backend: str) -> None:
    torch.manual_seed(0)
    model = _opensora() if backend == "opensora" else WanWorldModel(WanWorldModelConfig.tiny(2))
    world = DotWorld(size=model.height)
    episode = world.episode(4, length=8, chunk_size=8)
    moving = torch.as_tensor(episode.frames[None, :5])
    still = torch.as_tensor(np.repeat(episode.frames[:1], 5, axis=0)[None])

    def loss(frames: torch.Tensor, weight: float) -> float:
        gen = torch.Generator().manual_seed(0)
        return model.autoencoder_loss(frames, generator=gen, motion_weight=weight).item()

    assert loss(still, 30.0) == pytest.approx(loss(still, 0.0), rel=1e-6)
    assert loss(moving, 30.0) != pytest.approx(loss(moving, 0.0), rel=1e-3)
