"""A tiny untrained OpenSora world model (per-frame 2D VAE, 4x downsampling) at a given frame
size, for the tests of what reads its latents (the latent reward model)."""

from __future__ import annotations

import torch

from wmrl_cli.config import resolve_config
from wmrl_cli.world_models.factory import build_world_model


def tiny_opensora(size: int = 16, seed: int = 0):
    """OpenSora's tiny config at size x size frames, 4-dim actions, weights from `seed`."""
    cfg = resolve_config(overrides=["world_model.backend=opensora", f"simulator.image_size={size}"])
    torch.manual_seed(seed)
    return build_world_model(cfg, action_dim=4)
