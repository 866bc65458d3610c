"""What the Wan and OpenSora world models share beneath the interface (interface.py): their
configs' common keys, the rectified-flow training loss, the Euler sampler with action guidance,
the checks of a context, the autoencoder's pixel conversions and the load without a random
initialization.

A backend (wan/model.py, opensora/model.py) supplies its autoencoder (`encode_frames`,
`decode_latents`, `_to_vae_input`) and its denoiser, through five methods:

    _training_actions(batch, n, k) -> (actions, chunk)   a training window's actions, checked
    _check_window_latents(latents, n, chunk)             a training window's latents, checked
    _training_context(latents, noise_like)               -> (conditioning latents with the
                                                         backend's context noise, target
                                                         latents x0, the delta anchor)
    _action_inputs(actions, chunk, drop)                 the denoiser's action arguments, a
                                                         tuple (drop [B]: the samples given the
                                                         null action)
    _denoiser_output(x_t, sigma, cond, *action_inputs)   the network's raw output for x_t

Flow matching's convention (flow_matching.py): x_sigma = (1 - sigma) x0 + sigma eps, v = eps - x0.
With `delta_prediction` the network's output is the clean target as an offset from the last
conditioning latent (x0_hat = anchor + out) and v = (x_sigma - x0_hat) / sigma.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from wmrl_cli.errors import ConfigError, WmrlError
from wmrl_cli.world_models import flow_matching as fm
from wmrl_cli.world_models.action_conditioning import action_dropout_mask, guided
from wmrl_cli.world_models.interface import (
    TensorLike,
    WorldModel,
    WorldModelBatch,
    as_batch,
    check_actions,
    check_frames,
)
from wmrl_cli.world_models.state_dicts import load_into

# ----------------------------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------------------------


def check_config_keys(prefix: str, data: Any, cls: type, title: str) -> None:
    """A config mapping may only hold the dataclass's fields; anything else is a typo."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping")
    unknown = sorted(set(data) - {f.name for f in fields(cls)})
    if unknown:
        raise ConfigError(
            f"unknown {title} world-model config key(s): {[prefix + k for k in unknown]}"
        )


@dataclass
class FlowWorldModelConfig:
    """The keys every backend's config starts with (config.json keeps this order).

    transformer: the denoiser's config (a dataclass of the backend's); vae: the autoencoder's
    constructor kwargs; height / width: the frames; num_context_frames / num_target_frames: a
    training window's K and C; num_inference_steps, flow_shift: the sampler's Euler steps and
    the shift of its noise grid; train_shift, logit_mean, logit_std: the training noise levels
    (logit-normal, then shifted).

    Every backend's config also has these keys, which this module reads (each declares them
    after its own keys, where its config.json has always had them):

    delta_prediction: the network predicts the clean target as an offset from the last context
        latent (see the module doc); off: it predicts the velocity, as the published models.
    carry_detail: add the autoencoder's reconstruction error of the last real context frame to
        every predicted frame (`WorldModel.with_detail`); off for the published models.
    loss_min_sigma: the delta-prediction loss is ||x0_hat - x0||^2 / max(sigma, loss_min_sigma)^2;
        1.0 makes it a plain x0 loss. With small values the low-noise levels dominate, where x0
        can be read off the noisy input and the actions are not needed: an OpenSora model
        trained so beat the copy baseline with an action gap of 0.00 dB (it ignored its
        actions); 500 more steps at 1.0 gave +0.05..0.07 dB and +0.6 dB of open-loop PSNR
        (docs/benchmarks.md).
    motion_loss_weight: see `flow_matching.delta_prediction_loss`.
    action_dropout: in training, the probability that a window's actions are replaced by the
        null action (needs transformer.null_action). action_guidance: the sampler's action
        guidance scale (1.0: plain conditioning). guidance_distilled: the scale whose guided
        velocity the conditioned pass alone was trained to give (`GuidanceTeacher`; None: not
        distilled): such a model samples guided at that scale in one pass, action_guidance 1.
    """

    transformer: Any = None
    vae: dict[str, Any] = field(default_factory=dict)
    height: int = 256
    width: int = 256
    num_context_frames: int = 4
    num_target_frames: int = 8
    num_inference_steps: int = 10
    flow_shift: float = 1.0
    train_shift: float = 1.0
    logit_mean: float = 0.0
    logit_std: float = 1.0

    transformer_class: ClassVar[type]
    title: ClassVar[str]  # for messages: "Wan", "OpenSora"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Any:
        """Rebuild the config (config.json) with its nested transformer config."""
        check_config_keys("", data, cls, cls.title)
        values = dict(data)
        if "transformer" in values:
            transformer_cls = cls.transformer_class
            check_config_keys("transformer.", values["transformer"], transformer_cls, cls.title)
            tcfg = dict(values["transformer"])
            if "patch_size" in tcfg:
                tcfg["patch_size"] = tuple(tcfg["patch_size"])
            values["transformer"] = transformer_cls(**tcfg)
        if "vae" in values:
            values["vae"] = dict(values["vae"])
        return cls(**values)


