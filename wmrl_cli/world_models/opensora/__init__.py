"""The OpenSora world model (WMPO / RLinf `opensora_wm`): model.py (the world model and its
config), blocks.py (STDiT3 and its building blocks), converter.py (published files)."""

from wmrl_cli.world_models.opensora.blocks import STDiT3, STDiT3Config
from wmrl_cli.world_models.opensora.model import (
    OpenSoraWorldModel,
    OpenSoraWorldModelConfig,
    action_statistics,
    sdxl_vae_config,
    tiny_vae_config,
    validate_config,
)

__all__ = [
    "OpenSoraWorldModel",
    "OpenSoraWorldModelConfig",
    "STDiT3",
    "STDiT3Config",
    "action_statistics",
    "sdxl_vae_config",
    "tiny_vae_config",
    "validate_config",
]
