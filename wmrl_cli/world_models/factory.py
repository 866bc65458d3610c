"""Building and loading world models (as LeRobot's `policies/factory.py` for policies).

    build_world_model       a fresh model of the run's backend and size
    apply_objective         the run's training objective and sampling settings on a config
    saved_world_model       (model directory, backend) of a wmrl run or model directory
    load_world_model        a saved wmrl model of either backend
    load_init_world_model   what a run starts from: a saved wmrl model or a published folder

The loaders take a `device` and a `dtype` (None: where and as the weights load today, float32
on the CPU).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.interface import CONFIG_NAME, WorldModel

MODEL_DIR = "world_model"  # what `wmrl train-wm` writes into its run directory


def world_model_dtype_name(setting: str, device: str) -> str:
    """`world_model.dtype` resolved: auto is bf16 on CUDA, float32 elsewhere."""
    if setting == "auto":
        return "bf16" if str(device).startswith("cuda") else "float32"
    return "bf16" if setting == "bf16" else "float32"


def build_world_model(cfg: RunConfig, action_dim: int) -> WorldModel:
    """A fresh world model of the configured backend and size at the simulator's image size."""
    wm, size = cfg.world_model, cfg.simulator.image_size
    if wm.backend == "wan":
        from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig

        config = (
            WanWorldModelConfig.full()
            if wm.size == "full"
            else WanWorldModelConfig.tiny(action_dim=action_dim)
        )
        config.transformer.action_dim = action_dim
        model_cls = WanWorldModel
    else:
        from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig

        config = (
            OpenSoraWorldModelConfig.full()
            if wm.size == "full"
            else OpenSoraWorldModelConfig.tiny()
        )
        config.transformer.action_dim = action_dim
        model_cls = OpenSoraWorldModel
    config.height = config.width = size
    config.num_context_frames = wm.context_frames
    config.num_target_frames = cfg.simulator.chunk_size
    config.carry_detail = wm.carry_detail
    if wm.num_inference_steps is not None:
        config.num_inference_steps = wm.num_inference_steps
    config.transformer.action_tokens = wm.action_tokens
    config.transformer.null_action = wm.action_dropout > 0 or wm.action_guidance not in (None, 1.0)
    if wm.action_modulation == "all" and wm.backend == "opensora":
        config.transformer.action_modulation = "all"
    apply_objective(config, cfg)
    return model_cls(config)


def apply_objective(config: Any, cfg: RunConfig) -> None:
    """The run's training objective and sampling settings on a model config (a fresh model's
    or one trained before, e.g. `--init`): loss weighting, noise levels, action dropout and
    guidance."""
    wm = cfg.world_model
    config.motion_loss_weight = wm.motion_loss_weight
    if wm.train_shift is not None:
        config.train_shift = wm.train_shift
    guided = wm.action_guidance not in (None, 1.0)
    if (wm.action_dropout > 0 or guided) and not config.transformer.null_action:
        raise WmrlError(
            "world_model.action_dropout / action_guidance need a model built with a null action; "
            "this one was not (train it from scratch with the option set)"
        )
    config.action_dropout = wm.action_dropout
    if wm.action_guidance is not None:
        config.action_guidance = wm.action_guidance
    # trained on, a distilled model's conditioned pass leaves the teacher's guided velocity
    # (distillation itself marks its student again: training/guidance_distillation.py)
    if getattr(config, "guidance_distilled", None) is not None:
        config.guidance_distilled = None


def saved_world_model(path: str | Path) -> tuple[Path, str]:
    """(the model directory, its backend) of a wmrl run or model directory, from config.json."""
    path = Path(path)
    directory = path / MODEL_DIR if (path / MODEL_DIR / CONFIG_NAME).is_file() else path
    if not (directory / CONFIG_NAME).is_file():
        raise WmrlError(f"{path}: no world model here (expected config.json or {MODEL_DIR}/)")
    try:
        config = json.loads((directory / CONFIG_NAME).read_text())
    except json.JSONDecodeError as exc:
        raise WmrlError(f"{directory / CONFIG_NAME} is not valid JSON ({exc.msg})") from None
    opensora = "depth" in (config.get("transformer") or {}) if isinstance(config, dict) else False
    return directory, "opensora" if opensora else "wan"


def load_world_model(
    path: str | Path, device: str | torch.device | None = None, dtype: torch.dtype | None = None
) -> WorldModel:
    """A saved world model directory of either backend (config.json names the backend)."""
    directory, backend = saved_world_model(path)
    if backend == "opensora":
        from wmrl_cli.world_models.opensora import OpenSoraWorldModel as model_cls
    else:
        from wmrl_cli.world_models.wan import WanWorldModel as model_cls
    return model_cls.from_pretrained(directory, device=device, dtype=dtype)


def load_init_world_model(
    path: str | Path,
    height: int,
    width: int,
    cfg: RunConfig,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
) -> WorldModel:
    """The world model a run starts from (`--init`): a wmrl run or model directory as saved, or
    a published folder (RLinf's Wan or OpenSora, world_models/published.py) predicting frames of
    the episodes' size with the run's context and chunk lengths, as train-policy loads it."""
    from safetensors import SafetensorError

    from wmrl_cli.world_models.published import load_published_world_model, published_layout

    if published_layout(path) is None:
        return load_world_model(path, device=device, dtype=dtype)
    try:
        model = load_published_world_model(
            path, height, width, cfg.world_model.context_frames, cfg.simulator.chunk_size
        )
    except SafetensorError as exc:
        raise WmrlError(f"{path}: the world model's weights are unreadable ({exc})") from None
    return model.place(device, dtype)