# ----------------------------------------------------------------------------------------------
# The world model
# ----------------------------------------------------------------------------------------------


@dataclass
class GuidanceTeacher:
    """A frozen world model whose action-guided velocity a student learns to give in one pass
    (the guidance stage of Meng et al., "On Distillation of Guided Diffusion Models", CVPR 2023,
    at one fixed scale): the student is trained on the noised training windows to match
    v_null + scale (v_actions - v_null) of the teacher, then samples with action_guidance 1 at
    half the denoiser passes (`train-wm --init TEACHER --set world_model.distill_guidance=true`).
    """

    model: FlowWorldModel
    scale: float

    @torch.no_grad()
    def velocity(
        self,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: torch.Tensor,
        anchor: torch.Tensor,
        actions: torch.Tensor,
        chunk: int,
    ) -> torch.Tensor:
        """The teacher's guided velocity for the student's noised targets x_t at sigma [B]."""
        model = self.model
        every = torch.ones(x_t.shape[0], dtype=torch.bool, device=x_t.device)
        embedded = model._action_inputs(actions, chunk, None)
        null = model._action_inputs(actions, chunk, every)
        return model._guided_velocity(x_t, sigma, cond, anchor, embedded, null, self.scale)


class FlowWorldModel(WorldModel):
    """A latent rectified-flow world model: an autoencoder and an action-conditioned denoiser.

    Training (`model(batch)` is the loss): the window is encoded without gradients (the
    autoencoder trains on its own with `autoencoder_loss`; cache `encode_window`'s latents to
    skip it), the context latents are noised as the backend does, the target latents at a
    logit-normal level, and the loss is the velocity error on the target latents only (with
    `delta_prediction`, the x0 error weighted as `flow_matching.delta_prediction_loss`).
    `transformer.gradient_checkpointing = True` trades compute for memory.
    """

    config: Any  # the backend's FlowWorldModelConfig
    transformer: torch.nn.Module
    # Video frames per latent frame of a chunk: Wan's causal VAE packs 4, a per-frame VAE 1.
    frames_per_latent: ClassVar[int] = 1
    # The network's raw output is x0 - eps (Open-Sora's velocity) rather than v = eps - x0.
    negated_output: ClassVar[bool] = False
    # The episode's reference frame is encoded with each window (Wan) rather than unused.
    reference_in_window: ClassVar[bool] = False

    @property
    def vae_dtype(self) -> torch.dtype:
        return self.vae.post_quant_conv.weight.dtype

    def compile_for_imagination(self) -> None:
        """torch.compile the denoiser and the autoencoder's decoder in place, for inference:
        `nn.Module.compile` keeps the parameters' names, so nothing a checkpoint reads changes.
        On a CPU without native bf16 the decoder gains most (1.8x, against 1.3x for the
        denoiser: docs/benchmarks.md). The first chunk at each new batch size compiles;
        training stays eager (the backward pass gains little, and a changed batch recompiles)."""
        self.transformer.compile()
        self.vae.decoder.compile()

    # -- the autoencoder's pixels ---------------------------------------------------------------

    def _vae_batches(self, x: torch.Tensor, rows_per_env: int = 1) -> tuple[torch.Tensor, ...]:
        """`x` split along dim 0 into the rows of `vae_batch` envs each (all of it where unset):
        the decode's working set grows with every env it takes at once."""
        return (x,) if self.vae_batch is None else x.split(self.vae_batch * rows_per_env)

    def _posterior_means(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames -> the VAE posterior's means, float32, in the VAE's own layout."""
        with self.autocast():
            return torch.cat(
                [
                    self.vae.encode(self._to_vae_input(part)).latent_dist.mode().float()
                    for part in self._vae_batches(frames)
                ]
            )

    def _decoded_pixels(self, z: torch.Tensor, rows_per_env: int = 1) -> torch.Tensor:
        """Unnormalized latents (`rows_per_env` rows each env: a per-frame VAE's frames) -> the
        decoded frames as uint8, in the VAE's own layout."""
        parts = []
        for part in self._vae_batches(z, rows_per_env):
            with self.autocast():
                video = self.vae.decode(part.to(self.vae_dtype)).sample
            parts.append(((video.float().clamp(-1.0, 1.0) + 1.0) * 127.5).round().to(torch.uint8))
        return torch.cat(parts)

    # -- context ----------------------------------------------------------------------------------

    def _check_context(
        self, reference_frames: TensorLike, context_frames: TensorLike, context_actions: TensorLike
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(reference [B,H,W,3], context [B,K,H,W,3], context actions [B,K,A]), checked."""
        ref = check_frames("reference_frames", reference_frames, 4, self.height, self.width)
        ctx = check_frames("context_frames", context_frames, 5, self.height, self.width)
        batch, k = ctx.shape[:2]
        if ref.shape[0] != batch or k != self.num_context_frames:
            raise WmrlError(
                f"expected {batch} reference frames and {self.num_context_frames} context frames "
                f"per env, got {ref.shape[0]} and {k}"
            )
        ctx_act = check_actions("context_actions", context_actions, batch, k, self.action_dim)
        return ref, ctx, ctx_act

    def _check_reference_actions(
        self, reference_actions: TensorLike | None, batch: int
    ) -> torch.Tensor | None:
        """The reference frames' actions [B,A] as given (None: the backend's default)."""
        if reference_actions is None:
            return None
        ref_act = torch.as_tensor(reference_actions)
        if tuple(ref_act.shape) != (batch, self.action_dim):
            raise WmrlError(
                f"reference_actions must have shape [{batch},{self.action_dim}], "
                f"got {list(ref_act.shape)}"
            )
        return ref_act

    # -- the denoiser -----------------------------------------------------------------------------

    def _raw_velocity(self, out: torch.Tensor) -> torch.Tensor:
        return -out if self.negated_output else out

    def _velocity(
        self, x_t: torch.Tensor, sigma: torch.Tensor, out: torch.Tensor, anchor: torch.Tensor
    ) -> torch.Tensor:
        """flow_matching's v = eps - x0 from the network's output (see the module doc)."""
        if not self.config.delta_prediction:
            return self._raw_velocity(out)
        return fm.velocity_from_x0(x_t, anchor + out, sigma.view(-1, 1, 1, 1, 1))

    def delta_prediction_loss(
        self, out: torch.Tensor, x0: torch.Tensor, anchor: torch.Tensor, sigma: torch.Tensor
    ) -> torch.Tensor:
        """Training loss of a delta-prediction model (x0_hat = anchor + out), weighted as its
        config says: `loss_min_sigma`, `motion_loss_weight` (flow_matching's function)."""
        return fm.delta_prediction_loss(
            anchor + out,
            x0,
            anchor,
            sigma,
            self.config.loss_min_sigma,
            self.config.motion_loss_weight,
        )

    # -- inference --------------------------------------------------------------------------------

    def _sample_targets(
        self,
        cond: torch.Tensor,
        actions: torch.Tensor,
        chunk: int,
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """Euler-sample the latents [B,z,chunk/frames_per_latent,h,w] of a chunk's frames after
        the conditioning latents cond [B,z,F,h,w], guided on the actions when
        `action_guidance` != 1 (v_null + w (v - v_null), the null action's pass beside)."""
        batch = cond.shape[0]
        embedded = self._action_inputs(actions, chunk, None)
        scale = self.config.action_guidance
        null = None
        if scale != 1.0:
            every = torch.ones(batch, dtype=torch.bool, device=self.device)
            null = self._action_inputs(actions, chunk, every)
        anchor = cond[:, :, -1:]
        shape = (batch, cond.shape[1], chunk // self.frames_per_latent, *cond.shape[3:])
        noise_device = generator.device if generator is not None else self.device
        noise = torch.randn(shape, generator=generator, device=noise_device).to(self.device)

        def velocity_fn(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
            return self._guided_velocity(x, sigma, cond, anchor, embedded, null, scale)

        sigmas = fm.inference_sigmas(self.config.num_inference_steps, self.config.flow_shift)
        return fm.euler_sample(velocity_fn, noise, sigmas)

    def _guided_velocity(
        self,
        x: torch.Tensor,
        sigma: torch.Tensor,
        cond: torch.Tensor,
        anchor: torch.Tensor,
        embedded: tuple[Any, ...],
        null: tuple[Any, ...] | None,
        scale: float,
    ) -> torch.Tensor:
        """v for x at sigma [B]: the conditioned pass's, guided at `scale` on the null action's
        pass where `null` (its action inputs) is given."""
        v = self._velocity(x, sigma, self._denoiser_output(x, sigma, cond, *embedded), anchor)
        if null is None:
            return v
        v_null = self._velocity(x, sigma, self._denoiser_output(x, sigma, cond, *null), anchor)
        return guided(v, v_null, scale)

    # -- training ---------------------------------------------------------------------------------

    @torch.no_grad()
    def encode_window(
        self, batch: WorldModelBatch | Mapping[str, TensorLike | None]
    ) -> torch.Tensor:
        """The latents of a window's frames ([reference,] context, target), for caching."""
        batch = as_batch(batch)
        if batch.target_frames is None:
            raise WmrlError("encode_window needs target_frames")
        h, w = self.height, self.width
        frames = []
        if self.reference_in_window:
            ref = check_frames("reference_frames", batch.reference_frames, 4, h, w)
            frames.append(ref[:, None])
        frames.append(check_frames("context_frames", batch.context_frames, 5, h, w))
        frames.append(check_frames("target_frames", batch.target_frames, 5, h, w))
        return self.encode_frames(torch.cat(frames, dim=1))

    def forward(
        self,
        batch: WorldModelBatch | Mapping[str, TensorLike | None],
        generator: torch.Generator | None = None,
        teacher: GuidanceTeacher | None = None,
    ) -> torch.Tensor:
        """The flow-matching loss on the target latents of a batch of windows (scalar, float32);
        with a `teacher`, the guidance-distillation loss (`GuidanceTeacher`) on the same noised
        windows."""
        batch = as_batch(batch)
        n, k = torch.as_tensor(batch.context_frames).shape[:2]
        if k != self.num_context_frames:
            raise WmrlError(f"expected {self.num_context_frames} context frames, got {k}")
        actions, chunk = self._training_actions(batch, n, k)
        latents = batch.latents if batch.latents is not None else self.encode_window(batch)
        self._check_window_latents(latents, n, chunk)
        latents = latents.to(self.device).float()

        def noise_like(x: torch.Tensor) -> torch.Tensor:
            draw_device = generator.device if generator is not None else x.device
            return torch.randn(x.shape, generator=generator, device=draw_device).to(x.device)

        cond, x0, anchor = self._training_context(latents, noise_like)
        sigma = fm.sample_training_sigmas(
            n,
            logit_mean=self.config.logit_mean,
            logit_std=self.config.logit_std,
            shift=self.config.train_shift,
            generator=generator,
            device=self.device,
        )
        sigma_b = sigma.view(-1, 1, 1, 1, 1)
        noise = noise_like(x0)
        x_t = fm.add_noise(x0, noise, sigma_b)
        if teacher is not None:
            target = teacher.velocity(x_t, sigma, cond, anchor, actions, chunk)
            out = self._denoiser_output(
                x_t, sigma, cond, *self._action_inputs(actions, chunk, None)
            )
            if self.config.delta_prediction:  # the guided velocity's x0, weighted as in training
                return self.delta_prediction_loss(out, x_t - sigma_b * target, anchor, sigma_b)
            return F.mse_loss(self._raw_velocity(out), target)
        drop = action_dropout_mask(n, self.config.action_dropout, generator, self.device)
        out = self._denoiser_output(x_t, sigma, cond, *self._action_inputs(actions, chunk, drop))
        if self.config.delta_prediction:
            # ||v_hat - v||^2 = ||x0_hat - x0||^2 / sigma^2; the weight is bounded at small sigma.
            return self.delta_prediction_loss(out, x0, anchor, sigma_b)
        return F.mse_loss(self._raw_velocity(out), fm.velocity_target(x0, noise))

    # -- what a backend supplies ------------------------------------------------------------------

    @abstractmethod
    def _training_actions(self, batch: WorldModelBatch, n: int, k: int) -> tuple[torch.Tensor, int]:
        """(the actions the denoiser is conditioned on, the chunk length) of a training batch."""

    @abstractmethod
    def _check_window_latents(self, latents: torch.Tensor, n: int, chunk: int) -> None:
        """Reject latents of another shape than this window's."""

    @abstractmethod
    def _training_context(
        self, latents: torch.Tensor, noise_like: Callable[[torch.Tensor], torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(conditioning latents, noised as in training; target latents x0; the anchor the
        delta-prediction loss measures from) of a window's latents."""

    @abstractmethod
    def _action_inputs(
        self, actions: torch.Tensor, chunk: int, drop: torch.Tensor | None
    ) -> tuple[Any, ...]:
        """The action arguments of `_denoiser_output` (computed once per sample, not per
        step); the samples flagged in drop [B] get the null action."""

    @abstractmethod
    def _denoiser_output(
        self, x_t: torch.Tensor, sigma: torch.Tensor, cond: torch.Tensor, *action_inputs: Any
    ) -> torch.Tensor:
        """The network's raw output (float32) for the target latents x_t at noise levels
        sigma [B], after the conditioning latents."""

    # -- persistence ------------------------------------------------------------------------------

    @classmethod
    def from_state_dict(
        cls, config: Any, state_dict: Mapping[str, torch.Tensor], what: str
    ) -> FlowWorldModel:
        """Build on the meta device (no random init, no second copy of a large model) and load."""
        with torch.device("meta"):
            model = cls(config)
        load_into(model, state_dict, what=what, assign=True)
        model._materialize_buffers()
        return model

    def _materialize_buffers(self) -> None:
        """Recompute the non-persistent buffers the meta device left empty (none here)."""
