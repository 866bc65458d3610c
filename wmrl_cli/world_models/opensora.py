"""The OpenSora world model (WMPO / RLinf `opensora_wm`): 2D SDXL-style VAE + action STDiT3.

Read top to bottom: the configs, the STDiT3 building blocks, STDiT3 itself, then the world model
that wraps VAE + STDiT3 into the `WorldModel` interface (predict, training loss, save/load).

Window layout (WMPO / RLinf): K = 4 context frames + C = 8 generated frames, one latent frame per
video frame (the VAE is 2D, applied per frame), frame mask [0]*K + [1]*C. The episode's reference
frame is not an input of STDiT3: `reset_context` accepts it for the interface and ignores it.
Context actions are not inputs either: the model conditions on the current chunk's actions only
(RLinf's OpenSora backend carries no action history).

STDiT3 (Open-Sora 1.2): each of `depth` layers is a spatial block (attention over the h*w tokens of
one frame, 2D sin-cos position embedding) then a temporal block (attention over the frames at one
position, RoPE, causal for the world model). A block is adaLN self-attention -> (optional
cross-attention) -> adaLN MLP, modulated by a shared `t_block` (SiLU, Linear -> 6*hidden) plus a
per-block `scale_shift_table` (6, hidden): t2i_modulate x*(1+scale)+shift and gated residuals.

Action conditioning, as in WMPO's STDiT3 fork (verified against its source):
  * `action_embedder` (ActionEncoder): `fc` = Linear(A -> 4*hidden), SiLU, Linear(-> hidden) per
    action, with learned `none_action` embeddings filling the K context slots in front, so a
    window has K + C per-frame embeddings. They are added to the timestep embedding of the
    spatial blocks only (per frame); temporal blocks and the final layer see the plain timestep.
  * Under the frame mask, context frames take the "t0" branch everywhere: the modulation of
    timestep 15 (out of 1000) without any action embedding. So in the world model `none_action`
    modulates nothing; it is kept so that published checkpoints load, and it is used when STDiT3
    runs without a frame mask. The fork has one shared `none_action` row (`num_none_actions=1`);
    `num_none_actions=K` gives one per context slot.
  * Training noises the context latents at timestep 15 too; sampling keeps them clean.

Rectified flow (`flow_matching.py` convention: x_sigma = (1-sigma) x0 + sigma eps, v = eps - x0).
STDiT3's raw output is Open-Sora's velocity x0 - eps (8 channels with pred_sigma; the first 4 are
used), so `delta_prediction=False` (RLinf-compatible) negates it. With `delta_prediction=True` the
output is the clean target as an offset from the last context latent (x0_hat = z_ctx + out); the
final layer starts at zero, so an untrained model reproduces the last context frame: it starts at
the copy-the-last-frame baseline (MEASUREMENTS.md) instead of at noise.

Module and parameter names follow Open-Sora's `STDiT3` and WMPO's fork (`x_embedder.proj`,
`t_embedder.mlp`, `t_block.1`, `action_embedder.fc`, `action_embedder.none_action`, `rope.freqs`,
`spatial_blocks.N.attn.qkv`, `...attn.q_norm`, `...mlp.fc1`, `...scale_shift_table`,
`final_layer.linear`, ...) so that their safetensors load by name (`opensora_convert.py`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL
from torch import nn
from torch.utils.checkpoint import checkpoint

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.world_models import flow_matching as fm
from wmrl_cli.world_models.action_conditioning import (
    ActionTokenEmbedder,
    action_dropout_mask,
    chunk_action_features,
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
from wmrl_cli.world_models.state_dicts import load_into

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
SDXL_SCALING_FACTOR = 0.13025
WMPO_CONTEXT_TIMESTEP = 15.0  # timestep (of 1000) of the context frames in WMPO's fork


# ----------------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------------


@dataclass
class STDiT3Config:
    """Sizes of STDiT3 (defaults: STDiT3-XL/2 with WMPO's action conditioning, 7-dim actions).

    cross_attention: build each block's text cross-attention (Open-Sora's `cross_attn`); it runs
    only when `encoder_hidden_states` are given, which the world model never does (WMPO's fork
    keeps the modules but skips them). input_sq_size: Open-Sora's reference resolution for the
    position-embedding scale.
    """

    depth: int = 28
    hidden_size: int = 1152
    num_heads: int = 16
    mlp_ratio: float = 4.0
    patch_size: tuple[int, int, int] = (1, 2, 2)
    in_channels: int = 4
    pred_sigma: bool = True
    qk_norm: bool = True
    causal_temporal: bool = True
    cross_attention: bool = False
    action_dim: int = 7
    num_none_actions: int = 1
    input_sq_size: int = 512
    frequency_embedding_size: int = 256
    # The stronger action path (action_conditioning.py; off = WMPO's published architecture):
    # "spatial": actions summed into the spatial blocks' timestep embedding (WMPO); "all": an
    # action adaLN of its own modulates the spatial and temporal blocks and the final layer.
    action_modulation: str = "spatial"
    action_tokens: bool = False  # per-frame action tokens added to the target frames' tokens
    null_action: bool = False  # learned null embeddings, for action dropout and guidance

    @property
    def out_channels(self) -> int:
        return 2 * self.in_channels if self.pred_sigma else self.in_channels

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


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
class OpenSoraWorldModelConfig:
    """Everything needed to build an `OpenSoraWorldModel`; saved as config.json beside the weights.

    flow_shift / train_shift: resolution shift of the sampling grid and of the logit-normal
    training noise levels (WMPO's fork: ratio = 2 * sqrt(H*W) / 512, i.e. 1.0 at 256x256).
    context_timestep: the timestep (0..1000) context frames are conditioned on, and noised at
    during training. action_q01 / action_q99: per-dimension action statistics for the [-1, 1]
    normalization (None: actions are used as given). num_target_frames: the chunk length of
    training windows (any chunk length runs: the action embeddings follow the frames).
    """

    transformer: STDiT3Config = field(default_factory=STDiT3Config)
    vae: dict[str, Any] = field(default_factory=sdxl_vae_config)
    height: int = 256
    width: int = 256
    num_context_frames: int = 4
    num_target_frames: int = 8
    num_inference_steps: int = 10
    flow_shift: float = 1.0
    train_shift: float = 1.0
    logit_mean: float = 0.0
    logit_std: float = 1.0
    context_timestep: float = WMPO_CONTEXT_TIMESTEP
    delta_prediction: bool = False
    # Add the autoencoder's reconstruction error of the last real context frame to every
    # predicted frame (`WorldModel.with_detail`); off for the published models.
    carry_detail: bool = False
    # The delta-prediction loss is ||x0_hat - x0||^2 / max(sigma, loss_min_sigma)^2; 1.0 makes it
    # a plain x0 loss. With small values the low-noise levels dominate, where x0 can be read off
    # the noisy input and the actions are not needed: an OpenSora model trained so beat the copy
    # baseline with an action gap of 0.00 dB (it ignored its actions); 500 more steps at 1.0
    # gave +0.05..0.07 dB and +0.6 dB of open-loop PSNR (docs/benchmarks.md).
    loss_min_sigma: float = 1.0
    motion_loss_weight: float = 0.0  # see flow_matching.delta_prediction_loss
    action_q01: list[float] | None = None
    action_q99: list[float] | None = None
    # Training: probability that a window's actions are replaced by the null action (needs
    # transformer.null_action). Sampling: action guidance scale (1.0: plain conditioning).
    action_dropout: float = 0.0
    action_guidance: float = 1.0

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpenSoraWorldModelConfig:
        return config_from_dict(cls, STDiT3Config, data, "OpenSora")


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
    validate_action_options(config.action_dropout, config.action_guidance, t.null_action)
    if not 0.0 <= config.context_timestep < fm.NUM_TRAIN_TIMESTEPS:
        raise ConfigError("context_timestep must be in [0, 1000)")
    if (config.action_q01 is None) != (config.action_q99 is None):
        raise ConfigError("action_q01 and action_q99 must be given together")
    for key in ("action_q01", "action_q99"):
        values = getattr(config, key)
        if values is not None and len(values) != t.action_dim:
            raise ConfigError(f"{key} must have transformer.action_dim ({t.action_dim}) entries")


# ----------------------------------------------------------------------------------------------
# STDiT3 building blocks
# ----------------------------------------------------------------------------------------------


def t2i_modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class RMSNorm(nn.Module):
    """Llama RMSNorm over the last dim (Open-Sora's q/k norm), computed in float32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """RoPE over the frame axis of temporal attention, with interleaved pairs (x0,x1), (x2,x3)...

    `freqs` is a frozen parameter, as in the rotary-embedding-torch module Open-Sora uses, so
    that published checkpoints (which carry `rope.freqs`) load by name.
    """

    def __init__(self, dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        exponents = torch.arange(0, dim, 2)[: dim // 2].float() / dim
        self.freqs = nn.Parameter(1.0 / theta**exponents, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., L, D] -> x rotated by angle position * freq, position = 0..L-1."""
        positions = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)
        angles = torch.outer(positions, self.freqs.float()).repeat_interleave(2, dim=-1)
        x32 = x.float()
        pairs = x32.unflatten(-1, (-1, 2))
        rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
        return (x32 * angles.cos() + rotated * angles.sin()).to(x.dtype)


def sincos_position_embedding_2d(
    dim: int,
    height: int,
    width: int,
    scale: float = 1.0,
    base_size: int | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Open-Sora's PositionEmbedding2D for an height x width token grid: [h*w, dim] (row-major).

    Coordinates are index / scale (* base_size / extent); the first half of the channels encodes
    the column, the second the row, each as [sin, cos] over dim/4 frequencies.
    """
    half = dim // 2
    inv_freq = 1.0 / (10000 ** (torch.arange(0, half, 2, device=device).float() / half))
    rows = torch.arange(height, device=device, dtype=torch.float32) / scale
    cols = torch.arange(width, device=device, dtype=torch.float32) / scale
    if base_size is not None:
        rows, cols = rows * (base_size / height), cols * (base_size / width)

    def sincos(pos: torch.Tensor) -> torch.Tensor:
        angles = torch.outer(pos, inv_freq)
        return torch.cat([angles.sin(), angles.cos()], dim=-1)

    col_emb = sincos(cols)[None, :, :].expand(height, width, -1)
    row_emb = sincos(rows)[:, None, :].expand(height, width, -1)
    return torch.cat([col_emb, row_emb], dim=-1).reshape(height * width, dim)


class PatchEmbed3D(nn.Module):
    def __init__(self, patch_size: tuple[int, int, int], in_channels: int, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Conv3d(in_channels, hidden, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[B,C,T,H,W] -> [B, T', H'*W', hidden]."""
        x = self.proj(x)
        return x.flatten(3).permute(0, 2, 3, 1)


class TimestepEmbedder(nn.Module):
    """Sinusoidal features (cos first, as in GLIDE/DiT) of timesteps in 0..1000, then an MLP."""

    def __init__(self, hidden: int, frequency_embedding_size: int = 256) -> None:
        super().__init__()
        self.frequency_embedding_size = frequency_embedding_size
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden), nn.SiLU(), nn.Linear(hidden, hidden)
        )

    def forward(self, timestep: torch.Tensor) -> torch.Tensor:
        half = self.frequency_embedding_size // 2
        exponent = torch.arange(half, dtype=torch.float32, device=timestep.device) / half
        freqs = torch.exp(-math.log(10000.0) * exponent)
        args = timestep.float()[..., None] * freqs
        features = torch.cat([args.cos(), args.sin()], dim=-1)
        return self.mlp(features.to(self.mlp[0].weight.dtype))


