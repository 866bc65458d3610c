"""Loading a world model from wherever it is: a wmrl run or model directory, or a publisher's
layout (RLinf's Wan or OpenSora folder, told apart by its files), which backend a folder holds,
the model as imagination runs it (RL, `eval --world-model`, co-evolve's check, imagined
rollouts), and a fine-tuned model written back in the published layout it started from
(`train-wm --export-rlinf`)."""

from __future__ import annotations

from pathlib import Path

import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.runtime import resolve_precision
from wmrl_cli.world_models.action_conditioning import sampler_guidance
from wmrl_cli.world_models.factory import (
    load_init_world_model,
    load_world_model,
    saved_world_model,
    world_model_dtype_name,
)
from wmrl_cli.world_models.interface import WorldModel
from wmrl_cli.world_models.published import published_layout

# -- loading -----------------------------------------------------------------------------------


def world_model_backend(path: Path) -> str:
    """'wan' or 'opensora': the backend of the world model in `path`, from its files alone."""
    layout = published_layout(path)
    if layout is not None:
        return layout.removeprefix("rlinf-")
    try:
        return saved_world_model(path)[1]
    except WmrlError:
        raise WmrlError(
            f"{path} is not a world model: expected a wmrl run or model directory (config.json), "
            "RLinf's Wan folder (Wan2.2_VAE.pth + the DiT's *.safetensors) or its OpenSora "
            "folder (config.json + *.safetensors + vae/)"
        ) from None


def load_any_world_model(
    path: Path,
    height: int,
    width: int,
    cfg: RunConfig,
    device: str,
    dtype: torch.dtype | None = None,
) -> WorldModel:
    """A wmrl world model (run or model directory) or a published one (RLinf's Wan or OpenSora
    directory, told apart by its files); frames of the reset set's size for published ones. A
    damaged weights file is a one-line error. The same loader as `train-wm --init`'s; `dtype`
    None keeps the weights float32."""
    return load_init_world_model(path, height, width, cfg, device=device, dtype=dtype)


def imagining_dtype(cfg: RunConfig, device: str) -> torch.dtype | None:
    """`world_model.dtype` on `device`: bf16 (auto on a GPU, as RLinf's envs load their world
    models), else None (float32, as loaded)."""
    return (
        torch.bfloat16 if world_model_dtype_name(cfg.world_model.dtype, device) == "bf16" else None
    )


def load_imagining_world_model(
    path: Path, height: int, width: int, cfg: RunConfig, device: str
) -> WorldModel:
    """`load_any_world_model` in eval mode, its weights (the VAE's too) in `world_model.dtype`
    (auto: bf16 on a GPU), its forward passes in `cfg.precision`, with the run's sampler settings
    (steps, action guidance): the world model as imagination runs it (RL, `eval --world-model`,
    co-evolve's check, imagined rollouts), so that a threshold calibrated by the check is
    calibrated on the frames RL will see (the RL presets sample in 2 steps, models save 10)."""
    dtype = imagining_dtype(cfg, device)
    world_model = load_any_world_model(path, height, width, cfg, device, dtype).eval()
    world_model.autocast_dtype = resolve_precision(cfg.precision, device)
    world_model.vae_batch = cfg.world_model.vae_batch
    if cfg.world_model.num_inference_steps is not None:
        world_model.config.num_inference_steps = cfg.world_model.num_inference_steps
    distilled = getattr(world_model.config, "guidance_distilled", None)
    guidance = sampler_guidance(cfg.world_model.action_guidance, distilled)
    if guidance is not None:
        transformer = getattr(world_model.config, "transformer", None)
        if guidance != 1.0 and not getattr(transformer, "null_action", False):
            raise WmrlError(
                f"world_model.action_guidance={guidance} needs a world model trained with a "
                "null action (world_model.action_dropout > 0); this one has none"
            )
        world_model.config.action_guidance = guidance
    if cfg.world_model.bf16_timesteps:
        if not hasattr(world_model.config, "bf16_timesteps"):
            raise WmrlError("world_model.bf16_timesteps applies to Wan world models only")
        world_model.config.bf16_timesteps = True
    return world_model


# -- the way back to the published layout (`train-wm --export-rlinf`) -------------------------


def check_world_model_export(source: Path, target: Path | None) -> None:
    """Before anything runs: `--export-rlinf` needs a published source and a new folder."""
    if target is None:
        return
    if published_layout(source) is None:
        raise ConfigError(
            f"--export-rlinf writes the published layout the model was loaded from, but --init "
            f"{source} is not in one: start from RLinf's Wan or OpenSora folder (or its asset)"
        )
    if target.exists():
        raise ConfigError(f"--export-rlinf {target} exists: the export writes a new folder")


def export_world_model(model_dir: Path, source: Path, target: Path) -> Path:
    """The saved (fine-tuned) world model in `model_dir`, written in `source`'s layout."""
    from wmrl_cli.world_models.published_export import export_published_world_model

    return export_published_world_model(load_world_model(model_dir), source, target)
