"""Rectified flow for the world models: noise schedule, noising, loss target, Euler sampler.

Convention, shared by every world model in wmrl and by DiffSynth / diffusers' Wan pipelines:

    x_sigma = (1 - sigma) * x0 + sigma * eps          sigma = 1 is pure noise, sigma = 0 is data
    v       = d x_sigma / d sigma = eps - x0           the velocity a model predicts
    x_next  = x + (sigma_next - sigma) * v             one Euler step (sigma_next < sigma)

Using eps - x0 (not x0 - eps) keeps a published Wan / RLinf DiT's raw output directly usable as v.
A model's timestep input is sigma * NUM_TRAIN_TIMESTEPS (0..1000), as in DiffSynth and diffusers.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

NUM_TRAIN_TIMESTEPS = 1000


def shift_sigmas(sigmas: torch.Tensor, shift: float) -> torch.Tensor:
    """Resolution shift s -> shift*s / (1 + (shift-1)*s); shift > 1 favours high noise levels."""
    return shift * sigmas / (1.0 + (shift - 1.0) * sigmas)


def inference_sigmas(num_steps: int, shift: float = 5.0) -> torch.Tensor:
    """The N + 1 noise levels an N-step sampler walks through, float64, from 1 down to a final 0.

    The first N are linspace(1, 0, N+1)[:-1] shifted (DiffSynth's `extra_one_step` grid); the
    appended 0 is where the last Euler step lands.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    base = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)[:-1]
    return torch.cat([shift_sigmas(base, shift), torch.zeros(1, dtype=torch.float64)])


def sigma_to_timestep(sigma: torch.Tensor) -> torch.Tensor:
    """The timestep value a Wan-style model is conditioned on (0..1000)."""
    return sigma * NUM_TRAIN_TIMESTEPS


def add_noise(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
    """x_sigma = (1 - sigma) x0 + sigma eps; a tensor sigma must broadcast (e.g. [B,1,1,1,1])."""
    return (1.0 - sigma) * x0 + sigma * noise


def velocity_target(x0: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The regression target of the velocity loss: eps - x0."""
    return noise - x0


def velocity_from_x0(x_t: torch.Tensor, x0_pred: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """The velocity implied by a clean-sample estimate: (x_sigma - x0) / sigma (sigma > 0)."""
    return (x_t - x0_pred) / sigma


def delta_prediction_loss(
    x0_hat: torch.Tensor,
    x0: torch.Tensor,
    anchor: torch.Tensor,
    sigma: torch.Tensor,
    min_sigma: float,
    motion_weight: float = 0.0,
) -> torch.Tensor:
    """Loss of a delta-prediction world model: latents [B,C,T,h,w], anchor [B,C,1,h,w] (the last
    context latent the prediction is an offset from), sigma [B,1,1,1,1].

    ||x0_hat - x0||^2 / max(sigma, min_sigma)^2 (= the velocity loss ||v_hat - v||^2 where sigma
    >= min_sigma). With motion_weight = m > 0 each latent position is weighted by
    1 + m * |x0 - anchor| / mean|x0 - anchor| (channel mean), normalised to mean weight 1: the
    few positions that change, the arm and what it moves, are what the actions decide.
    """
    err = ((x0_hat - x0) / sigma.clamp(min=min_sigma)).pow(2)
    if motion_weight <= 0:
        return err.mean()
    change = (x0 - anchor).abs().mean(dim=1, keepdim=True)
    weight = 1.0 + motion_weight * change / change.mean().clamp(min=1e-8)
    return (weight * err).mean() / weight.mean()


def sample_training_sigmas(
    batch_size: int,
    *,
    logit_mean: float = 0.0,
    logit_std: float = 1.0,
    shift: float = 1.0,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Logit-normal noise levels (sigmoid of a normal draw), then the resolution shift; float32 [B].

    The draw happens on the generator's device so a seed gives the same levels on CPU and GPU.
    """
    draw_device = generator.device if generator is not None else device
    u = torch.randn(batch_size, generator=generator, device=draw_device) * logit_std + logit_mean
    sigmas = shift_sigmas(torch.sigmoid(u), shift)
    return sigmas.to(device) if device is not None else sigmas


def euler_sample(
    velocity_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    noise: torch.Tensor,
    sigmas: torch.Tensor,
) -> torch.Tensor:
    """Integrate dx/dsigma = v from sigmas[0] (noise) to sigmas[-1] (data) with Euler steps.

    velocity_fn(x, sigma) gets sigma as a float32 tensor of shape [B] and returns v like x.
    The state is integrated in float32 whatever the model's dtype.
    """
    x = noise.float()
    batch = x.shape[0]
    for sigma, sigma_next in zip(sigmas[:-1].tolist(), sigmas[1:].tolist(), strict=True):
        sigma_b = torch.full((batch,), sigma, dtype=torch.float32, device=x.device)
        v = velocity_fn(x, sigma_b).float()
        x = x + (sigma_next - sigma) * v
    return x
