"""The world-model interface shared by the Wan and OpenSora backends (ARCHITECTURE.md).

A world model replaces the simulator during RL. Per environment it holds a reference frame (the
episode's first frame, never updated), K context frames and the actions that produced them. Given
a chunk of C new actions it predicts the next C frames, then rolls the context forward: the last
K predicted frames and their actions become the new context.

Action convention: ``actions[:, i]`` is the action that produced frame i (the action executed
while frame i-1 was observed). Context actions belong to context frames, chunk actions to the
frames predicted from them. The reference frame has no producing action; backends that need one
take ``reference_actions`` (default: the backend's configured constant, e.g. zeros).

Frames are uint8 RGB [..., H, W, 3]; actions are float in the policy's (normalized) action space.
"""

from __future__ import annotations

import contextlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_dir

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"

TensorLike = torch.Tensor | np.ndarray


@dataclass
class WorldModelBatch:
    """One batch of training windows.

    reference_frames uint8 [B,H,W,3]; context_frames uint8 [B,K,H,W,3]; context_actions [B,K,A];
    target_frames uint8 [B,C,H,W,3]; target_actions [B,C,A]; reference_actions [B,A] (optional,
    the backend's default when absent). ``latents`` optionally carries the window already
    encoded by the backend's autoencoder (see ``encode_window``), so that a trainer can cache it
    and skip the encoder.
    """

    reference_frames: torch.Tensor
    context_frames: torch.Tensor
    context_actions: torch.Tensor
    target_frames: torch.Tensor | None
    target_actions: torch.Tensor
    reference_actions: torch.Tensor | None = None
    latents: torch.Tensor | None = None

    @classmethod
    def from_mapping(cls, batch: Mapping[str, TensorLike | None]) -> WorldModelBatch:
        """Build from a dict (what a DataLoader's default collate returns); names as the fields."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(batch) - names)
        if unknown:
            raise WmrlError(
                f"world-model batch has unknown keys {unknown}; expected {sorted(names)}"
            )
        missing = sorted(
            n
            for n in ("reference_frames", "context_frames", "context_actions", "target_actions")
            if batch.get(n) is None
        )
        if missing:
            raise WmrlError(f"world-model batch is missing {missing}")
        if batch.get("target_frames") is None and batch.get("latents") is None:
            raise WmrlError("world-model batch needs target_frames or precomputed latents")
        values = {n: batch.get(n) for n in names}
        return cls(**{k: (None if v is None else torch.as_tensor(v)) for k, v in values.items()})

    def to(self, device: torch.device | str) -> WorldModelBatch:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return WorldModelBatch(**{k: None if v is None else v.to(device) for k, v in moved.items()})


def as_batch(batch: WorldModelBatch | Mapping[str, TensorLike | None]) -> WorldModelBatch:
    return batch if isinstance(batch, WorldModelBatch) else WorldModelBatch.from_mapping(batch)


def check_frames(name: str, frames: TensorLike, ndim: int, height: int, width: int) -> torch.Tensor:
    """A uint8 [..., H, W, 3] tensor with `ndim` dimensions, or a one-line WmrlError."""
    frames = torch.as_tensor(frames)
    if frames.dtype != torch.uint8:
        raise WmrlError(f"{name} must be uint8 RGB frames, got dtype {frames.dtype}")
    if frames.ndim != ndim or tuple(frames.shape[-3:]) != (height, width, 3):
        want = "[B," + ("K," if ndim == 5 else "") + f"{height},{width},3]"
        raise WmrlError(f"{name} must have shape {want}, got {list(frames.shape)}")
    return frames


def check_actions(
    name: str, actions: TensorLike, batch: int, length: int | None, dim: int
) -> torch.Tensor:
    """A float [B, T, A] tensor (T == length unless length is None), or a one-line WmrlError."""
    actions = torch.as_tensor(actions)
    if not actions.is_floating_point():
        raise WmrlError(f"{name} must be a float tensor, got dtype {actions.dtype}")
    ok = actions.ndim == 3 and actions.shape[0] == batch and actions.shape[2] == dim
    if not ok or (length is not None and actions.shape[1] != length):
        want = f"[{batch},{length if length is not None else 'T'},{dim}]"
        raise WmrlError(f"{name} must have shape {want}, got {list(actions.shape)}")
    return actions.float()


def moving_pixels(frames: torch.Tensor, threshold: int = 12) -> torch.Tensor:
    """uint8 clips [B,T,H,W,3] -> bool [B,T,H,W]: the region the clip's motion sweeps, the
    pixels whose value changes by more than `threshold` levels in some channel over the clip
    (the same region in every frame: where the dot or the arm is, was or will be, as opposed
    to the static scene)."""
    spread = frames.amax(dim=1).to(torch.int16) - frames.amin(dim=1).to(torch.int16)
    swept = spread.amax(dim=-1) > threshold  # [B,H,W]
    return swept.unsqueeze(1).expand(-1, frames.shape[1], -1, -1)


def kept_in_float32(name: str, keep: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether the parameter or buffer `name` (dotted, from the world model) stays float32:
    `keep` maps a submodule's attribute name ("" for the model's own tensors) to module names
    of which one must be a component of the name below it, diffusers' rule for
    `_keep_in_fp32_modules` (`load_model_dict_into_meta`), applied per submodule."""
    head, _, rest = name.partition(".")
    for submodule, modules in keep.items():
        inner = name if not submodule else rest if head == submodule else ""
        if inner and any(part in modules for part in inner.split(".")):
            return True
    return False


