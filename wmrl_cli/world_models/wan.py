"""The Wan world model (WoVR / RLinf `wan_wm`): Wan2.2 VAE + Wan DiT with action conditioning.

Read top to bottom: the config, the action-conditioned transformer, then the world model that
wraps VAE + transformer into the `WorldModel` interface (predict, training loss, save/load).

Window layout (RLinf): 1 reference frame (the episode's first frame) + K = 4 context frames +
C = 8 target frames = 13 frames. The Wan VAE compresses time causally, 1 + 4k frames -> 1 + k
latent frames, so the window is 4 latent frames: [reference, context, target, target]. The first
1 + K/4 latent frames are clean conditioning (timestep 0); the rest are denoised.

Action conditioning (two channels, every block), as in RLinf's DiffSynth fork:
  * `action_mlp1` (Linear A->dim, GELU, Linear dim->dim) embeds each frame's action; the 13
    embeddings are the cross-attention context, in place of Wan's text embeddings.
  * `action_mlp2` (Linear 4A->4dim, SiLU, Linear 4dim->dim) embeds the actions grouped 4 per
    latent frame (the first action repeated 3 times in front, so the reference latent frame gets
    [a0, a0, a0, a0]); the result is added to that latent frame's timestep embedding, which
    drives every block's AdaLN modulation and the output norm (per-token modulation, as Wan2.2
    TI2V's per-token timesteps).

Module names follow diffusers' `WanTransformer3DModel` (plus `action_mlp1` / `action_mlp2`), so the
diffusers building blocks are reused as they are and RLinf's DiffSynth-named DiT loads after the
renames in `wan_convert.py`.

Prediction parameterisations (`delta_prediction`):
  * False (RLinf-compatible): the network output is the velocity v = eps - x0.
  * True: the network output is the clean target latents as an offset from the last context
    latent frame, x0_hat = z_ctx + out, and v = (x_sigma - x0_hat) / sigma. With the output
    projection zero-initialised an untrained model reproduces the context latent, i.e. starts at
    the copy-the-last-frames baseline instead of at noise. Sampler and loss use the same v.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from diffusers.models.normalization import FP32LayerNorm
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed, WanTransformerBlock
from torch import nn
from torch.utils.checkpoint import checkpoint

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.world_models import flow_matching as fm
from wmrl_cli.world_models.action_conditioning import (
    ActionTokenEmbedder,
    action_dropout_mask,
    guided,
    validate_action_options,
    with_null,
)
from wmrl_cli.world_models.interface import (
    TensorLike,
    WorldModel,
    WorldModelBatch,
    as_batch,
    check_actions,
    check_frames,
    config_from_dict,
)

FRAMES_PER_LATENT = 4  # the Wan VAE's temporal compression (hard-wired in its causal encoder)
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

# Per-channel statistics of the Wan2.2 VAE latents (Wan2.2 / diffusers' conversion script).
WAN22_LATENTS_MEAN = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
]  # fmt: skip
WAN22_LATENTS_STD = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]  # fmt: skip

# RLinf's fork noises the context latent at index 950 of the 1000-step shift-5 training grid
# while telling the model t = 0: sigma = shift(0.05, 5) = 0.25 / 1.2.
RLINF_CONTEXT_NOISE_SIGMA = 0.2083


# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------


@dataclass
class WanTransformerConfig:
    """Sizes of the action-conditioned Wan DiT (defaults: Wan2.2-TI2V-5B)."""

    patch_size: tuple[int, int, int] = (1, 2, 2)
    num_attention_heads: int = 24
    attention_head_dim: int = 128
    in_channels: int = 48
    out_channels: int = 48
    freq_dim: int = 256
    ffn_dim: int = 14336
    num_layers: int = 30
    action_dim: int = 7
    cross_attn_norm: bool = True
    eps: float = 1e-6
    rope_max_seq_len: int = 1024
    # The stronger action path (action_conditioning.py; off = RLinf's published architecture).
    action_tokens: bool = False  # per-latent-frame action tokens added to the patch tokens
    null_action: bool = False  # learned null embeddings, for action dropout and guidance

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim


def wan22_vae_config() -> dict[str, Any]:
    """`AutoencoderKLWan` kwargs of the Wan2.2 VAE (z 48, 16x spatial, 4x temporal)."""
    return {
        "base_dim": 160,
        "decoder_base_dim": 256,
        "z_dim": 48,
        "dim_mult": [1, 2, 4, 4],
        "num_res_blocks": 2,
        "attn_scales": [],
        "temperal_downsample": [False, True, True],
        "is_residual": True,
        "in_channels": 12,
        "out_channels": 12,
        "patch_size": 2,
        "scale_factor_temporal": 4,
        "scale_factor_spatial": 16,
        "latents_mean": list(WAN22_LATENTS_MEAN),
        "latents_std": list(WAN22_LATENTS_STD),
    }


def tiny_vae_config(z_dim: int = 16) -> dict[str, Any]:
    """A Wan2.2-style (residual, patchified) VAE small enough to train on a CPU: 8x spatial."""
    return {
        "base_dim": 16,
        "decoder_base_dim": 24,
        "z_dim": z_dim,
        "dim_mult": [1, 2, 2],
        "num_res_blocks": 1,
        "attn_scales": [],
        "temperal_downsample": [True, True],
        "is_residual": True,
        "in_channels": 12,
        "out_channels": 12,
        "patch_size": 2,
        "scale_factor_temporal": 4,
        "scale_factor_spatial": 8,
        # Identity statistics until measured on data (`WanWorldModel.set_latent_statistics`).
        "latents_mean": [0.0] * z_dim,
        "latents_std": [1.0] * z_dim,
    }


@dataclass
class WanWorldModelConfig:
    """Everything needed to build a `WanWorldModel`; saved as config.json beside the weights.

    context_noise_sigma: noise level injected into the non-reference context latents during
    training (the model is still told t = 0 there), for robustness to its own imperfect
    context at rollout time. train_shift / logit_*: logit-normal training noise levels, shifted.
    """

    transformer: WanTransformerConfig = field(default_factory=WanTransformerConfig)
    vae: dict[str, Any] = field(default_factory=wan22_vae_config)
    height: int = 256
    width: int = 256
    num_context_frames: int = 4
    num_target_frames: int = 8
    num_inference_steps: int = 5
    flow_shift: float = 5.0
    train_shift: float = 5.0
    logit_mean: float = 0.0
    logit_std: float = 1.0
    context_noise_sigma: float = RLINF_CONTEXT_NOISE_SIGMA
    delta_prediction: bool = False
    # Add the autoencoder's reconstruction error of the last real context frame to every
    # predicted frame (`WorldModel.with_detail`); off for the published models.
    carry_detail: bool = False
    # The action paired with the reference frame when the caller gives none (None: zeros).
    # RLinf keeps zeros with the gripper open (-1) there, and never updates it.
    reference_action: list[float] | None = field(
        default_factory=lambda: [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]
    )
    # The delta-prediction loss is ||x0_hat - x0||^2 / max(sigma, loss_min_sigma)^2; 1.0 makes it
    # a plain x0 loss. With small values the low-noise levels dominate, where x0 can be read off
    # the noisy input and the actions are not needed: an OpenSora model trained so beat the copy
    # baseline with an action gap of 0.00 dB (it ignored its actions); 500 more steps at 1.0
    # gave +0.05..0.07 dB and +0.6 dB of open-loop PSNR (docs/benchmarks.md).
    loss_min_sigma: float = 1.0
    motion_loss_weight: float = 0.0  # see flow_matching.delta_prediction_loss
    # Training: probability that a window's actions are replaced by the null action (needs
    # transformer.null_action). Sampling: action guidance scale (1.0: plain conditioning).
    action_dropout: float = 0.0
    action_guidance: float = 1.0
    # Round the denoiser's timesteps to bfloat16 as RLinf's bf16 pipeline does (952.4 -> 952,
    # 882.4 -> 884, 769.2 -> 768 at 5 steps, shift 5); off: float32.
    bf16_timesteps: bool = False

    @classmethod
    def full(cls) -> WanWorldModelConfig:
        """Wan2.2-TI2V-5B DiT + Wan2.2 VAE at 256x256: the size of RLinf's published model."""
        return cls()

    @classmethod
    def tiny(cls, action_dim: int = 7) -> WanWorldModelConfig:
        """~1.8M-parameter DiT + ~1.2M-parameter VAE at 64x64: trains on a 2-core CPU.

        Same classes and code path as `full`; only sizes differ, and it predicts the change
        from the context (`delta_prediction`) so that training starts at the copy baseline.
        Meta-World's action_dim is 4.
        """
        vae = tiny_vae_config(z_dim=16)
        transformer = WanTransformerConfig(
            patch_size=(1, 1, 1),
            num_attention_heads=4,
            attention_head_dim=32,
            in_channels=vae["z_dim"],
            out_channels=vae["z_dim"],
            freq_dim=256,
            ffn_dim=512,
            num_layers=6,
            action_dim=action_dim,
        )
        return cls(
            transformer=transformer,
            vae=vae,
            height=64,
            width=64,
            context_noise_sigma=0.1,
            delta_prediction=True,
            reference_action=None,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WanWorldModelConfig:
        return config_from_dict(cls, WanTransformerConfig, data, "Wan")


def validate_config(config: WanWorldModelConfig) -> None:
    """Reject sizes the Wan code path cannot run, naming the key."""
    t, v = config.transformer, config.vae
    if (
        sum(bool(x) for x in v.get("temperal_downsample", [])) != 2
        or v.get("scale_factor_temporal", 4) != FRAMES_PER_LATENT
    ):
        raise ConfigError("vae.temperal_downsample must halve time twice (4x, as the Wan VAE)")
    spatial = (v.get("patch_size") or 1) * 2 ** (len(v.get("dim_mult", [1, 2, 4, 4])) - 1)
    if v.get("scale_factor_spatial") != spatial:
        raise ConfigError(
            f"vae.scale_factor_spatial must be {spatial} for this dim_mult/patch_size"
        )
    z_dim = v.get("z_dim", 16)
    if t.in_channels != z_dim or t.out_channels != z_dim:
        raise ConfigError(f"transformer.in_channels/out_channels must equal vae.z_dim ({z_dim})")
    for key in ("latents_mean", "latents_std"):
        if len(v.get(key, [])) != z_dim:
            raise ConfigError(f"vae.{key} must have z_dim ({z_dim}) entries")
    if t.patch_size[0] != 1:
        raise ConfigError("transformer.patch_size[0] must be 1 (conditioning is per latent frame)")
    cell_h, cell_w = spatial * t.patch_size[1], spatial * t.patch_size[2]
    if config.height % cell_h or config.width % cell_w:
        raise ConfigError(f"height/width must be multiples of {cell_h}x{cell_w}")
    for key in ("num_context_frames", "num_target_frames"):
        n = getattr(config, key)
        if n <= 0 or n % FRAMES_PER_LATENT:
            raise ConfigError(f"{key} must be a positive multiple of {FRAMES_PER_LATENT}, got {n}")
    if config.num_inference_steps < 1:
        raise ConfigError("num_inference_steps must be >= 1")
    if not 0.0 <= config.context_noise_sigma < 1.0:
        raise ConfigError("context_noise_sigma must be in [0, 1)")
    validate_action_options(config.action_dropout, config.action_guidance, t.null_action)
    if config.reference_action is not None and len(config.reference_action) != t.action_dim:
        raise ConfigError(
            f"reference_action must have transformer.action_dim ({t.action_dim}) values"
        )


# ----------------------------------------------------------------------------------------------
# The action-conditioned transformer
# ----------------------------------------------------------------------------------------------


class WanActionConditionEmbedder(nn.Module):
    """Wan's timestep embedding (diffusers names), without the text projection the WM never uses."""

    def __init__(self, dim: int, freq_dim: int) -> None:
        super().__init__()
        self.timesteps_proj = Timesteps(freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.time_embedder = TimestepEmbedding(in_channels=freq_dim, time_embed_dim=dim)
        self.act_fn = nn.SiLU()
        self.time_proj = nn.Linear(dim, dim * 6)

    def embed_time(self, timestep: torch.Tensor) -> torch.Tensor:
        """timestep [B,F] (0..1000) -> temb [B,F,dim] in the embedder's dtype."""
        freqs = self.timesteps_proj(timestep.flatten()).unflatten(0, timestep.shape)
        return self.time_embedder(freqs.to(self.time_embedder.linear_1.weight.dtype))

    def modulation(self, temb: torch.Tensor) -> torch.Tensor:
        """temb [...,dim] -> the 6 AdaLN vectors [...,6,dim] every block adds to its table."""
        return self.time_proj(self.act_fn(temb)).unflatten(-1, (6, -1))


class ActionEmbeddings(NamedTuple):
    """A window's action embeddings: cross-attention context [B,T,dim], per-latent-frame
    modulation [B,F,dim] and (with `action_tokens`) token offsets [B,F,dim]."""

    context: torch.Tensor
    modulation: torch.Tensor
    tokens: torch.Tensor | None = None


class WanActionTransformer(nn.Module):
    """Wan DiT whose cross-attention reads action embeddings and whose modulation adds actions."""

    def __init__(self, config: WanTransformerConfig) -> None:
        super().__init__()
        self.config = config
        dim, act = config.dim, config.action_dim
        self.rope = WanRotaryPosEmbed(
            config.attention_head_dim, config.patch_size, config.rope_max_seq_len
        )
        self.patch_embedding = nn.Conv3d(
            config.in_channels, dim, kernel_size=config.patch_size, stride=config.patch_size
        )
        self.condition_embedder = WanActionConditionEmbedder(dim, config.freq_dim)
        self.action_mlp1 = nn.Sequential(nn.Linear(act, dim), nn.GELU(), nn.Linear(dim, dim))
        self.action_mlp2 = nn.Sequential(
            nn.Linear(FRAMES_PER_LATENT * act, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim)
        )
        self.blocks = nn.ModuleList(
            WanTransformerBlock(
                dim,
                config.ffn_dim,
                config.num_attention_heads,
                qk_norm="rms_norm_across_heads",
                cross_attn_norm=config.cross_attn_norm,
                eps=config.eps,
            )
            for _ in range(config.num_layers)
        )
        self.norm_out = FP32LayerNorm(dim, config.eps, elementwise_affine=False)
        self.proj_out = nn.Linear(dim, config.out_channels * math.prod(config.patch_size))
        self.scale_shift_table = nn.Parameter(torch.randn(1, 2, dim) / dim**0.5)
        if config.action_tokens:
            self.action_token_embedder = ActionTokenEmbedder(2 * FRAMES_PER_LATENT * act, dim)
        if config.null_action:
            self.null_action_context = nn.Parameter(torch.zeros(dim))
            self.null_action_modulation = nn.Parameter(torch.zeros(dim))
            self.null_action_token = nn.Parameter(torch.zeros(dim))
        self.gradient_checkpointing = False

    def _null(self, name: str) -> torch.Tensor | None:
        return getattr(self, name) if self.config.null_action else None

    def embed_actions(
        self, actions: torch.Tensor, num_targets: int = 0, drop: torch.Tensor | None = None
    ) -> ActionEmbeddings:
        """actions [B,T,A], T = 1 + 4(F-1), the last `num_targets` of them the chunk's ->
        (context [B,T,dim], frame modulation [B,F,dim], token offsets [B,F,dim] or None); the
        samples flagged in drop [B] get the null embeddings instead."""
        batch, length, act = actions.shape
        if (length - 1) % FRAMES_PER_LATENT:
            raise WmrlError(f"a window needs 1 + 4k actions, got {length}")
        context = with_null(self.action_mlp1(actions), self._null("null_action_context"), drop)
        pad = FRAMES_PER_LATENT - 1

        def grouped(per_frame: torch.Tensor) -> torch.Tensor:
            padded = torch.cat([per_frame[:, :1].expand(-1, pad, -1), per_frame], dim=1)
            return padded.reshape(batch, -1, FRAMES_PER_LATENT * per_frame.shape[-1])

        modulation = self.action_mlp2(grouped(actions))
        modulation = with_null(modulation, self._null("null_action_modulation"), drop)
        tokens = None
        if self.config.action_tokens:
            # the running sum covers the chunk's actions only (the displacement from the context)
            running = torch.zeros_like(actions)
            running[:, length - num_targets :] = actions[:, length - num_targets :].cumsum(dim=1)
            features = torch.cat([actions, running], dim=-1)
            tokens = self.action_token_embedder(grouped(features))
            tokens = with_null(tokens, self._null("null_action_token"), drop)
        return ActionEmbeddings(context, modulation, tokens)

    def forward(
        self,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        context: torch.Tensor,
        frame_modulation: torch.Tensor | None = None,
        frame_tokens: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """hidden_states [B,C,F,H,W]; timestep [B,F] (0..1000, per latent frame); context [B,L,dim]
        (cross-attention tokens); frame_modulation [B,F,dim] added to the timestep embedding;
        frame_tokens [B,F,dim] added to every patch token of their latent frame.
        Returns [B,C_out,F,H,W]."""
        batch, _, frames, height, width = hidden_states.shape
        p_t, p_h, p_w = self.config.patch_size
        grid_f, grid_h, grid_w = frames // p_t, height // p_h, width // p_w
        if tuple(timestep.shape) != (batch, grid_f):
            raise ValueError(
                f"timestep must be [B, F] = [{batch}, {grid_f}], got {list(timestep.shape)}"
            )

        rotary_emb = self.rope(hidden_states)
        x = self.patch_embedding(hidden_states).flatten(2).transpose(1, 2).contiguous()
        if frame_tokens is not None:
            x = x + frame_tokens.type_as(x).repeat_interleave(grid_h * grid_w, dim=1)

        # Conditioning per latent frame; the time projection is linear, so projecting per frame
        # and repeating per token equals Wan2.2 TI2V's per-token timesteps, at 1/(h*w) the cost.
        temb = self.condition_embedder.embed_time(timestep).type_as(context)
        if frame_modulation is not None:
            temb = temb + frame_modulation.type_as(temb)
        block_mod = self.condition_embedder.modulation(temb)
        tokens_per_frame = grid_h * grid_w
        temb = temb.repeat_interleave(tokens_per_frame, dim=1)
        block_mod = block_mod.repeat_interleave(tokens_per_frame, dim=1)

        for block in self.blocks:
            if torch.is_grad_enabled() and self.gradient_checkpointing:
                x = checkpoint(block, x, context, block_mod, rotary_emb, use_reentrant=False)
            else:
                x = block(x, context, block_mod, rotary_emb)

        shift, scale = (self.scale_shift_table.unsqueeze(0) + temb.unsqueeze(2)).unbind(2)
        x = (self.norm_out(x.float()) * (1 + scale) + shift).type_as(x)
        x = self.proj_out(x)
        x = x.reshape(batch, grid_f, grid_h, grid_w, p_t, p_h, p_w, -1)
        return x.permute(0, 7, 1, 4, 2, 5, 3, 6).flatten(6, 7).flatten(4, 5).flatten(2, 3)


# ----------------------------------------------------------------------------------------------
# The world model
# ----------------------------------------------------------------------------------------------


class WanWorldModel(WorldModel):
    """VAE + action-conditioned Wan DiT behind the `WorldModel` interface.

    Context is kept in pixel space and re-encoded with the reference frame at every chunk, as
    RLinf does: the VAE encodes [reference, K context frames] into 1 + K/4 latent frames, the DiT
    denoises C/4 target latent frames next to them, and the VAE decodes all of them (its causal
    decoder needs the history) of which the last C frames are returned.

    Training (`model(batch)` is the loss): the window is encoded without gradients (the VAE is
    trained on its own with `autoencoder_loss`; cache `encode_window` latents to skip it), the
    non-reference context latents get noise of level `context_noise_sigma` (the model is still
    told t = 0 there), the target latents are noised at a logit-normal level, and the loss is the
    velocity error on the target latents only. `transformer.gradient_checkpointing = True`
    trades compute for memory.
    """

    title = "Wan"
    backend = "wan"
    config_class = WanWorldModelConfig
    context_state_names = (
        "_reference",
        "_reference_actions",
        "_context_frames",
        "_context_actions",
        "_detail",
    )
    autoencoder_trains_on_windows = True

    def __init__(self, config: WanWorldModelConfig) -> None:
        super().__init__()
        validate_config(config)
        self.config = config
        self.action_dim = config.transformer.action_dim
        self.num_context_frames = config.num_context_frames
        self.height, self.width = config.height, config.width
        self.vae = AutoencoderKLWan(**config.vae)
        self.transformer = WanActionTransformer(config.transformer)
        if config.delta_prediction:
            # An untrained model then predicts "no change" (the copy-last-frames baseline).
            nn.init.zeros_(self.transformer.proj_out.weight)
            nn.init.zeros_(self.transformer.proj_out.bias)
        self.register_buffer("latents_mean", self._stat("latents_mean"), persistent=False)
        self.register_buffer("latents_std", self._stat("latents_std"), persistent=False)
        self._reference: torch.Tensor | None = None
        self._reference_actions: torch.Tensor | None = None
        self._detail: torch.Tensor | None = None
        self._context_frames: torch.Tensor | None = None
        self._context_actions: torch.Tensor | None = None

    def _stat(self, key: str) -> torch.Tensor:
        return torch.tensor(self.config.vae[key], dtype=torch.float32).view(1, -1, 1, 1, 1)

    @property
    def dtype(self) -> torch.dtype:
        """The transformer's compute dtype (the VAE may be kept in another, see `vae_dtype`)."""
        return self.transformer.proj_out.weight.dtype

    @property
    def vae_dtype(self) -> torch.dtype:
        return self.vae.post_quant_conv.weight.dtype

    @property
    def num_cond_latents(self) -> int:
        return 1 + self.num_context_frames // FRAMES_PER_LATENT

    # -- autoencoder ---------------------------------------------------------------------------

    def _to_vae_input(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.to(self.device, non_blocking=True).permute(0, 4, 1, 2, 3).contiguous()
        return x.to(self.vae_dtype) / 127.5 - 1.0

    def encode_frames(self, frames: TensorLike, normalize: bool = True) -> torch.Tensor:
        """uint8 [B,T,H,W,3], T = 1 + 4k -> latents float32 [B,z,1+k,h,w] (posterior means)."""
        frames = check_frames("frames", frames, 5, self.height, self.width)
        if (frames.shape[1] - 1) % FRAMES_PER_LATENT:
            raise WmrlError(f"the Wan VAE encodes 1 + 4k frames, got {frames.shape[1]}")
        with self.autocast():
            mu = self.vae.encode(self._to_vae_input(frames)).latent_dist.mode().float()
        return (mu - self.latents_mean) / self.latents_std if normalize else mu

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Normalized latents [B,z,F,h,w] -> uint8 frames [B,1+4(F-1),H,W,3]."""
        z = latents.float() * self.latents_std + self.latents_mean
        with self.autocast():
            video = self.vae.decode(z.to(self.vae_dtype)).sample
        video = ((video.float().clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8)
        return video.permute(0, 2, 3, 4, 1)

    def set_latent_statistics(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Set the per-channel latent normalization (e.g. measured after training the VAE)."""
        z_dim = self.config.vae["z_dim"]
        mean, std = torch.as_tensor(mean).flatten().float(), torch.as_tensor(std).flatten().float()
        if mean.numel() != z_dim or std.numel() != z_dim or bool((std <= 0).any()):
            raise WmrlError(f"latent statistics need {z_dim} means and {z_dim} positive stds")
        self.config.vae["latents_mean"] = mean.tolist()
        self.config.vae["latents_std"] = std.tolist()
        self.latents_mean = self._stat("latents_mean").to(self.device)
        self.latents_std = self._stat("latents_std").to(self.device)

    def _autoencoder_changed(self) -> None:
        self.latents_mean = self._stat("latents_mean").to(self.device)
        self.latents_std = self._stat("latents_std").to(self.device)

    # -- the denoiser -------------------------------------------------------------------------

    def _window_actions(
        self,
        reference_actions: torch.Tensor | None,
        context_actions: torch.Tensor,
        target_actions: torch.Tensor,
    ) -> torch.Tensor:
        batch = context_actions.shape[0]
        if reference_actions is None:
            default = self.config.reference_action or [0.0] * self.action_dim
            reference_actions = torch.tensor(default).expand(batch, -1)
        elif tuple(reference_actions.shape) != (batch, self.action_dim):
            raise WmrlError(
                f"reference_actions must have shape [{batch},{self.action_dim}], "
                f"got {list(reference_actions.shape)}"
            )
        parts = [
            reference_actions.float()[:, None],
            context_actions.float(),
            target_actions.float(),
        ]
        return torch.cat([p.to(self.device) for p in parts], dim=1).to(self.dtype)

    def _denoiser_output(
        self,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond_latents: torch.Tensor,
        actions: ActionEmbeddings,
    ) -> torch.Tensor:
        """Raw network output (float32) for the target latents x_t at noise levels sigma [B]."""
        n_cond, n_tgt = cond_latents.shape[2], x_t.shape[2]
        latents = torch.cat([cond_latents, x_t], dim=2).to(self.dtype)
        timestep = torch.cat(
            [
                torch.zeros(x_t.shape[0], n_cond, device=x_t.device),
                self._timestep(sigma)[:, None].expand(-1, n_tgt),
            ],
            dim=1,
        )
        with self.autocast():
            out = self.transformer(
                latents, timestep, actions.context, actions.modulation, actions.tokens
            )
        return out[:, :, n_cond:].float()

    def _timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        t = fm.sigma_to_timestep(sigma.float())
        return t.to(torch.bfloat16).float() if self.config.bf16_timesteps else t

    def _velocity(
        self, x_t: torch.Tensor, sigma: torch.Tensor, out: torch.Tensor, anchor: torch.Tensor
    ) -> torch.Tensor:
        if not self.config.delta_prediction:
            return out
        return fm.velocity_from_x0(x_t, anchor + out, sigma.view(-1, 1, 1, 1, 1))

    # -- inference ----------------------------------------------------------------------------

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
        """Stateless prediction: uint8 [B,C,H,W,3] for actions [B,C,A] after the given context."""
        ctx = check_frames("context_frames", context_frames, 5, self.height, self.width)
        window = self._window_frames(
            reference_frames, ctx, context_actions, actions, generator, reference_actions
        )
        chunk = window.shape[1] - 1 - ctx.shape[1]
        detail = None
        if self.config.carry_detail:  # the decoded window holds the context's reconstruction
            detail = self.reconstruction_detail(ctx[:, -1], window[:, -chunk - 1])
        return self.with_detail(window[:, -chunk:], detail)

    def _window_frames(
        self,
        reference_frames: TensorLike,
        context_frames: TensorLike,
        context_actions: TensorLike,
        actions: TensorLike,
        generator: torch.Generator | None,
        reference_actions: TensorLike | None,
    ) -> torch.Tensor:
        """The decoded window [B,1+K+C,H,W,3]: reference and context reconstructions, then the
        C predicted frames."""
        ref = check_frames("reference_frames", reference_frames, 4, self.height, self.width)
        ctx = check_frames("context_frames", context_frames, 5, self.height, self.width)
        batch, k = ctx.shape[:2]
        if ref.shape[0] != batch or k != self.num_context_frames:
            raise WmrlError(
                f"expected {batch} reference frames and {self.num_context_frames} context frames "
                f"per env, got {ref.shape[0]} and {k}"
            )
        ctx_act = check_actions("context_actions", context_actions, batch, k, self.action_dim)
        act = check_actions("actions", actions, batch, None, self.action_dim)
        chunk = act.shape[1]
        if chunk == 0 or chunk % FRAMES_PER_LATENT:
            raise WmrlError(f"chunk length must be a positive multiple of 4, got {chunk}")
        ref_act = None if reference_actions is None else torch.as_tensor(reference_actions)

        cond = self.encode_frames(torch.cat([ref[:, None], ctx], dim=1))
        window_actions = self._window_actions(ref_act, ctx_act, act)
        embedded = self.transformer.embed_actions(window_actions, chunk)
        scale = self.config.action_guidance
        null = None
        if scale != 1.0:
            all_rows = torch.ones(batch, dtype=torch.bool, device=self.device)
            null = self.transformer.embed_actions(window_actions, chunk, drop=all_rows)
        anchor = cond[:, :, -1:]
        shape = (batch, cond.shape[1], chunk // FRAMES_PER_LATENT, *cond.shape[3:])
        noise_device = generator.device if generator is not None else self.device
        noise = torch.randn(shape, generator=generator, device=noise_device).to(self.device)

        def velocity_fn(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            v = self._velocity(x, sigma, self._denoiser_output(x, sigma, cond, embedded), anchor)
            if null is None:
                return v
            v_null = self._velocity(x, sigma, self._denoiser_output(x, sigma, cond, null), anchor)
            return guided(v, v_null, scale)

        sigmas = fm.inference_sigmas(self.config.num_inference_steps, self.config.flow_shift)
        target = fm.euler_sample(velocity_fn, noise, sigmas)
        return self.decode_latents(torch.cat([cond, target], dim=2))

    def reset_context(
        self,
        reference_frames: TensorLike,
        context_frames: TensorLike,
        context_actions: TensorLike,
        reference_actions: TensorLike | None = None,
    ) -> None:
        ref = check_frames("reference_frames", reference_frames, 4, self.height, self.width)
        ctx = check_frames("context_frames", context_frames, 5, self.height, self.width)
        batch, k = ctx.shape[:2]
        if ref.shape[0] != batch or k != self.num_context_frames:
            raise WmrlError(
                f"expected {batch} reference frames and {self.num_context_frames} context frames "
                f"per env, got {ref.shape[0]} and {k}"
            )
        ctx_act = check_actions("context_actions", context_actions, batch, k, self.action_dim)
        ref_act = None
        if reference_actions is not None:
            ref_act = torch.as_tensor(reference_actions).float()
            if tuple(ref_act.shape) != (batch, self.action_dim):
                raise WmrlError(
                    f"reference_actions must have shape [{batch},{self.action_dim}], "
                    f"got {list(ref_act.shape)}"
                )
        device = self.device
        self._reference = ref.to(device).clone()
        self._context_frames = ctx.to(device).clone()
        self._context_actions = ctx_act.to(device).clone()
        self._reference_actions = None if ref_act is None else ref_act.to(device).clone()
        self._detail = None
        if self.config.carry_detail:  # taken once from the real frames, then held
            window = self.decode_latents(self.encode_frames(torch.cat([ref[:, None], ctx], 1)))
            self._detail = self.reconstruction_detail(ctx[:, -1], window[:, -1]).to(device)

    def context(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The held (reference frames, context frames, context actions)."""
        if self._reference is None:
            raise WmrlError("the world model has no context: call reset_context first")
        return self._reference, self._context_frames, self._context_actions

    @torch.no_grad()
    def predict(
        self, actions: TensorLike, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        reference, ctx, ctx_act = self.context()
        act = check_actions("actions", actions, ctx.shape[0], None, self.action_dim)
        window = self._window_frames(
            reference, ctx, ctx_act, act, generator, self._reference_actions
        )
        frames = self.with_detail(window[:, -act.shape[1] :], self._detail)
        k = self.num_context_frames
        self._context_frames = torch.cat([ctx, frames.to(ctx.device)], dim=1)[:, -k:]
        self._context_actions = torch.cat([ctx_act, act.to(ctx_act.device)], dim=1)[:, -k:]
        return frames

    # -- training -----------------------------------------------------------------------------

    @torch.no_grad()
    def encode_window(
        self, batch: WorldModelBatch | Mapping[str, TensorLike | None]
    ) -> torch.Tensor:
        """Latents [B,z,1+(K+C)/4,h,w] of [reference, context, target] frames, for caching."""
        batch = as_batch(batch)
        if batch.target_frames is None:
            raise WmrlError("encode_window needs target_frames")
        ref = check_frames("reference_frames", batch.reference_frames, 4, self.height, self.width)
        ctx = check_frames("context_frames", batch.context_frames, 5, self.height, self.width)
        tgt = check_frames("target_frames", batch.target_frames, 5, self.height, self.width)
        return self.encode_frames(torch.cat([ref[:, None], ctx, tgt], dim=1))

    def forward(
        self,
        batch: WorldModelBatch | Mapping[str, TensorLike | None],
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Flow-matching loss on the target latents of a batch of windows (scalar, float32)."""
        batch = as_batch(batch)
        ctx_frames = torch.as_tensor(batch.context_frames)
        n, k = ctx_frames.shape[:2]
        if k != self.num_context_frames:
            raise WmrlError(f"expected {self.num_context_frames} context frames, got {k}")
        ctx_act = check_actions("context_actions", batch.context_actions, n, k, self.action_dim)
        tgt_act = check_actions("target_actions", batch.target_actions, n, None, self.action_dim)
        chunk = tgt_act.shape[1]
        if chunk == 0 or chunk % FRAMES_PER_LATENT:
            raise WmrlError(f"target length must be a positive multiple of 4, got {chunk}")
        latents = batch.latents if batch.latents is not None else self.encode_window(batch)
        n_cond, n_tgt = self.num_cond_latents, chunk // FRAMES_PER_LATENT
        if latents.ndim != 5 or latents.shape[0] != n or latents.shape[2] != n_cond + n_tgt:
            raise WmrlError(
                f"latents must be [B,z,{n_cond + n_tgt},h,w] for this window, "
                f"got {list(latents.shape)}"
            )
        latents = latents.to(self.device).float()
        cond, x0 = latents[:, :, :n_cond], latents[:, :, n_cond:]

        def randn_like(x: torch.Tensor) -> torch.Tensor:
            draw_device = generator.device if generator is not None else x.device
            return torch.randn(x.shape, generator=generator, device=draw_device).to(x.device)

        sigma_ctx = self.config.context_noise_sigma
        if sigma_ctx > 0 and n_cond > 1:
            noisy = fm.add_noise(cond[:, :, 1:], randn_like(cond[:, :, 1:]), sigma_ctx)
            cond = torch.cat([cond[:, :, :1], noisy], dim=2)

        sigma = fm.sample_training_sigmas(
            n,
            logit_mean=self.config.logit_mean,
            logit_std=self.config.logit_std,
            shift=self.config.train_shift,
            generator=generator,
            device=self.device,
        )
        sigma_b = sigma.view(-1, 1, 1, 1, 1)
        noise = randn_like(x0)
        x_t = fm.add_noise(x0, noise, sigma_b)

        ref_act = (
            None if batch.reference_actions is None else torch.as_tensor(batch.reference_actions)
        )
        drop = action_dropout_mask(n, self.config.action_dropout, generator, self.device)
        embedded = self.transformer.embed_actions(
            self._window_actions(ref_act, ctx_act, tgt_act), chunk, drop
        )
        out = self._denoiser_output(x_t, sigma, cond, embedded)
        if self.config.delta_prediction:
            # ||v_hat - v||^2 = ||x0_hat - x0||^2 / sigma^2; the weight is bounded at small sigma.
            return self.delta_prediction_loss(out, x0, cond[:, :, -1:], sigma_b)
        return F.mse_loss(out, fm.velocity_target(x0, noise))

    # -- persistence --------------------------------------------------------------------------

    @classmethod
    def from_state_dict(
        cls, config: WanWorldModelConfig, state_dict: Mapping[str, torch.Tensor], what: str
    ) -> WanWorldModel:
        """Build on the meta device (no random init, no second copy of a 5B model) and load."""
        with torch.device("meta"):
            model = cls(config)
        load_into(model, state_dict, what=what, assign=True)
        model._materialize_buffers()
        return model

    def _materialize_buffers(self) -> None:
        """Recompute the non-persistent buffers (RoPE tables, latent statistics) on the CPU."""
        t = self.config.transformer
        self.transformer.rope = WanRotaryPosEmbed(
            t.attention_head_dim, t.patch_size, t.rope_max_seq_len
        )
        self.latents_mean = self._stat("latents_mean")
        self.latents_std = self._stat("latents_std")


def load_into(
    module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str, assign: bool = False
) -> None:
    """Strict load that reports missing/unexpected keys as one WmrlError line."""
    try:
        result = module.load_state_dict(dict(state_dict), strict=False, assign=assign)
    except RuntimeError as exc:  # shape mismatches
        first = str(exc).strip().splitlines()
        detail = " ".join(line.strip() for line in first[1:4]) or first[0]
        raise WmrlError(f"cannot load {what}: {detail}") from exc
    problems = []
    if result.missing_keys:
        problems.append(f"missing {_key_list(result.missing_keys)}")
    if result.unexpected_keys:
        problems.append(f"unexpected {_key_list(result.unexpected_keys)}")
    if problems:
        raise WmrlError(f"cannot load {what}: " + "; ".join(problems))


def _key_list(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return f"{len(keys)} key(s): {shown}{more}"
