"""STDiT3 (Open-Sora 1.2) with WMPO's action conditioning: the OpenSora world model's denoiser
and its building blocks (the world model that joins it with the VAE is in model.py).

STDiT3: each of `depth` layers is a spatial block (attention over the h*w tokens of one frame,
2D sin-cos position embedding) then a temporal block (attention over the frames at one position,
RoPE, causal for the world model). A block is adaLN self-attention -> (optional cross-attention)
-> adaLN MLP, modulated by a shared `t_block` (SiLU, Linear -> 6*hidden) plus a per-block
`scale_shift_table` (6, hidden): t2i_modulate x*(1+scale)+shift and gated residuals.

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

STDiT3's raw output is Open-Sora's velocity x0 - eps (8 channels with pred_sigma; the first 4 are
used by the world model).

Module and parameter names follow Open-Sora's `STDiT3` and WMPO's fork (`x_embedder.proj`,
`t_embedder.mlp`, `t_block.1`, `action_embedder.fc`, `action_embedder.none_action`, `rope.freqs`,
`spatial_blocks.N.attn.qkv`, `...attn.q_norm`, `...mlp.fc1`, `...scale_shift_table`,
`final_layer.linear`, ...) so that their safetensors load by name (`converter.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.world_models.action_conditioning import (
    ActionTokenEmbedder,
    chunk_action_features,
    with_null,
)

WMPO_CONTEXT_TIMESTEP = 15.0  # timestep (of 1000) of the context frames in WMPO's fork


# ----------------------------------------------------------------------------------------------
# Config
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


# ----------------------------------------------------------------------------------------------
# Building blocks
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