class WorldModel(nn.Module, ABC):
    """An action-conditioned video model that stands in for the simulator.

    ``forward(batch)`` returns the training loss, so that a trainer wrapping the model in DDP /
    Accelerate gets gradients through ``model(batch)``; ``training_loss`` is the same call.
    """

    action_dim: int
    num_context_frames: int
    # The per-env state that `reset_context` sets and `predict` reads and rolls (tensors with
    # the env on dim 0, or None): what `onload` moves and `predict_active` subsets.
    context_state_names: ClassVar[tuple[str, ...]] = ()
    height: int
    width: int
    # A runtime setting, not saved with the weights: torch.bfloat16 runs the forward passes of
    # the denoiser and the autoencoder under autocast (weights, sampler state and losses stay
    # float32); None runs them in the weights' dtype (`runtime.resolve_precision`).
    autocast_dtype: torch.dtype | None = None
    # the most samples one VAE encode or decode takes (None: all): `world_model.vae_batch`
    vae_batch: int | None = None
    # What stays float32 when the weights are cast to bf16 (`cast`; `kept_in_float32`)
    keep_in_fp32: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    def cast(self, dtype: torch.dtype) -> WorldModel:
        """The floating parameters and buffers in `dtype`, those `keep_in_fp32` names in
        float32, as diffusers loads a model with a `torch_dtype` (a plain `.to(dtype)` would
        round the RoPE tables, the time embedder, the modulation tables and the norms)."""
        for module_name, module in self.named_modules():
            prefix = f"{module_name}." if module_name else ""
            tensors = [
                *module.named_parameters(recurse=False),
                *module.named_buffers(recurse=False),
            ]
            for name, tensor in tensors:
                if not tensor.is_floating_point():
                    continue
                kept = kept_in_float32(prefix + name, self.keep_in_fp32)
                cast = tensor.data.to(torch.float32 if kept else dtype)
                if isinstance(tensor, nn.Parameter):
                    tensor.data = cast
                else:
                    setattr(module, name, cast)
        return self

    def place(self, device: Any = None, dtype: torch.dtype | None = None) -> WorldModel:
        """`cast` to `dtype` (where given), then moved to `device` (where given)."""
        if dtype is not None:
            self.cast(dtype)
        return self.to(device) if device is not None else self

    def autocast(self) -> contextlib.AbstractContextManager:
        """The precision context of this model's forward passes (see `autocast_dtype`)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    @abstractmethod
    def reset_context(
        self,
        reference_frames: TensorLike,
        context_frames: TensorLike,
        context_actions: TensorLike,
        reference_actions: TensorLike | None = None,
    ) -> None:
        """Start B episodes: reference [B,H,W,3], context [B,K,H,W,3] (uint8), actions [B,K,A]."""

    @abstractmethod
    def predict(
        self, actions: TensorLike, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Predict the next C frames (uint8 [B,C,H,W,3]) for actions [B,C,A]; roll the context."""

    @abstractmethod
    def forward(
        self,
        batch: WorldModelBatch | Mapping[str, TensorLike | None],
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The scalar training loss of a batch of windows (noise drawn from `generator`)."""

    def training_loss(
        self,
        batch: WorldModelBatch | Mapping[str, TensorLike | None],
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        return self(batch, generator=generator)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def offload(self) -> None:
        """Move weights (and any held context) to CPU memory, e.g. during a policy update."""
        self.onload(torch.device("cpu"))

    def onload(self, device: torch.device | str) -> None:
        """Move weights and the held context to `device`."""
        self.to(device)
        held = self.context_state()
        self.set_context_state({n: v.to(device) for n, v in held.items() if v is not None})

    def context_state(self) -> dict[str, torch.Tensor | None]:
        """The per-env context that `predict` reads and rolls, by name (`context_state_names`;
        None before `reset_context`): hold it to imagine the same episodes again from here."""
        return {name: getattr(self, name, None) for name in self.context_state_names}

    def set_context_state(self, state: Mapping[str, torch.Tensor | None]) -> None:
        """Put back a context taken with `context_state` (the tensors themselves, not copies)."""
        for name, value in state.items():
            setattr(self, name, value)

    @torch.no_grad()
    def predict_active(
        self,
        actions: TensorLike,
        active: TensorLike,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """`predict` for the envs where `active` [B] is true; the others cost nothing.

        An inactive env's context stays as it was and its frames are zeros. Episodes that have
        ended (about a fifth of RL's env-steps in imagination) skip the denoiser this way. The
        noise is drawn for the active envs only, so a sample differs from `predict`'s.
        """
        active = torch.as_tensor(active, dtype=torch.bool).cpu()
        actions = torch.as_tensor(actions)
        if active.shape != actions.shape[:1]:
            raise WmrlError(
                f"active must have shape [{actions.shape[0]}], got {list(active.shape)}"
            )
        if bool(active.all()) or not self.context_state_names:  # a model that cannot subset
            return self.predict(actions, generator)
        if not bool(active.any()):
            return torch.zeros(*actions.shape[:2], self.height, self.width, 3, dtype=torch.uint8)
        index = active.nonzero().squeeze(1)
        held = self.context_state()
        self.set_context_state({n: v[index.to(v.device)] for n, v in held.items() if v is not None})
        try:
            some = self.predict(actions[index], generator)
            rolled = self.context_state()
        finally:
            self.set_context_state(held)
        merged = {}
        for name, value in rolled.items():
            if value is not None:
                merged[name] = held[name].clone()
                merged[name][index.to(merged[name].device)] = value.to(merged[name].dtype)
        self.set_context_state(merged)
        frames = torch.zeros((actions.shape[0], *some.shape[1:]), dtype=some.dtype)
        frames[index] = some.cpu()
        return frames

    # -- detail carry-over (`config.carry_detail`) -----------------------------------------------

    @staticmethod
    def reconstruction_detail(frames: torch.Tensor, reconstructed: torch.Tensor) -> torch.Tensor:
        """What the autoencoder loses of real frames: int16 [B,H,W,3] (frames - reconstruction)."""
        return frames.to(torch.int16) - reconstructed.to(frames.device, torch.int16)

    @staticmethod
    def with_detail(frames: torch.Tensor, detail: torch.Tensor | None) -> torch.Tensor:
        """Add a held detail image to every decoded frame [B,T,H,W,3] (uint8 in and out).

        A small autoencoder blurs the fine texture that barely changes between frames, so a
        decoded prediction loses to copying the last frame at short horizons even when it models
        the motion right. Adding back what the autoencoder lost of the last real frame restores
        the static detail exactly and leaves the predicted change untouched.
        """
        if detail is None:
            return frames
        out = frames.to(torch.int16) + detail.to(frames.device)[:, None]
        return out.clamp(0, 255).to(torch.uint8)

    # -- the autoencoder (shared: each backend provides `vae` and `_to_vae_input`) ------------

    vae: nn.Module
    # A per-frame (2D) VAE learns from any short clip; a causal video VAE (Wan) must see the
    # window layout it encodes at rollout time: the reference frame, then consecutive frames.
    autoencoder_trains_on_windows: ClassVar[bool] = False
    # A frame's latent depends on that frame alone (a 2D VAE): training windows can share the
    # latents of each episode's frames, encoded once (training/latent_cache.py).
    frame_wise_latents: ClassVar[bool] = False

    @abstractmethod
    def _to_vae_input(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 frames [B,T,H,W,3] -> the VAE's input tensor in [-1, 1]."""

    def autoencoder_loss(
        self,
        frames: TensorLike,
        kl_weight: float = 1e-6,
        generator: torch.Generator | None = None,
        motion_weight: float = 0.0,
    ) -> torch.Tensor:
        """Reconstruction MSE (pixels in [-1,1]) + kl_weight * KL, for training the VAE itself.

        `motion_weight` m weights the pixels that move in the clip (1 + m, see `moving_pixels`):
        the dot or the arm covers a few percent of a frame, and a VAE trained on plain MSE can
        settle on the static scene and lose exactly what the actions move."""
        frames = check_frames("frames", frames, 5, self.height, self.width)
        x = self._to_vae_input(frames)
        with self.autocast():
            posterior = self.vae.encode(x).latent_dist
            recon = self.vae.decode(posterior.sample(generator=generator)).sample
        kl = 0.5 * (posterior.mean.pow(2) + posterior.var - 1.0 - posterior.logvar).mean()
        error = (recon.float() - x.float()).pow(2)
        if motion_weight > 0:
            # the mask as a white-on-black clip through the VAE's own input layout
            mask = (moving_pixels(frames)[..., None] * 255).expand(*frames.shape).to(torch.uint8)
            moving = (self._to_vae_input(mask).float() + 1.0) / 2.0
            weight = 1.0 + motion_weight * moving
            error = error * (weight / weight.mean())  # the mean weight stays 1
        return error.mean() + kl_weight * kl

    def adopt_autoencoder(self, other: WorldModel) -> None:
        """Take another model's trained autoencoder and its latent normalization (a VAE trained
        once, shared by denoisers that differ in their action path or objective)."""
        if type(other) is not type(self):
            raise WmrlError(f"cannot take a {other.title} autoencoder into a {self.title} model")
        try:
            self.vae.load_state_dict(other.vae.state_dict())
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0]
            raise WmrlError(f"the autoencoder to reuse has another size: {first}") from None
        self.config.vae = dict(other.config.vae)
        self._autoencoder_changed()

    def _autoencoder_changed(self) -> None:
        """Refresh anything derived from `config.vae` (backends with latent buffers)."""

    # -- persistence (shared by the backends) ---------------------------------------------------

    backend: ClassVar[str]
    title: ClassVar[str]  # for messages: "Wan", "OpenSora"
    config_class: ClassVar[Any]  # a dataclass with to_dict() / from_dict()
    config: Any

    def save_pretrained(
        self, directory: str | Path, state: Mapping[str, torch.Tensor] | None = None
    ) -> Path:
        """Write config.json + model.safetensors atomically: into a temp dir, then renamed over
        any previous copy, so a crash never leaves a half-written model. `state`: the tensors
        to write, this model's state dict by default (a sharded trainer passes the gathered
        one)."""
        directory = Path(directory)
        with atomic_dir(directory) as tmp:
            (tmp / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
            tensors = self.state_dict() if state is None else state
            tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
            save_file(
                tensors, str(tmp / WEIGHTS_NAME), metadata={"format": "pt", "wmrl": self.backend}
            )
        return directory

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> WorldModel:
        directory = Path(directory)
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            if not (directory / name).is_file():
                raise WmrlError(
                    f"{directory} is not {'an' if cls.title[0] in 'AEIOU' else 'a'} "
                    f"{cls.title} world-model directory (no {name})"
                )
        try:
            config = cls.config_class.from_dict(json.loads((directory / CONFIG_NAME).read_text()))
        except json.JSONDecodeError as exc:
            raise WmrlError(f"{directory / CONFIG_NAME} is not valid JSON: {exc}") from exc
        try:
            weights = load_file(str(directory / WEIGHTS_NAME))
        except SafetensorError as exc:
            raise WmrlError(
                f"{directory / WEIGHTS_NAME}: the world model's weights are unreadable ({exc})"
            ) from None
        model = cls.from_state_dict(config, weights, str(directory))
        return model.place(device, dtype)

    @classmethod
    @abstractmethod
    def from_state_dict(
        cls, config: Any, state_dict: Mapping[str, torch.Tensor], what: str
    ) -> WorldModel:
        """Build from a config and load weights, without a random initialization first."""