class ActionEncoder(nn.Module):
    """Per-action MLP; learned `none_action` rows fill the context slots in front."""

    def __init__(self, hidden: int, action_dim: int, num_none_actions: int = 1) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(action_dim, 4 * hidden), nn.SiLU(), nn.Linear(4 * hidden, hidden)
        )
        self.none_action = nn.Embedding(num_none_actions, hidden)

    def forward(
        self,
        actions: torch.Tensor,
        num_frames: int,
        null: torch.Tensor | None = None,
        drop: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """actions [B,n,A] -> per-frame embeddings [B,num_frames,hidden], none rows first; the
        samples flagged in drop [B] get the null embedding [hidden] in place of their actions'."""
        batch, count = actions.shape[:2]
        pad = num_frames - count
        rows = self.none_action.weight
        if pad < 0 or (rows.shape[0] != 1 and rows.shape[0] != pad):
            raise WmrlError(
                f"{count} actions do not fit {num_frames} frames with {rows.shape[0]} "
                f"none-action embedding(s)"
            )
        none = rows.expand(pad, -1) if rows.shape[0] == 1 else rows
        embedded = with_null(self.fc(actions.to(rows.dtype)), null, drop)
        return torch.cat([none[None].expand(batch, -1, -1), embedded], dim=1)


class Attention(nn.Module):
    """Self-attention with q/k RMSNorm and optional RoPE (applied after the norm) and causality."""

    def __init__(self, hidden: int, num_heads: int, qk_norm: bool) -> None:
        super().__init__()
        self.num_heads = num_heads
        head_dim = hidden // num_heads
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=True)
        self.q_norm = RMSNorm(head_dim) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(head_dim) if qk_norm else nn.Identity()
        self.proj = nn.Linear(hidden, hidden)

    def forward(
        self, x: torch.Tensor, rope: RotaryEmbedding | None = None, causal: bool = False
    ) -> torch.Tensor:
        """x [N, L, hidden] -> [N, L, hidden]."""
        n, length, hidden = x.shape
        qkv = self.qkv(x).view(n, length, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = rope(q), rope(k)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.proj(out.transpose(1, 2).reshape(n, length, hidden))


class MultiHeadCrossAttention(nn.Module):
    """Open-Sora's text cross-attention: queries from the tokens, keys/values from the context."""

    def __init__(self, hidden: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.q_linear = nn.Linear(hidden, hidden)
        self.kv_linear = nn.Linear(hidden, 2 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """x [B, N, hidden], context [B, L, hidden] -> [B, N, hidden]."""
        batch, n, hidden = x.shape
        q = self.q_linear(x).view(batch, n, self.num_heads, -1).transpose(1, 2)
        kv = self.kv_linear(context).view(batch, context.shape[1], 2, self.num_heads, -1)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, n, hidden))


class Mlp(nn.Module):
    """timm's Mlp names (fc1, fc2) with tanh-approximated GELU."""

    def __init__(self, hidden: int, inner: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, inner)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(inner, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class STDiT3Block(nn.Module):
    """One spatial or temporal block on tokens laid out [B, T, S, hidden]."""

    def __init__(self, config: STDiT3Config, temporal: bool) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.temporal = temporal
        self.causal = temporal and config.causal_temporal
        self.norm1 = nn.LayerNorm(hidden, eps=1e-6, elementwise_affine=False)
        self.attn = Attention(hidden, config.num_heads, config.qk_norm)
        self.cross_attn = (
            MultiHeadCrossAttention(hidden, config.num_heads) if config.cross_attention else None
        )
        self.norm2 = nn.LayerNorm(hidden, eps=1e-6, elementwise_affine=False)
        self.mlp = Mlp(hidden, int(hidden * config.mlp_ratio))
        self.scale_shift_table = nn.Parameter(torch.randn(6, hidden) / hidden**0.5)

    def forward(
        self,
        x: torch.Tensor,
        modulation: torch.Tensor,
        rope: RotaryEmbedding | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x [B,T,S,C]; modulation [B,T,6,C] (per frame, added to the block's table)."""
        batch, frames, tokens, hidden = x.shape
        mod = (self.scale_shift_table + modulation).unsqueeze(2)  # [B,T,1,6,C]
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mod.unbind(3)

        h = t2i_modulate(self.norm1(x), shift_msa, scale_msa)
        if self.temporal:
            h = h.transpose(1, 2).reshape(batch * tokens, frames, hidden)
            h = self.attn(h, rope=rope, causal=self.causal)
            h = h.view(batch, tokens, frames, hidden).transpose(1, 2)
        else:
            h = self.attn(h.reshape(batch * frames, tokens, hidden))
            h = h.view(batch, frames, tokens, hidden)
        x = x + gate_msa * h

        if self.cross_attn is not None and encoder_hidden_states is not None:
            flat = self.cross_attn(x.reshape(batch, frames * tokens, hidden), encoder_hidden_states)
            x = x + flat.view(batch, frames, tokens, hidden)

        h = self.mlp(t2i_modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x + gate_mlp * h


class T2IFinalLayer(nn.Module):
    """PixArt's final layer: adaLN (shift, scale) from the timestep embedding, then a projection."""

    def __init__(self, hidden: int, patch_volume: int, out_channels: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, eps=1e-6, elementwise_affine=False)
        self.linear = nn.Linear(hidden, patch_volume * out_channels)
        self.scale_shift_table = nn.Parameter(torch.randn(2, hidden) / hidden**0.5)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        """x [B,T,S,C], temb [B,T,C] (or separate shift and scale [B,T,2,C])
        -> [B,T,S,patch_volume*out_channels]."""
        mod = temb.unsqueeze(2) if temb.ndim == 3 else temb
        shift, scale = (self.scale_shift_table + mod).unsqueeze(2).unbind(3)
        return self.linear(t2i_modulate(self.norm_final(x), shift, scale))


# ----------------------------------------------------------------------------------------------
# STDiT3
# ----------------------------------------------------------------------------------------------


class STDiT3(nn.Module):
    """Open-Sora 1.2's spatial-temporal DiT with WMPO's action conditioning (see module doc)."""

    def __init__(self, config: STDiT3Config) -> None:
        super().__init__()
        if config.patch_size[0] != 1:
            raise ConfigError("transformer.patch_size[0] must be 1 (conditioning is per frame)")
        self.config = config
        hidden = config.hidden_size
        self.rope = RotaryEmbedding(config.head_dim)
        self.x_embedder = PatchEmbed3D(config.patch_size, config.in_channels, hidden)
        self.t_embedder = TimestepEmbedder(hidden, config.frequency_embedding_size)
        self.action_embedder = ActionEncoder(hidden, config.action_dim, config.num_none_actions)
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))
        self.spatial_blocks = nn.ModuleList(
            STDiT3Block(config, temporal=False) for _ in range(config.depth)
        )
        self.temporal_blocks = nn.ModuleList(
            STDiT3Block(config, temporal=True) for _ in range(config.depth)
        )
        self.final_layer = T2IFinalLayer(hidden, math.prod(config.patch_size), config.out_channels)
        if config.action_modulation == "all":
            # 6 spatial + 6 temporal + 2 final-layer vectors per frame, from the action alone.
            self.action_adaln = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 14 * hidden))
        if config.action_tokens:
            self.action_token_embedder = ActionTokenEmbedder(2 * config.action_dim, hidden)
        if config.null_action:
            self.null_action_embedding = nn.Parameter(torch.zeros(hidden))
            self.null_action_token = nn.Parameter(torch.zeros(hidden))
        self.gradient_checkpointing = False
        self.initialize_weights()

    def initialize_weights(self) -> None:
        """Open-Sora's init: xavier Linear layers; temporal blocks start as identity maps."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        for block in self.temporal_blocks:
            nn.init.zeros_(block.attn.proj.weight)
            nn.init.zeros_(block.mlp.fc2.weight)
            if block.cross_attn is not None:
                nn.init.zeros_(block.cross_attn.proj.weight)

    def _null(self, name: str) -> torch.Tensor | None:
        return getattr(self, name) if self.config.null_action else None

    def _modulations(
        self,
        timestep: torch.Tensor,
        actions: torch.Tensor | None,
        frames: int,
        frame_mask: torch.Tensor | None,
        context_timestep: float,
        drop: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-frame (spatial [B,T,6,C], temporal [B,T,6,C], final-layer [B,T,C]) conditioning.

        Selecting the context frames' modulation per frame is what WMPO's fork does by selecting
        the blocks' outputs per frame (t2i_modulate and gating are elementwise): the same values.
        One difference, in outputs nobody reads: the fork's final layer modulates the context
        frames twice (its t0 branch re-normalizes the already modulated tokens); here once.
        """
        batch, hidden = timestep.shape[0], self.config.hidden_size
        temb = self.t_embedder(timestep)  # [B,C]
        frame_temb = temb[:, None].expand(batch, frames, hidden)
        embedded = None
        if actions is not None:
            embedded = self.action_embedder(
                actions, frames, self._null("null_action_embedding"), drop
            )
        if self.config.action_modulation == "spatial":
            spatial_in = frame_temb if embedded is None else frame_temb + embedded
            spatial = self.t_block(spatial_in).unflatten(-1, (6, hidden))
            temporal = self.t_block(temb).unflatten(-1, (6, hidden))[:, None]
            temporal = temporal.expand(-1, frames, -1, -1)
            final = frame_temb
        else:  # "all": the timestep's modulation plus an action modulation of its own
            t_mod = self.t_block(temb).unflatten(-1, (6, hidden))[:, None]
            spatial = temporal = t_mod.expand(-1, frames, -1, -1)
            final = frame_temb[:, :, None].expand(-1, -1, 2, -1)
            if embedded is not None:
                a_mod = self.action_adaln(embedded).unflatten(-1, (14, hidden))
                spatial, temporal = spatial + a_mod[:, :, :6], temporal + a_mod[:, :, 6:12]
                final = final + a_mod[:, :, 12:]
        if frame_mask is not None:
            t0 = self.t_embedder(torch.full_like(timestep, context_timestep, dtype=torch.float32))
            t0_mod = self.t_block(t0).unflatten(-1, (6, hidden))[:, None]
            keep = frame_mask.to(torch.bool)[:, :, None, None]
            spatial = torch.where(keep, spatial, t0_mod)
            temporal = torch.where(keep, temporal, t0_mod)
            t0_final = t0[:, None] if final.ndim == 3 else t0[:, None, None]
            final = torch.where(keep[..., 0] if final.ndim == 3 else keep, final, t0_final)
        return spatial, temporal, final

    def forward(
        self,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        actions: torch.Tensor | None = None,
        frame_mask: torch.Tensor | None = None,
        context_timestep: float = WMPO_CONTEXT_TIMESTEP,
        pixel_size: tuple[int, int] | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        drop_actions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """hidden_states [B,C,T,H,W] latents; timestep [B] (0..1000, of the frames to generate);
        actions [B,n,A] (n <= T, aligned with the last n frames); frame_mask [B,T] (True: a frame
        to generate, False: a context frame at `context_timestep`); pixel_size: the video
        resolution, for Open-Sora's position-embedding scale (default: 8x the latent size);
        drop_actions [B] bool: samples that get the null action (needs `null_action`).
        Returns [B, out_channels, T, H, W] in float32 (Open-Sora's velocity x0 - eps first)."""
        batch, _, frames, height, width = hidden_states.shape
        _, p_h, p_w = self.config.patch_size
        if height % p_h or width % p_w:
            raise ValueError(f"latent size {height}x{width} is not a multiple of the patch size")
        grid_h, grid_w = height // p_h, width // p_w
        dtype = self.x_embedder.proj.weight.dtype

        x = self.x_embedder(hidden_states.to(dtype))  # [B,T,S,C]
        pix_h, pix_w = pixel_size or (8 * height, 8 * width)
        scale = math.sqrt(pix_h * pix_w) / self.config.input_sq_size
        pos = sincos_position_embedding_2d(
            self.config.hidden_size,
            grid_h,
            grid_w,
            scale=scale,
            base_size=round(math.sqrt(grid_h * grid_w)),
            device=x.device,
        )
        x = x + pos.to(dtype)
        if self.config.action_tokens and actions is not None:
            tokens = self.action_token_embedder(chunk_action_features(actions))
            tokens = with_null(tokens, self._null("null_action_token"), drop_actions)
            n = actions.shape[1]
            x = torch.cat([x[:, : frames - n], x[:, frames - n :] + tokens[:, :, None]], dim=1)

        spatial, temporal, final = self._modulations(
            timestep, actions, frames, frame_mask, context_timestep, drop_actions
        )
        spatial, temporal, final = spatial.to(dtype), temporal.to(dtype), final.to(dtype)
        for spatial_block, temporal_block in zip(self.spatial_blocks, self.temporal_blocks):
            for block, mod in ((spatial_block, spatial), (temporal_block, temporal)):
                args = (x, mod, self.rope if block.temporal else None, encoder_hidden_states)
                if torch.is_grad_enabled() and self.gradient_checkpointing:
                    x = checkpoint(block, *args, use_reentrant=False)
                else:
                    x = block(*args)

        x = self.final_layer(x, final)  # [B,T,S,(p_t p_h p_w C_out)]
        x = x.reshape(batch, frames, grid_h, grid_w, p_h, p_w, -1)
        x = x.permute(0, 6, 1, 2, 4, 3, 5).reshape(batch, -1, frames, height, width)
        return x.float()


# ----------------------------------------------------------------------------------------------
# The world model
# ----------------------------------------------------------------------------------------------


class OpenSoraWorldModel(WorldModel):
    """Per-frame 2D VAE + action-conditioned STDiT3 behind the `WorldModel` interface.

    The context is kept in latent space between chunks (as RLinf does): `reset_context` encodes
    the K context frames once, every `predict` appends its predicted latents and keeps the last K.
    """

    title = "OpenSora"
    backend = "opensora"
    config_class = OpenSoraWorldModelConfig
    context_state_names = ("_context_latents", "_detail")
    frame_wise_latents = True

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
    def vae_dtype(self) -> torch.dtype:
        return self.vae.post_quant_conv.weight.dtype

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
        with self.autocast():
            mu = self.vae.encode(self._to_vae_input(frames)).latent_dist.mode().float()
        scale, shift = self._latent_affine()
        z = (mu - shift) * scale
        return z.unflatten(0, (batch, count)).transpose(1, 2)

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Scaled latents [B,4,T,h,w] -> uint8 frames [B,T,H,W,3]."""
        batch, _, count = latents.shape[:3]
        scale, shift = self._latent_affine()
        z = latents.transpose(1, 2).flatten(0, 1).float() / scale + shift
        with self.autocast():
            video = self.vae.decode(z.to(self.vae_dtype)).sample
        video = ((video.float().clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8)
        return video.permute(0, 2, 3, 1).unflatten(0, (batch, count))

    def set_latent_scaling(self, scaling_factor: float, shift_factor: float | None = None) -> None:
        """Set the latent normalization z = (mu - shift) * scale (e.g. after training the VAE)."""
        if not scaling_factor > 0:
            raise WmrlError("the latent scaling factor must be positive")
        self.config.vae["scaling_factor"] = float(scaling_factor)
        self.config.vae["shift_factor"] = None if shift_factor is None else float(shift_factor)

    # -- the denoiser -------------------------------------------------------------------------

    def _denoiser_output(
        self,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        context: torch.Tensor,
        actions: torch.Tensor,
        drop_actions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The first in_channels output channels (float32) for the target latents x_t [B,4,C,h,w]
        at noise levels sigma [B], after the context latents [B,4,K,h,w]; drop_actions [B]: the
        samples conditioned on the null action instead."""
        n_ctx, n_tgt = context.shape[2], x_t.shape[2]
        latents = torch.cat([context, x_t], dim=2).to(self.dtype)
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

    def _velocity(
        self, x_t: torch.Tensor, sigma: torch.Tensor, out: torch.Tensor, anchor: torch.Tensor
    ) -> torch.Tensor:
        """flow_matching's v = eps - x0 from the network output (see the module doc)."""
        if not self.config.delta_prediction:
            return -out
        return fm.velocity_from_x0(x_t, anchor + out, sigma.view(-1, 1, 1, 1, 1))

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
        batch = context_latents.shape[0]
        act = check_actions("actions", actions, batch, None, self.action_dim)
        if act.shape[1] == 0:
            raise WmrlError("actions must hold at least one step")
        act = self.normalize_actions(act.to(self.device))
        context = context_latents.to(self.device).float()
        shape = (batch, context.shape[1], act.shape[1], *context.shape[3:])
        noise_device = generator.device if generator is not None else self.device
        noise = torch.randn(shape, generator=generator, device=noise_device).to(self.device)
        anchor = context[:, :, -1:]

        scale = self.config.action_guidance
        null = torch.ones(batch, dtype=torch.bool, device=self.device)

        def velocity_fn(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            v = self._velocity(x, sigma, self._denoiser_output(x, sigma, context, act), anchor)
            if scale == 1.0:
                return v
            out_null = self._denoiser_output(x, sigma, context, act, drop_actions=null)
            return guided(v, self._velocity(x, sigma, out_null, anchor), scale)

        sigmas = fm.inference_sigmas(self.config.num_inference_steps, self.config.flow_shift)
        return fm.euler_sample(velocity_fn, noise, sigmas)

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
        ctx = self._check_reset_inputs(reference_frames, context_frames, context_actions)
        context = self.encode_frames(ctx)
        latents = self.generate_latents(context, actions, generator)
        return self.with_detail(self.decode_latents(latents), self._detail_of(ctx, context))

    def _detail_of(self, ctx: torch.Tensor, context: torch.Tensor) -> torch.Tensor | None:
        """The detail the autoencoder loses of the last real context frame (if carried)."""
        if not self.config.carry_detail:
            return None
        return self.reconstruction_detail(ctx[:, -1], self.decode_latents(context[:, :, -1:])[:, 0])

    def _check_reset_inputs(
        self, reference_frames: TensorLike, context_frames: TensorLike, context_actions: TensorLike
    ) -> torch.Tensor:
        ref = check_frames("reference_frames", reference_frames, 4, self.height, self.width)
        ctx = check_frames("context_frames", context_frames, 5, self.height, self.width)
        batch, k = ctx.shape[:2]
        if ref.shape[0] != batch or k != self.num_context_frames:
            raise WmrlError(
                f"expected {batch} reference frames and {self.num_context_frames} context frames "
                f"per env, got {ref.shape[0]} and {k}"
            )
        check_actions("context_actions", context_actions, batch, k, self.action_dim)
        return ctx

    @torch.no_grad()
    def reset_context(
        self,
        reference_frames: TensorLike,
        context_frames: TensorLike,
        context_actions: TensorLike,
        reference_actions: TensorLike | None = None,
    ) -> None:
        """Encode the K context frames once; the reference frame and actions are not used."""
        ctx = self._check_reset_inputs(reference_frames, context_frames, context_actions)
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

    # -- training -----------------------------------------------------------------------------

    @torch.no_grad()
    def encode_window(
        self, batch: WorldModelBatch | Mapping[str, TensorLike | None]
    ) -> torch.Tensor:
        """Latents [B,4,K+C,h,w] of the [context, target] frames, for caching (no reference)."""
        batch = as_batch(batch)
        if batch.target_frames is None:
            raise WmrlError("encode_window needs target_frames")
        ctx = check_frames("context_frames", batch.context_frames, 5, self.height, self.width)
        tgt = check_frames("target_frames", batch.target_frames, 5, self.height, self.width)
        return self.encode_frames(torch.cat([ctx, tgt], dim=1))

    def forward(
        self,
        batch: WorldModelBatch | Mapping[str, TensorLike | None],
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Rectified-flow loss on the target latents of a batch of windows (scalar, float32)."""
        batch = as_batch(batch)
        ctx_frames = torch.as_tensor(batch.context_frames)
        n, k = ctx_frames.shape[:2]
        if k != self.num_context_frames:
            raise WmrlError(f"expected {self.num_context_frames} context frames, got {k}")
        tgt_act = check_actions("target_actions", batch.target_actions, n, None, self.action_dim)
        chunk = tgt_act.shape[1]
        if chunk == 0:
            raise WmrlError("target_actions must hold at least one step")
        latents = batch.latents if batch.latents is not None else self.encode_window(batch)
        h, w = self.latent_size
        want = (n, self.config.transformer.in_channels, k + chunk, h, w)
        if tuple(latents.shape) != want:
            raise WmrlError(
                f"latents must be {list(want)} for this window, got {list(latents.shape)}"
            )
        latents = latents.to(self.device).float()
        clean_context, x0 = latents[:, :, :k], latents[:, :, k:]

        def randn_like(x: torch.Tensor) -> torch.Tensor:
            draw_device = generator.device if generator is not None else x.device
            return torch.randn(x.shape, generator=generator, device=draw_device).to(x.device)

        # WMPO noises the context at its conditioning timestep (15/1000) during training.
        ctx_sigma = self.config.context_timestep / fm.NUM_TRAIN_TIMESTEPS
        context = clean_context
        if ctx_sigma > 0:
            context = fm.add_noise(clean_context, randn_like(clean_context), ctx_sigma)
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

        act = self.normalize_actions(tgt_act.to(self.device))
        drop = action_dropout_mask(n, self.config.action_dropout, generator, self.device)
        out = self._denoiser_output(x_t, sigma, context, act, drop)
        if self.config.delta_prediction:
            # ||v_hat - v||^2 = ||x0_hat - x0||^2 / sigma^2; the weight is bounded at small sigma.
            # The offset is from the clean last context latent, as at inference.
            return self.delta_prediction_loss(out, x0, clean_context[:, :, -1:], sigma_b)
        return F.mse_loss(-out, fm.velocity_target(x0, noise))

    # -- persistence --------------------------------------------------------------------------

    @classmethod
    def from_state_dict(
        cls, config: OpenSoraWorldModelConfig, state_dict: Mapping[str, torch.Tensor], what: str
    ) -> OpenSoraWorldModel:
        """Build on the meta device (no random init, no second copy of a 1B model) and load.

        The model holds no non-persistent buffers (position tables are computed per call), so
        nothing is left on the meta device after the load.
        """
        with torch.device("meta"):
            model = cls(config)
        load_into(model, state_dict, what=what, assign=True)
        return model
