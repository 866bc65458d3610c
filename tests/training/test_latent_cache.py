"""Training-window latents: gathering per-frame latents equals encoding each window."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wmrl_cli.data.windows import WindowSet
from wmrl_cli.sims.dot_world import DotWorld
from wmrl_cli.training.latent_cache import WindowLatents
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig
from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig


def _windows(size: int, context: int, stride: int = 3) -> WindowSet:
    world = DotWorld(size=size)
    episodes = [world.episode(seed, length=24, chunk_size=4) for seed in (1, 2)]
    starts = [(e, s) for e in range(2) for s in range(0, 24 - 4 + 1, stride)]
    return WindowSet(episodes, np.asarray(starts), context=context, chunk=4)


def test_frame_steps_are_the_frames_a_window_cuts() -> None:
    windows = _windows(32, context=3)
    idx = np.arange(len(windows))
    batch = windows.batch(idx)
    episode, steps = windows.frame_steps(idx)
    frames = np.stack([windows.episodes[e].frames[s] for e, s in zip(episode, steps)])
    expected = np.concatenate([batch["context_frames"], batch["target_frames"]], axis=1)
    np.testing.assert_array_equal(frames, expected)


def _tiny(model_class, config_class, size: int):  # noqa: ANN001, ANN202
    config = config_class.tiny()
    config.height = config.width = size
    torch.manual_seed(0)
    return model_class(config).eval()


@pytest.mark.parametrize("frame_wise", [True, False])
def test_window_latents_match_encoding_each_window(frame_wise: bool) -> None:
    model = _tiny(OpenSoraWorldModel, OpenSoraWorldModelConfig, 32)
    model.frame_wise_latents = frame_wise  # the shared path must equal the per-window one
    windows = _windows(32, context=model.num_context_frames)
    latents = WindowLatents.encode(model, windows)
    assert (latents.frame_latents is not None) == frame_wise
    idx = np.array([0, 5, len(windows) - 1, 2])
    with torch.no_grad():
        direct = model.encode_window(windows.batch(idx))
    torch.testing.assert_close(latents[idx], direct, rtol=1e-4, atol=1e-4)
    reloaded = WindowLatents.from_state_dict(windows, latents.state_dict())
    torch.testing.assert_close(reloaded[idx], latents[idx], rtol=0, atol=0)


def test_causal_vae_encodes_each_window() -> None:
    model = _tiny(WanWorldModel, WanWorldModelConfig, 32)
    assert not model.frame_wise_latents
    windows = _windows(32, context=model.num_context_frames, stride=8)
    latents = WindowLatents.encode(model, windows)
    assert latents.window_latents is not None and len(latents.window_latents) == len(windows)
