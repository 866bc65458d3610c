"""The OpenSora world model (WMPO / RLinf `opensora_wm`): 2D SDXL-style VAE + action STDiT3.

Read top to bottom: the VAE's configs, the world model's config, then the world model that wraps
VAE + STDiT3 (blocks.py) into the `WorldModel` interface (predict, training loss, save/load); the
flow-matching loss and sampler they share with Wan are in ../base.py.

Window layout (WMPO / RLinf): K = 4 context frames + C = 8 generated frames, one latent frame per
video frame (the VAE is 2D, applied per frame), frame mask [0]*K + [1]*C. The episode's reference
frame is not an input of STDiT3: `reset_context` accepts it for the interface and ignores it.
Context actions are not inputs either: the model conditions on the current chunk's actions only
(RLinf's OpenSora backend carries no action history).

Rectified flow (`flow_matching.py` convention: x_sigma = (1-sigma) x0 + sigma eps, v = eps - x0).
STDiT3's raw output is Open-Sora's velocity x0 - eps, so `delta_prediction=False`
(RLinf-compatible) negates it. With `delta_prediction=True` the output is the clean target as an
offset from the last context latent (x0_hat = z_ctx + out); the final layer starts at zero, so an
untrained model reproduces the last context frame: it starts at the copy-the-last-frame baseline
(MEASUREMENTS.md) instead of at noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
from diffusers import AutoencoderKL
from torch import nn

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.world_models import flow_matching as fm
from wmrl_cli.world_models.action_conditioning import validate_action_options
from wmrl_cli.world_models.base import FlowWorldModel, FlowWorldModelConfig
from wmrl_cli.world_models.interface import (
    TensorLike,
    WorldModelBatch,
    check_actions,
    check_frames,
)
from wmrl_cli.world_models.opensora.blocks import WMPO_CONTEXT_TIMESTEP, STDiT3, STDiT3Config

SDXL_SCALING_FACTOR = 0.13025


# ----------------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------------


def sdxl_vae_config() -> dict[str, Any]:
    """`AutoencoderKL` kwargs of the SDXL VAE (8x spatial, 4 latent channels, scaling 0.13025)."""
    return {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 4,
        "up_block_types": ["UpDecoderBlock2D"] * 4,
        "block_out_channels": [128, 256, 512, 512],
        "layers_per_block": 2,
        "act_fn": "silu",
        "latent_channels": 4,
        "norm_num_groups": 32,
        "sample_size": 1024,
        "scaling_factor": SDXL_SCALING_FACTOR,
        "force_upcast": True,
    }


def tiny_vae_config() -> dict[str, Any]:
    """A 4x-downsampling `AutoencoderKL` (64x64 frames -> 4x16x16 latents) that trains on a CPU.

    scaling_factor 1.0 until measured on data (`OpenSoraWorldModel.set_latent_scaling`).
    """
    return {
        "in_channels": 3,
        "out_channels": 3,
        "down_block_types": ["DownEncoderBlock2D"] * 3,
        "up_block_types": ["UpDecoderBlock2D"] * 3,
        "block_out_channels": [16, 32, 64],
        "layers_per_block": 1,
        "act_fn": "silu",
        "latent_channels": 4,
        "norm_num_groups": 8,
        "sample_size": 64,
        "scaling_factor": 1.0,
        "force_upcast": False,
    }


@dataclass
class OpenSoraWorldModelConfig(FlowWorldModelConfig):
    """Everything needed to build an `OpenSoraWorldModel`; saved as config.json beside the weights.

    flow_shift / train_shift: resolution shift of the sampling grid and of the logit-normal
    training noise levels (WMPO's fork: ratio = 2 * sqrt(H*W) / 512, i.e. 1.0 at 256x256).
    context_timestep: the timestep (0..1000) context frames are conditioned on, and noised at
    during training. action_q01 / action_q99: per-dimension action statistics for the [-1, 1]
    normalization (None: actions are used as given). num_target_frames: the chunk length of
    training windows (any chunk length runs: the action embeddings follow the frames). The keys
    shared with Wan: `base.FlowWorldModelConfig`.
    """

    transformer_class: ClassVar[type] = STDiT3Config
    title: ClassVar[str] = "OpenSora"

    transformer: STDiT3Config = field(default_factory=STDiT3Config)
    vae: dict[str, Any] = field(default_factory=sdxl_vae_config)
    context_timestep: float = WMPO_CONTEXT_TIMESTEP
    delta_prediction: bool = False
    carry_detail: bool = False  # off for the published models
    loss_min_sigma: float = 1.0
    motion_loss_weight: float = 0.0
    action_q01: list[float] | None = None
    action_q99: list[float] | None = None
    action_dropout: float = 0.0
    action_guidance: float = 1.0
    guidance_distilled: float | None = None  # base.GuidanceTeacher

    @classmethod
    def full(cls) -> OpenSoraWorldModelConfig:
        """STDiT3-XL/2 + SDXL VAE at 256x256: the size of WMPO's / RLinf's published model."""
        return cls()

    @classmethod
    def tiny(cls) -> OpenSoraWorldModelConfig:
        """~1.8M-parameter STDiT3 + ~0.9M-parameter VAE at 64x64: trains on a 2-core CPU."""
        transformer = STDiT3Config(depth=4, hidden_size=128, num_heads=4)
        return cls(
            transformer=transformer,
            vae=tiny_vae_config(),
            height=64,
            width=64,
            delta_prediction=True,
        )


def vae_downsample_factor(vae_config: Mapping[str, Any]) -> int:
    """`AutoencoderKL` halves the resolution once per block but the last."""
    return 2 ** (len(vae_config.get("block_out_channels", [64])) - 1)


def action_statistics(
    stats: Mapping[str, Any], unnorm_key: str | None = None
) -> tuple[list[float], list[float]]:
    """(q01, q99) from a dataset_statistics.json dict: top-level {"action": {...}} (RLinf) or
    nested under an unnorm key (OpenVLA SFT checkpoints; the only key is taken when none given)."""
    if "action" not in stats:
        keys = [k for k, v in stats.items() if isinstance(v, Mapping) and "action" in v]
        if unnorm_key is None and len(keys) == 1:
            unnorm_key = keys[0]
        if unnorm_key is None or unnorm_key not in keys:
            raise WmrlError(
                f"dataset statistics have no 'action' entry; pass one of {keys} as unnorm_key"
            )
        stats = stats[unnorm_key]
    action = stats["action"]
    if not isinstance(action, Mapping) or "q01" not in action or "q99" not in action:
        raise WmrlError("dataset statistics 'action' entry needs 'q01' and 'q99'")
    return [float(v) for v in action["q01"]], [float(v) for v in action["q99"]]


def validate_config(config: OpenSoraWorldModelConfig) -> None:
    """Reject sizes the OpenSora code path cannot run, naming the key."""
    t, v = config.transformer, config.vae
    if t.hidden_size % t.num_heads or t.head_dim % 2:
        raise ConfigError("transformer.hidden_size / num_heads must be an even head size")
    if t.hidden_size % 4:
        raise ConfigError("transformer.hidden_size must be a multiple of 4 (2D sin-cos)")
    if t.patch_size[0] != 1:
        raise ConfigError("transformer.patch_size[0] must be 1 (conditioning is per frame)")
    if v.get("latent_channels", 4) != t.in_channels:
        raise ConfigError(
            f"transformer.in_channels must equal vae.latent_channels ({v.get('latent_channels')})"
        )
    cell_h = vae_downsample_factor(v) * t.patch_size[1]
    cell_w = vae_downsample_factor(v) * t.patch_size[2]
    if config.height % cell_h or config.width % cell_w:
        raise ConfigError(f"height/width must be multiples of {cell_h}x{cell_w}")
    for key in ("num_context_frames", "num_target_frames", "num_inference_steps"):
        if getattr(config, key) < 1:
            raise ConfigError(f"{key} must be >= 1")
    if t.num_none_actions not in (1, config.num_context_frames):
        raise ConfigError(
            f"transformer.num_none_actions must be 1 or num_context_frames "
            f"({config.num_context_frames})"
        )
    if t.action_modulation not in ("spatial", "all"):
        raise ConfigError("transformer.action_modulation must be 'spatial' or 'all'")
    validate_action_options(
        config.action_dropout, config.action_guidance, t.null_action, config.guidance_distilled
    )
    if not 0.0 <= config.context_timestep < fm.NUM_TRAIN_TIMESTEPS:
        raise ConfigError("context_timestep must be in [0, 1000)")
    if (config.action_q01 is None) != (config.action_q99 is None):
        raise ConfigError("action_q01 and action_q99 must be given together")
    for key in ("action_q01", "action_q99"):
        values = getattr(config, key)
        if values is not None and len(values) != t.action_dim:
            raise ConfigError(f"{key} must have transformer.action_dim ({t.action_dim}) entries")


# ----------------------------------------------------------------------------------------------
# The world model
# ----------------------------------------------------------------------------------------------


class OpenSoraWorldModel(FlowWorldModel):
    """Per-frame 2D VAE + action-conditioned STDiT3 behind the `WorldModel` interface.

    The context is kept in latent space between chunks (as RLinf does): `reset_context` encodes
    the K context frames once, every `predict` appends its predicted latents and keeps the last K.
    Training (base.FlowWorldModel): the context latents are noised at `context_timestep`.
    """

    title = "OpenSora"
    backend = "opensora"
    config_class = OpenSoraWorldModelConfig
    context_state_names = ("_context_latents", "_detail")
    frame_wise_latents = True
    negated_output = True

    def __init__(
        self,
        config: OpenSoraWorldModelConfig,
        dataset_statistics: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        # A private copy: set_latent_scaling / set_action_statistics edit the model's config.
        config = replace(config, transformer=replace(config.transformer), vae=dict(config.vae))
        if dataset_statistics is not None:
            q01, q99 = action_statistics(dataset_statistics)
            config = replace(config, action_q01=q01, action_q99=q99)
        validate_config(config)
        self.config = config
        self.action_dim = config.transformer.action_dim
        self.num_context_frames = config.num_context_frames
        self.height, self.width = config.height, config.width
        try:
            self.vae = AutoencoderKL(**config.vae)
        except TypeError as exc:
            raise ConfigError(f"vae: not an AutoencoderKL config ({exc})") from exc
        self.transformer = STDiT3(config.transformer)
        if config.delta_prediction:
            # An untrained model then predicts "no change" (the copy-last-frame baseline).
            nn.init.zeros_(self.transformer.final_layer.linear.weight)
            nn.init.zeros_(self.transformer.final_layer.linear.bias)
        self._context_latents: torch.Tensor | None = None
        self._detail: torch.Tensor | None = None

    @property
    def dtype(self) -> torch.dtype:
        """The transformer's compute dtype (the VAE may be kept in another, see `vae_dtype`)."""
        return self.transformer.x_embedder.proj.weight.dtype

    @property
    def latent_size(self) -> tuple[int, int]:
        factor = vae_downsample_factor(self.config.vae)
        return self.height // factor, self.width // factor

    # -- actions -------------------------------------------------------------------------------

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """2 (a - q01) / (q99 - q01) - 1 per dimension (identity without statistics).

        Dimensions with q99 == q01 (a constant action) map to 0.
        """
        if self.config.action_q01 is None or self.config.action_q99 is None:
            return actions.float()
        q01 = torch.tensor(self.config.action_q01, device=actions.device)
        q99 = torch.tensor(self.config.action_q99, device=actions.device)
        span = q99 - q01
        valid = span > 0
        scaled = 2.0 * (actions.float() - q01) / torch.where(valid, span, torch.ones_like(span))
        return torch.where(valid, scaled - 1.0, torch.zeros_like(scaled))

    def set_action_statistics(
        self, stats: Mapping[str, Any], unnorm_key: str | None = None
    ) -> None:
        """Take q01/q99 from a dataset_statistics.json dict (see `action_statistics`)."""
        q01, q99 = action_statistics(stats, unnorm_key)
        if len(q01) != self.action_dim or len(q99) != self.action_dim:
            raise WmrlError(f"action statistics need {self.action_dim} entries per quantile")
        self.config.action_q01, self.config.action_q99 = q01, q99

    # -- autoencoder ---------------------------------------------------------------------------

    def _to_vae_input(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [B,T,H,W,3] -> [B*T,3,H,W] in [-1, 1]."""
        x = frames.to(self.device, non_blocking=True).flatten(0, 1).permute(0, 3, 1, 2).contiguous()
        return x.to(self.vae_dtype) / 127.5 - 1.0

    def _latent_affine(self) -> tuple[float, float]:
        vae = self.config.vae
        return float(vae.get("scaling_factor", 1.0)), float(vae.get("shift_factor") or 0.0)

    def encode_frames(self, frames: TensorLike) -> torch.Tensor:
        """uint8 [B,T,H,W,3] -> scaled latents float32 [B,4,T,h,w] (posterior means, per frame)."""
        frames = check_frames("frames", frames, 5, self.height, self.width)
        batch, count = frames.shape[:2]
        mu = self._posterior_means(frames)
        scale, shift = self._latent_affine()
        z = (mu - shift) * scale
        return z.unflatten(0, (batch, count)).transpose(1, 2)

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Scaled latents [B,4,T,h,w] -> uint8 frames [B,T,H,W,3]."""
        batch, _, count = latents.shape[:3]
        scale, shift = self._latent_affine()
        z = latents.transpose(1, 2).flatten(0, 1).float() / scale + shift
        frames = self._decoded_pixels(z, rows_per_env=count)
        return frames.permute(0, 2, 3, 1).unflatten(0, (batch, count))

    def set_latent_scaling(self, scaling_factor: float, shift_factor: float | None = None) -> None:
        """Set the latent normalization z = (mu - shift) * scale (e.g. after training the VAE)."""
        if not scaling_factor > 0:
            raise WmrlError("the latent scaling factor must be positive")
        self.config.vae["scaling_factor"] = float(scaling_factor)
        self.config.vae["shift_factor"] = None if shift_factor is None else float(shift_factor)

    # -- the denoiser -------------------------------------------------------------------------

    def _action_inputs(
        self, actions: torch.Tensor, chunk: int, drop: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(the chunk's normalized actions [B,C,A], the samples given the null action [B])."""
        return actions, drop

    def _denoiser_output(
        self,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: torch.Tensor,
        actions: torch.Tensor,
        drop_actions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The first in_channels output channels (float32) for the target latents x_t [B,4,C,h,w]
        at noise levels sigma [B], after the context latents cond [B,4,K,h,w]; drop_actions [B]:
        the samples conditioned on the null action instead."""
        n_ctx, n_tgt = cond.shape[2], x_t.shape[2]
        latents = torch.cat([cond, x_t], dim=2).to(self.dtype)
        mask = torch.tensor([False] * n_ctx + [True] * n_tgt, device=x_t.device)
        with self.autocast():
            out = self.transformer(
                latents,
                fm.sigma_to_timestep(sigma.float()),
                actions.to(self.dtype),
                frame_mask=mask[None].expand(x_t.shape[0], -1),
                context_timestep=self.config.context_timestep,
                pixel_size=(self.height, self.width),
                drop_actions=drop_actions,
            )
        return out[:, : self.config.transformer.in_channels, n_ctx:]

    def _check_context_latents(self, latents: torch.Tensor) -> None:
        h, w = self.latent_size
        want = (self.config.transformer.in_channels, self.num_context_frames, h, w)
        if latents.ndim != 5 or tuple(latents.shape[1:]) != want:
            raise WmrlError(
                f"context latents must have shape [B,{','.join(map(str, want))}], "
                f"got {list(latents.shape)}"
            )

    # -- inference ----------------------------------------------------------------------------

    @torch.no_grad()
    def generate_latents(
        self,
        context_latents: torch.Tensor,
        actions: TensorLike,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Latents [B,4,C,h,w] of the C frames that actions [B,C,A] (env units) lead to."""
        self._check_context_latents(context_latents)
        act = check_actions("actions", actions, context_latents.shape[0], None, self.action_dim)
        if act.shape[1] == 0:
            raise WmrlError("actions must hold at least one step")
        act = self.normalize_actions(act.to(self.device))
        context = context_latents.to(self.device).float()
        return self._sample_targets(context, act, act.shape[1], generator)

    @torch.no_grad()
    def generate(
        self,
        reference_frames: TensorLike,
        context_frames: TensorLike,
        context_actions: TensorLike,
        actions: TensorLike,
        generator: torch.Generator | None = None,
        reference_actions: TensorLike | None = None,
    ) -> torch.Tensor:
        """Stateless prediction: uint8 [B,C,H,W,3] for actions [B,C,A] after the given context.

        The reference frame and the context actions are checked but not used (see module doc).
        """
        _, ctx, _ = self._check_context(reference_frames, context_frames, context_actions)
        context = self.encode_frames(ctx)
        latents = self.generate_latents(context, actions, generator)
        return self.with_detail(self.decode_latents(latents), self._detail_of(ctx, context))

    def _detail_of(self, ctx: torch.Tensor, context: torch.Tensor) -> torch.Tensor | None:
        """The detail the autoencoder loses of the last real context frame (if carried)."""
        if not self.config.carry_detail:
            return None
        return self.reconstruction_detail(ctx[:, -1], self.decode_latents(context[:, :, -1:])[:, 0])

    @torch.no_grad()
    def reset_context(
        self,
        reference_frames: TensorLike,
        context_frames: TensorLike,
        context_actions: TensorLike,
        reference_actions: TensorLike | None = None,
    ) -> None:
        """Encode the K context frames once; the reference frame and actions are not used."""
        _, ctx, _ = self._check_context(reference_frames, context_frames, context_actions)
        self._context_latents = self.encode_frames(ctx)
        self._detail = self._detail_of(ctx, self._context_latents)

    def reset_context_latents(self, latents: torch.Tensor) -> None:
        """Start episodes from already-encoded context latents [B,4,K,h,w]."""
        self._check_context_latents(latents)
        self._context_latents = latents.to(self.device).float().clone()
        self._detail = None  # no real frames to take detail from

    @property
    def context_latents(self) -> torch.Tensor:
        """The held context latents [B,4,K,h,w]."""
        if self._context_latents is None:
            raise WmrlError("the world model has no context: call reset_context first")
        return self._context_latents

    @torch.no_grad()
    def predict(
        self, actions: TensorLike, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        context = self.context_latents
        latents = self.generate_latents(context, actions, generator)
        self._context_latents = torch.cat([context, latents], dim=2)[
            :, :, -self.num_context_frames :
        ]
        return self.with_detail(self.decode_latents(latents), self._detail)

    # -- training (the loss: base.FlowWorldModel.forward) -------------------------------------

    def _training_actions(self, batch: WorldModelBatch, n: int, k: int) -> tuple[torch.Tensor, int]:
        tgt_act = check_actions("target_actions", batch.target_actions, n, None, self.action_dim)
        if tgt_act.shape[1] == 0:
            raise WmrlError("target_actions must hold at least one step")
        return self.normalize_actions(tgt_act.to(self.device)), tgt_act.shape[1]

    def _check_window_latents(self, latents: torch.Tensor, n: int, chunk: int) -> None:
        h, w = self.latent_size
        want = (n, self.config.transformer.in_channels, self.num_context_frames + chunk, h, w)
        if tuple(latents.shape) != want:
            raise WmrlError(
                f"latents must be {list(want)} for this window, got {list(latents.shape)}"
            )

    def _training_context(
        self, latents: torch.Tensor, noise_like: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """WMPO noises the context at its conditioning timestep (15/1000) during training; the
        delta anchor is the clean last context latent, as at inference."""
        k = self.num_context_frames
        clean, x0 = latents[:, :, :k], latents[:, :, k:]
        sigma = self.config.context_timestep / fm.NUM_TRAIN_TIMESTEPS
        context = fm.add_noise(clean, noise_like(clean), sigma) if sigma > 0 else clean
        return context, x0, clean[:, :, -1:]
