"""Policy, value, entropy and KL losses for PPO and GRPO on token-level log-probs.

Log-probs are per action token, [B,T,C,A] (T chunk steps, C actions per chunk, A dimensions
per action), each token with its own ratio. Advantages and masks may be given per chunk step
([B,T]) and are broadcast over the trailing dimensions. Metric values are detached 0-d tensors
(reduce them across ranks before logging); their names are the suffixes of RLinf's
metrics (train/actor/<name>, train/critic/<name>).
"""

from __future__ import annotations

import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.aggregation import Aggregation, LossAggregation, as_rule
from wmrl_cli.rl.reductions import append_dims, expand_mask, masked_mean


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = None,
    aggregation: Aggregation | LossAggregation = "token_mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (PPO, Schulman et al. 2017, arXiv:1707.06347, eq. 7) with DAPO's
    asymmetric "clip-higher" range (arXiv:2503.14476) and optional dual clip (Ye et al. 2020,
    arXiv:1912.09729), per token:

        rho  = exp(logp - logp_old)
        J    = min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A)
        J    = max(J, c * A)          only where A < 0, when dual_clip = c (c > 1)
        loss = -aggregate(J)          token mean, trajectory-length normalized (WoVR eq. 11)
                                      or RLinf's masked_mean_ratio (rl/aggregation.py)

    Metrics (all over valid tokens):
      approx_kl      -mean(log rho), as RLinf defines it;
      clip_fraction  fraction of tokens where the clipped term is strictly the smaller one
                     (the gradient of that token is cut by the clip);
      clipped_ratio  mean of clip(rho, 1 - clip_low, 1 + clip_high), RLinf's
                     `actor/clipped_ratio` (not a fraction);
      dual_clip_fraction  fraction of tokens where the dual clip bound c * A is active;
      ratio          mean of rho;  policy_loss  the loss value.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ConfigError(f"dual_clip must be > 1 (got {dual_clip})")
    valid = expand_mask(mask, logprobs).bool()
    adv = append_dims(advantages, logprobs.dim()).expand_as(logprobs).to(logprobs.dtype)
    # Zero the log-ratio of masked tokens so garbage log-probs there cannot overflow exp().
    log_ratio = torch.where(valid, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surr_unclipped = ratio * adv
    surr_clipped = clipped * adv
    objective = torch.minimum(surr_unclipped, surr_clipped)
    dual_active = torch.zeros_like(valid)
    if dual_clip is not None:
        floor = dual_clip * adv
        dual_active = (adv < 0) & (floor > objective)
        objective = torch.where(adv < 0, torch.maximum(objective, floor), objective)
    loss = -as_rule(aggregation)(objective, valid)

    with torch.no_grad():
        metrics = {
            "policy_loss": loss.detach(),
            "approx_kl": -masked_mean(log_ratio, valid),
            "clip_fraction": masked_mean((surr_clipped < surr_unclipped).float(), valid),
            "clipped_ratio": masked_mean(clipped, valid),
            "dual_clip_fraction": masked_mean(dual_active.float(), valid),
            "ratio": masked_mean(ratio, valid),
        }
    return loss, metrics


def huber(error: torch.Tensor, delta: float) -> torch.Tensor:
    """Huber (1964): 0.5 e^2 where |e| <= delta, else delta * (|e| - delta / 2)."""
    abs_e = error.abs()
    return torch.where(abs_e <= delta, 0.5 * error**2, delta * (abs_e - 0.5 * delta))


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float | None = 0.2,
    huber_delta: float = 10.0,
    aggregation: Aggregation | LossAggregation = "token_mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss with a Huber penalty (RLinf's `compute_ppo_critic_loss`):

        V_clip = V_old + clip(V - V_old, -clip, +clip)
        loss   = aggregate(max(huber(R - V), huber(R - V_clip)))

    values, old_values, returns: [B,T] (one value per chunk step); mask [B,T]. clip=None
    disables value clipping. value_clip_ratio is the fraction of valid steps where
    |V - V_old| > clip, i.e. where the clipped prediction differs from the new one. (RLinf's
    `compute_ppo_critic_loss` tests |V_clip - V_old| > clip, where V_clip - V_old is the clamped
    difference recomputed in floating point: it exceeds clip only by rounding, so RLinf's
    metric is rounding noise over all entries, neither 0 nor this ratio.)
    """
    unclipped = huber(returns - values, huber_delta)
    valid = expand_mask(mask, values).bool()
    if clip is None:
        per_step = unclipped
        clip_active = torch.zeros_like(valid)
    else:
        v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        per_step = torch.maximum(unclipped, huber(returns - v_clipped, huber_delta))
        clip_active = (values - old_values).abs() > clip
    loss = as_rule(aggregation)(per_step, valid)
    with torch.no_grad():
        metrics = {
            "value_loss": loss.detach(),
            "value_clip_ratio": masked_mean(clip_active.float(), valid),
        }
    return loss, metrics


def entropy_loss(
    entropy: torch.Tensor,
    mask: torch.Tensor,
    aggregation: Aggregation | LossAggregation = "token_mean",
) -> torch.Tensor:
    """Mean policy entropy over valid tokens (train/entropy_loss). The entropy bonus enters the
    total loss as `- entropy_coef * entropy_loss` (coef 0 in RLinf's and WMPO's configs)."""
    return as_rule(aggregation)(entropy, mask)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) (Schulman 2020, "Approximating KL divergence"):

        log r = logp_ref - logp,   k3 = r - log r - 1   (>= 0, unbiased under samples of pi)

    log r is clamped to [-20, 20] so exp() cannot overflow on far-off tokens.
    """
    log_r = torch.clamp(ref_logprobs - logprobs, -20.0, 20.0).double()
    # in float64: near the reference k3 ~ (log r)^2 / 2 would round to 0 in float32
    return (torch.expm1(log_r) - log_r).to(logprobs.dtype)


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    aggregation: Aggregation | LossAggregation = "token_mean",
) -> torch.Tensor:
    """KL penalty to a reference policy, aggregate(k3). Off by default: the embodied configs of
    RLinf and WMPO train without it (kl coefficient 0)."""
    return as_rule(aggregation)(kl_k3(logprobs, ref_logprobs), mask)
