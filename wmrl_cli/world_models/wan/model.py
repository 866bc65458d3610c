"""The Wan world model (WoVR / RLinf `wan_wm`): Wan2.2 VAE + Wan DiT with action conditioning.

Read top to bottom: the config, then the world model that wraps VAE + transformer (blocks.py)
into the `WorldModel` interface (predict, training loss, save/load); the flow-matching loss and
sampler they share with OpenSora are in ../base.py.

Window layout (RLinf): 1 reference frame (the episode's first frame) + K = 4 context frames +
C = 8 target frames = 13 frames. The Wan VAE compresses time causally, 1 + 4k frames -> 1 + k
latent frames, so the window is 4 latent frames: [reference, context, target, target]. The first
1 + K/4 latent frames are clean conditioning (timestep 0); the rest are denoised.

Prediction parameterisations (`delta_prediction`):
  * False (RLinf-compatible): the network output is the velocity v = eps - x0.
  * True: the network output is the clean target latents as an offset from the last context
    latent frame, x0_hat = z_ctx + out, and v = (x_sigma - x0_hat) / sigma. With the output
    projection zero-initialised an untrained model reproduces the context latent, i.e. starts at
    the copy-the-last-frames baseline instead of at noise. Sampler and loss use the same v.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from diffusers import AutoencoderKLWan
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed, WanTransformer3DModel
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
from wmrl_cli.world_models.wan.blocks import (
    FRAMES_PER_LATENT,
    ActionEmbeddings,
    WanActionTransformer,
    WanTransformerConfig,
    tiny_vae_config,
    wan22_vae_config,
)

# RLinf's fork noises the context latent at index 950 of the 1000-step shift-5 training grid
# while telling the model t = 0: sigma = shift(0.05, 5) = 0.25 / 1.2.
RLINF_CONTEXT_NOISE_SIGMA = 0.2083


# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------


@dataclass
class WanWorldModelConfig(FlowWorldModelConfig):
    """Everything needed to build a `WanWorldModel`; saved as config.json beside the weights.

    context_noise_sigma: noise level injected into the non-reference context latents during
    training (the model is still told t = 0 there), for robustness to its own imperfect
    context at rollout time. The keys shared with OpenSora: `base.FlowWorldModelConfig`.
    """

    transformer_class: ClassVar[type] = WanTransformerConfig
    title: ClassVar[str] = "Wan"

    transformer: WanTransformerConfig = field(default_factory=WanTransformerConfig)
    vae: dict[str, Any] = field(default_factory=wan22_vae_config)
    num_inference_steps: int = 5
    flow_shift: float = 5.0
    train_shift: float = 5.0
    context_noise_sigma: float = RLINF_CONTEXT_NOISE_SIGMA
    delta_prediction: bool = False
    carry_detail: bool = False  # off for the published models
    # The action paired with the reference frame when the caller gives none (None: zeros).
    # RLinf keeps zeros with the gripper open (-1) there, and never updates it.
    reference_action: list[float] | None = field(
        default_factory=lambda: [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]
    )
    loss_min_sigma: float = 1.0
    motion_loss_weight: float = 0.0
    action_dropout: float = 0.0
    action_guidance: float = 1.0
    guidance_distilled: float | None = None  # base.GuidanceTeacher
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
    validate_action_options(
        config.action_dropout, config.action_guidance, t.null_action, config.guidance_distilled
    )
    if config.reference_action is not None and len(config.reference_action) != t.action_dim:
        raise ConfigError(
            f"reference_action must have transformer.action_dim ({t.action_dim}) values"
        )


# ----------------------------------------------------------------------------------------------
# The world model
# ----------------------------------------------------------------------------------------------


class WanWorldModel(FlowWorldModel):
    """VAE + action-conditioned Wan DiT behind the `WorldModel` interface.

    Context is kept in pixel space and re-encoded with the reference frame at every chunk, as
    RLinf does: the VAE encodes [reference, K context frames] into 1 + K/4 latent frames, the DiT
    denoises C/4 target latent frames next to them, and the VAE decodes all of them (its causal
    decoder needs the history) of which the last C frames are returned.

    Training (base.FlowWorldModel): the non-reference context latents get noise of level
    `context_noise_sigma` (the model is still told t = 0 there).
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
    frames_per_latent = FRAMES_PER_LATENT
    reference_in_window = True
    # In float32 under bf16 weights: what diffusers keeps so in its Wan DiT, whose module names
    # the denoiser shares (RoPE tables, time embedder, modulation tables, the blocks' norms;
    # RLinf's DiffSynth computes RoPE in float64), and the latent statistics (the VAE: none)
    keep_in_fp32: ClassVar[dict[str, tuple[str, ...]]] = {
        "transformer": tuple(WanTransformer3DModel._keep_in_fp32_modules),
        "": ("latents_mean", "latents_std"),
    }

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
        mu = self._posterior_means(frames)
        return (mu - self.latents_mean) / self.latents_std if normalize else mu

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Normalized latents [B,z,F,h,w] -> uint8 frames [B,1+4(F-1),H,W,3]."""
        z = latents.float() * self.latents_std + self.latents_mean
        return self._decoded_pixels(z).permute(0, 2, 3, 4, 1)

    def set_latent_statistics(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Set the per-channel latent normalization (e.g. measured after training the VAE)."""
        z_dim = self.config.vae["z_dim"]
        mean, std = torch.as_tensor(mean).flatten().float(), torch.as_tensor(std).flatten().float()
        if mean.numel() != z_dim or std.numel() != z_dim or bool((std <= 0).any()):
            raise WmrlError(f"latent statistics need {z_dim} means and {z_dim} positive stds")
        self.config.vae["latents_mean"] = mean.tolist()
        self.config.vae["latents_std"] = std.tolist()
        self._autoencoder_changed()

    def _autoencoder_changed(self) -> None:
        self.latents_mean = self._stat("latents_mean").to(self.device)
        self.latents_std = self._stat("latents_std").to(self.device)

    # -- the denoiser -------------------------------------------------------------------------

    def _window_actions(
        self,
        reference_actions: TensorLike | None,
        context_actions: torch.Tensor,
        target_actions: torch.Tensor,
    ) -> torch.Tensor:
        """The window's 1 + K + C actions [B,T,A], the reference frame's first (its default:
        `config.reference_action`)."""
        batch = context_actions.shape[0]
        reference_actions = self._check_reference_actions(reference_actions, batch)
        if reference_actions is None:
            default = self.config.reference_action or [0.0] * self.action_dim
            reference_actions = torch.tensor(default).expand(batch, -1)
        parts = [
            reference_actions.float()[:, None],
            context_actions.float(),
            target_actions.float(),
        ]
        return torch.cat([p.to(self.device) for p in parts], dim=1).to(self.dtype)

    def _action_inputs(
        self, actions: torch.Tensor, chunk: int, drop: torch.Tensor | None
    ) -> tuple[ActionEmbeddings]:
        return (self.transformer.embed_actions(actions, chunk, drop),)

    def _denoiser_output(
        self,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: torch.Tensor,
        actions: ActionEmbeddings,
    ) -> torch.Tensor:
        """Raw network output (float32) for the target latents x_t at noise levels sigma [B]."""
        n_cond, n_tgt = cond.shape[2], x_t.shape[2]
        latents = torch.cat([cond, x_t], dim=2).to(self.dtype)
        timestep = torch.cat(
            [
                torch.zeros(x_t.shape[0], n_cond, device=x_t.device),
                self._timestep(sigma)[:, None].expand(-1, n_tgt),
            ],
            dim=1,
        )
        a = actions
        with self.autocast():
            out = self.transformer(latents, timestep, a.context, a.modulation, a.tokens)
        return out[:, :, n_cond:].float()

    def _timestep(self, sigma: torch.Tensor) -> torch.Tensor:
        t = fm.sigma_to_timestep(sigma.float())
        return t.to(torch.bfloat16).float() if self.config.bf16_timesteps else t

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
        ref, ctx, ctx_act = self._check_context(reference_frames, context_frames, context_actions)
        act = check_actions("actions", actions, ctx.shape[0], None, self.action_dim)
        chunk = act.shape[1]
        if chunk == 0 or chunk % FRAMES_PER_LATENT:
            raise WmrlError(f"chunk length must be a positive multiple of 4, got {chunk}")
        cond = self.encode_frames(torch.cat([ref[:, None], ctx], dim=1))
        window_actions = self._window_actions(reference_actions, ctx_act, act)
        target = self._sample_targets(cond, window_actions, chunk, generator)
        return self.decode_latents(torch.cat([cond, target], dim=2))

    def reset_context(
        self,
        reference_frames: TensorLike,
        context_frames: TensorLike,
        context_actions: TensorLike,
        reference_actions: TensorLike | None = None,
    ) -> None:
        ref, ctx, ctx_act = self._check_context(reference_frames, context_frames, context_actions)
        ref_act = self._check_reference_actions(reference_actions, ctx.shape[0])
        device = self.device
        self._reference = ref.to(device).clone()
        self._context_frames = ctx.to(device).clone()
        self._context_actions = ctx_act.to(device).clone()
        self._reference_actions = None if ref_act is None else ref_act.float().to(device).clone()
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

    # -- training (the loss: base.FlowWorldModel.forward) -------------------------------------

    def _training_actions(self, batch: WorldModelBatch, n: int, k: int) -> tuple[torch.Tensor, int]:
        ctx_act = check_actions("context_actions", batch.context_actions, n, k, self.action_dim)
        tgt_act = check_actions("target_actions", batch.target_actions, n, None, self.action_dim)
        chunk = tgt_act.shape[1]
        if chunk == 0 or chunk % FRAMES_PER_LATENT:
            raise WmrlError(f"target length must be a positive multiple of 4, got {chunk}")
        return self._window_actions(batch.reference_actions, ctx_act, tgt_act), chunk

    def _check_window_latents(self, latents: torch.Tensor, n: int, chunk: int) -> None:
        n_cond, n_tgt = self.num_cond_latents, chunk // FRAMES_PER_LATENT
        if latents.ndim != 5 or latents.shape[0] != n or latents.shape[2] != n_cond + n_tgt:
            raise WmrlError(
                f"latents must be [B,z,{n_cond + n_tgt},h,w] for this window, "
                f"got {list(latents.shape)}"
            )

    def _training_context(
        self, latents: torch.Tensor, noise_like: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The reference latent stays clean; the anchor is the noised last context latent."""
        n_cond = self.num_cond_latents
        cond, x0 = latents[:, :, :n_cond], latents[:, :, n_cond:]
        sigma_ctx = self.config.context_noise_sigma
        if sigma_ctx > 0 and n_cond > 1:
            noisy = fm.add_noise(cond[:, :, 1:], noise_like(cond[:, :, 1:]), sigma_ctx)
            cond = torch.cat([cond[:, :, :1], noisy], dim=2)
        return cond, x0, cond[:, :, -1:]

    # -- persistence --------------------------------------------------------------------------

    def _materialize_buffers(self) -> None:
        """Recompute the non-persistent buffers (RoPE tables, latent statistics) on the CPU."""
        t = self.config.transformer
        self.transformer.rope = WanRotaryPosEmbed(
            t.attention_head_dim, t.patch_size, t.rope_max_seq_len
        )
        self.latents_mean = self._stat("latents_mean")
        self.latents_std = self._stat("latents_std")
