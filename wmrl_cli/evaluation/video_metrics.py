"""Frame-quality metrics: PSNR and SSIM on uint8 RGB frames (torch, no extra dependency)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _as_float(frames: torch.Tensor) -> torch.Tensor:
    """uint8 [..., H, W, 3] -> float [N, 3, H, W] in [0, 1]."""
    x = torch.as_tensor(frames)
    return x.reshape(-1, *x.shape[-3:]).permute(0, 3, 1, 2).float() / 255.0


def psnr(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-frame PSNR in dB, shape = the leading dims of the inputs; capped at 100 dB."""
    p, t = _as_float(pred), _as_float(target)
    mse = ((p - t) ** 2).flatten(1).mean(1).clamp_min(1e-10)
    return (10 * torch.log10(1.0 / mse)).reshape(torch.as_tensor(pred).shape[:-3])


def _gaussian_window(size: int = 7, sigma: float = 1.5) -> torch.Tensor:
    coords = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(3, 1, size, size).contiguous()


def ssim(pred: torch.Tensor, target: torch.Tensor, window: int = 7) -> torch.Tensor:
    """Per-frame SSIM (Wang et al. 2004, Gaussian window sigma 1.5, per channel, averaged);
    the window is 7 rather than 11 so that 64x64 frames keep enough valid positions."""
    p, t = _as_float(pred), _as_float(target)
    w = _gaussian_window(window).to(p.device)
    c1, c2 = 0.01**2, 0.03**2

    def blur(x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, groups=3)

    mu_p, mu_t = blur(p), blur(t)
    var_p = blur(p * p) - mu_p**2
    var_t = blur(t * t) - mu_t**2
    cov = blur(p * t) - mu_p * mu_t
    num = (2 * mu_p * mu_t + c1) * (2 * cov + c2)
    den = (mu_p**2 + mu_t**2 + c1) * (var_p + var_t + c2)
    return (num / den).flatten(1).mean(1).reshape(torch.as_tensor(pred).shape[:-3])
