"""The Wan world model's pieces: the action-conditioned Wan DiT and the Wan2.2-style VAE's
configs (the world model that joins them is in model.py).

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
renames in `converter.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from diffusers.models.normalization import FP32LayerNorm
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed, WanTransformerBlock
from torch import nn
from torch.utils.checkpoint import checkpoint

from wmrl_cli.errors import WmrlError
from wmrl_cli.world_models.action_conditioning import ActionTokenEmbedder, with_null

FRAMES_PER_LATENT = 4  # the Wan VAE's temporal compression (hard-wired in its causal encoder)

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


# ----------------------------------------------------------------------------------------------
# Configs
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
