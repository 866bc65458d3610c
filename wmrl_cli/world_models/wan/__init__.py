"""The Wan world model (WoVR / RLinf `wan_wm`): model.py (the world model and its config),
blocks.py (the action-conditioned DiT, the VAE's configs), converter.py (published files)."""

from wmrl_cli.world_models.wan.blocks import (
    FRAMES_PER_LATENT,
    WanActionTransformer,
    WanTransformerConfig,
    tiny_vae_config,
    wan22_vae_config,
)
from wmrl_cli.world_models.wan.model import (
    RLINF_CONTEXT_NOISE_SIGMA,
    WanWorldModel,
    WanWorldModelConfig,
    validate_config,
)

__all__ = [
    "FRAMES_PER_LATENT",
    "RLINF_CONTEXT_NOISE_SIGMA",
    "WanActionTransformer",
    "WanTransformerConfig",
    "WanWorldModel",
    "WanWorldModelConfig",
    "tiny_vae_config",
    "validate_config",
    "wan22_vae_config",
]
