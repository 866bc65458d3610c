"""World models in the publishers' directory layouts (RLinf's RLinf-Wan-LIBERO-* and
RLinf-OpenSora-LIBERO-* Hub repos; WMPO's checkpoints; docs/assets.md).

    rlinf-wan       RLinf-Wan-LIBERO-*: `model-00001.safetensors` (the DiffSynth-named DiT, or
                    several shards with a `*.safetensors.index.json`) + `Wan2.2_VAE.pth`
    rlinf-opensora  RLinf-OpenSora-LIBERO-*: `config.json`, `model-0000N.safetensors` +
                    `model.safetensors.index.json`, `vae/` (a diffusers AutoencoderKL folder),
                    `dataset_statistics.json`

A layout is recognized by its files. Published files carry weights only: every size comes from
the weights (the Wan VAE's too, see `infer_wan_vae_config`), the settings no file records
(frame size, context and chunk length) from the caller, the rest from the backend's full
config, which holds RLinf's settings (sampling steps, flow shift, velocity output).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.interface import WorldModel

RLINF_WAN = "rlinf-wan"
RLINF_OPENSORA = "rlinf-opensora"
WAN_VAE_FILE = "Wan2.2_VAE.pth"
WAN_Z_DIM = 48  # the Wan2.2 VAE: its published latent statistics have 48 channels

_DOWN_RESNET = re.compile(r"^encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.conv1\.weight$")


def published_layout(path: str | Path) -> str | None:
    """`rlinf-wan`, `rlinf-opensora`, or None when `path` holds neither."""
    path = Path(path)
    if not path.is_dir():
        return None
    if (path / WAN_VAE_FILE).is_file() and any(path.glob("*.safetensors")):
        return RLINF_WAN
    if (path / "vae" / "config.json").is_file() and any(path.glob("*.safetensors")):
        return RLINF_OPENSORA
    return None


def weights_checkpoint(directory: Path) -> Path:
    """The index when the DiT (or STDiT3) is sharded, else the one safetensors file beside the
    VAE."""
    indexes = sorted(directory.glob("*.safetensors.index.json"))
    if indexes:
        return indexes[0]
    files = sorted(directory.glob("*.safetensors"))
    if len(files) != 1:
        names = ", ".join(f.name for f in files)
        raise WmrlError(
            f"{directory}: expected one DiT *.safetensors file or an index, got {names}"
        )
    return files[0]


def infer_wan_vae_config(state_dict: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    """`AutoencoderKLWan` kwargs from a Wan2.2-layout VAE state dict in diffusers names.

    Gives exactly `wan22_vae_config()` for the published Wan2.2 VAE. The latent statistics are
    not in the weights: the published Wan2.2 ones for a 48-channel latent, identity otherwise.
    """
    from wmrl_cli.world_models.wan.blocks import wan22_vae_config

    try:
        conv_in = state_dict["encoder.conv_in.weight"]
        conv_out = state_dict["decoder.conv_out.weight"]
        z_dim = int(state_dict["post_quant_conv.weight"].shape[0])
    except KeyError as exc:
        raise WmrlError(f"cannot infer the Wan VAE sizes: no {exc.args[0]}") from None
    stages: dict[int, int] = {}
    for key in state_dict:
        if match := _DOWN_RESNET.match(key):
            stage, index = int(match.group(1)), int(match.group(2))
            stages[stage] = max(stages.get(stage, 0), index + 1)
    if not stages or sorted(stages) != list(range(len(stages))):
        raise WmrlError("cannot infer the Wan VAE sizes: not the Wan2.2 (residual) layout")
    base_dim = int(conv_in.shape[0])
    dim_mult = [
        int(state_dict[f"encoder.down_blocks.{i}.resnets.0.conv1.weight"].shape[0]) // base_dim
        for i in range(len(stages))
    ]
    patch = round((int(conv_in.shape[1]) // 3) ** 0.5)
    temporal = [
        f"encoder.down_blocks.{i}.downsampler.time_conv.weight" in state_dict
        for i in range(len(stages) - 1)
    ]
    config = wan22_vae_config()
    config.update(
        base_dim=base_dim,
        decoder_base_dim=int(conv_out.shape[1]) // dim_mult[0],
        z_dim=z_dim,
        dim_mult=dim_mult,
        num_res_blocks=stages[0],
        temperal_downsample=temporal,
        in_channels=int(conv_in.shape[1]),
        out_channels=int(conv_out.shape[0]),
        patch_size=patch,
        scale_factor_spatial=patch * 2 ** (len(dim_mult) - 1),
    )
    if z_dim != WAN_Z_DIM:
        config.update(latents_mean=[0.0] * z_dim, latents_std=[1.0] * z_dim)
    return config


def load_published_world_model(
    directory: str | Path,
    height: int = 256,
    width: int = 256,
    context_frames: int = 4,
    chunk_size: int = 8,
) -> WorldModel:
    """The world model in a published directory (see the module doc), in float32 on the CPU.

    height, width: the frames it predicts, those of the reset set (RLinf: 256x256).
    """
    from wmrl_cli.world_models.wan.converter import (
        infer_transformer_config,
        read_dit_state_dict,
        read_vae_state_dict,
    )
    from wmrl_cli.world_models.wan.model import WanWorldModel, WanWorldModelConfig

    directory = Path(directory)
    layout = published_layout(directory)
    sizes = dict(
        height=height,
        width=width,
        num_context_frames=context_frames,
        num_target_frames=chunk_size,
    )
    if layout == RLINF_OPENSORA:
        from wmrl_cli.world_models.opensora.converter import load_rlinf_opensora_world_model
        from wmrl_cli.world_models.opensora.model import OpenSoraWorldModelConfig

        base = replace(OpenSoraWorldModelConfig.full(), **sizes)
        model: WorldModel = load_rlinf_opensora_world_model(directory, config=base)
    elif layout == RLINF_WAN:
        # The DiT and VAE are read once each; their sizes come from the tensors.
        dit_state = read_dit_state_dict(weights_checkpoint(directory))
        vae_state = read_vae_state_dict(directory / WAN_VAE_FILE)
        config = replace(
            WanWorldModelConfig.full(),
            transformer=infer_transformer_config(dit_state),
            vae=infer_wan_vae_config(vae_state),
            delta_prediction=False,
            **sizes,
        )
        state = {f"transformer.{k}": v for k, v in dit_state.items()}
        state.update({f"vae.{k}": v for k, v in vae_state.items()})
        model = WanWorldModel.from_state_dict(config, state, what=f"Wan world model {directory}")
    else:
        raise WmrlError(
            f"{directory}: not a published world model (expected {WAN_VAE_FILE} + the DiT's "
            "*.safetensors, or config.json + *.safetensors + vae/)"
        )
    # Published weights may be stored in bf16 and the VAE in fp32: one dtype for the forward.
    return model.float()
