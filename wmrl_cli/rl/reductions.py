"""Masked reductions and diagnostic statistics shared by every RL function.

Masks may have fewer dimensions than the values they mask: a chunk-level mask [B,T] applies
to token-level values [B,T,C,A] by broadcasting over the trailing dimensions.
"""

from __future__ import annotations

import torch


def append_dims(x: torch.Tensor, ndim: int) -> torch.Tensor:
    """View `x` with trailing singleton dimensions up to `ndim` dimensions ([B,T] -> [B,T,1,1])."""
    if x.dim() > ndim:
        raise ValueError(f"cannot broadcast a {x.dim()}-d tensor to {ndim} dimensions")
    return x.reshape(*x.shape, *([1] * (ndim - x.dim())))


def expand_mask(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The float mask broadcast to the full shape of `like` (leading dimensions must agree)."""
    return append_dims(mask, like.dim()).expand_as(like).to(like.dtype)


def masked_sum(
    x: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """sum_i x_i * m_i over `dim` (all dimensions when None)."""
    m = expand_mask(mask, x)
    return (x * m).sum() if dim is None else (x * m).sum(dim=dim)


def masked_mean(
    x: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None
) -> torch.Tensor:
    """sum_i x_i m_i / max(sum_i m_i, 1).

    An all-masked slice gives 0 rather than NaN, so a minibatch whose steps were all filtered
    out contributes a zero loss with an intact (zero) gradient instead of poisoning the update.
    """
    m = expand_mask(mask, x)
    if dim is None:
        return (x * m).sum() / m.sum().clamp(min=1.0)
    return (x * m).sum(dim=dim) / m.sum(dim=dim).clamp(min=1.0)


def masked_stats(x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Mean, min and max of the valid entries (all 0 when none is valid), detached.

    Feeds rollout/advantages_{mean,min,max} and similar metrics.
    """
    x = x.detach()
    valid = expand_mask(mask, x).bool()
    if not bool(valid.any()):
        zero = x.new_zeros(())
        return {"mean": zero, "min": zero, "max": zero}
    values = x[valid]
    return {"mean": values.mean(), "min": values.min(), "max": values.max()}


def explained_variance(
    y_pred: torch.Tensor, y_true: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """EV = 1 - Var[y - y_hat] / Var[y] over the valid entries (population variances).

    As in CleanRL's PPO diagnostics: 1 is a perfect critic, 0 no better than predicting the
    mean, negative worse. When Var[y] = 0 (e.g. every return of the batch is equal, or no entry
    is valid) there is nothing to explain and the function returns 0 instead of NaN/inf, so the
    metric stays safe to average across minibatches and ranks.
    """
    y_pred = y_pred.detach().float()
    y_true = y_true.detach().float()
    if mask is None:
        mask = torch.ones_like(y_true)
    mask = mask.to(y_true.dtype)
    mean_y = masked_mean(y_true, mask)
    var_y = masked_mean((y_true - mean_y) ** 2, mask)
    diff = y_true - y_pred
    var_diff = masked_mean((diff - masked_mean(diff, mask)) ** 2, mask)
    if float(var_y) <= 0.0:
        return y_true.new_zeros(())
    return 1.0 - var_diff / var_y
