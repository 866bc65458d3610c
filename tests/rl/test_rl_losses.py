"""Clipped surrogate (asymmetric, dual clip), value, entropy and KL losses, hand-computed."""

import math

import pytest
import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.aggregation import token_mean, trajectory_mean
from wmrl_cli.rl.losses import entropy_loss, huber, kl_k3, kl_loss, policy_loss, value_loss

# 2 trajectories x 3 tokens. Ratios are set directly: logprobs = log(ratio), old = 0.
RATIOS = torch.tensor([[1.0, 1.5, 0.5], [0.5, 4.0, 1.0]])
ADV = torch.tensor([1.0, -2.0])  # one advantage per trajectory, broadcast over its tokens
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
# Clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]. Per valid token, J = min(r*A, clip(r)*A):
#   row 0 (A=+1): r=1   -> min(1, 1)        = 1
#                 r=1.5 -> min(1.5, 1.28)   = 1.28   (clipped)
#                 r=0.5 -> min(0.5, 0.8)    = 0.5
#   row 1 (A=-2): r=0.5 -> min(-1, -1.6)    = -1.6   (clipped)
#                 r=4   -> min(-8, -2.56)   = -8     (dual clip c=3 lifts it to 3*(-2) = -6)
#                 third token masked


def _logprobs():
    lp = torch.log(RATIOS).clone()
    lp[1, 2] = 100.0  # garbage on the masked token must not overflow exp() or leak in
    return lp.requires_grad_(True)


def test_policy_loss_token_mean_and_metrics():
    lp = _logprobs()
    loss, m = policy_loss(lp, torch.zeros(2, 3), ADV, MASK)
    # J sum = 1 + 1.28 + 0.5 - 1.6 - 8 = -6.82 over 5 tokens -> loss = 6.82 / 5 = 1.364
    assert math.isclose(loss.item(), 1.364, rel_tol=1e-5)
    # approx_kl = -mean(log r) = -ln(1 * 1.5 * 0.5 * 0.5 * 4) / 5 = -ln(1.5) / 5 = -0.0810930
    assert math.isclose(float(m["approx_kl"]), -math.log(1.5) / 5, rel_tol=1e-5)
    assert math.isclose(float(m["clip_fraction"]), 2 / 5, rel_tol=1e-6)
    # clipped_ratio = mean(clip(r)) = (1 + 1.28 + 0.8 + 0.8 + 1.28) / 5 = 1.032
    assert math.isclose(float(m["clipped_ratio"]), 1.032, rel_tol=1e-5)
    assert float(m["dual_clip_fraction"]) == 0.0
    assert math.isclose(float(m["ratio"]), 7.5 / 5, rel_tol=1e-5)
    loss.backward()
    assert torch.isfinite(lp.grad).all() and float(lp.grad[1, 2]) == 0.0


def test_dual_clip_bounds_negative_advantages():
    loss, m = policy_loss(_logprobs(), torch.zeros(2, 3), ADV, MASK, dual_clip=3.0)
    # the r=4, A=-2 token: max(-8, 3 * -2) = -6 -> sum = 1 + 1.28 + 0.5 - 1.6 - 6 = -4.82
    assert math.isclose(loss.item(), 4.82 / 5, rel_tol=1e-5)
    assert math.isclose(float(m["dual_clip_fraction"]), 1 / 5, rel_tol=1e-6)


def test_dual_clip_must_exceed_one():
    with pytest.raises(ConfigError):
        policy_loss(_logprobs(), torch.zeros(2, 3), ADV, MASK, dual_clip=1.0)


def test_policy_loss_trajectory_length_normalized():
    loss, _ = policy_loss(_logprobs(), torch.zeros(2, 3), ADV, MASK, aggregation="trajectory_mean")
    # row 0: (1 + 1.28 + 0.5) / 3 = 0.926667; row 1: (-1.6 - 8) / 2 = -4.8
    # J = (0.926667 - 4.8) / 2 = -1.936667 -> loss 1.936667
    assert math.isclose(loss.item(), 1.936667, rel_tol=1e-5)


def test_step_level_advantages_and_mask_broadcast_to_tokens():
    # [B=1, T=2, C=2, A=3] tokens, ratio 1 everywhere; step 0 has A=1, step 1 is masked
    lp = torch.zeros(1, 2, 2, 3)
    loss, m = policy_loss(lp, lp.clone(), torch.tensor([[1.0, -1.0]]), torch.tensor([[1, 0]]))
    assert loss.item() == -1.0  # -mean over the 6 valid tokens of 1 * 1
    assert float(m["approx_kl"]) == 0.0 and float(m["clip_fraction"]) == 0.0


def test_no_valid_token_gives_zero_loss():
    lp = _logprobs()
    loss, m = policy_loss(lp, torch.zeros(2, 3), ADV, torch.zeros(2, 3))
    assert loss.item() == 0.0 and float(m["clip_fraction"]) == 0.0
    loss.backward()
    assert float(lp.grad.abs().sum()) == 0.0


def test_huber():
    # delta 10: |e| <= 10 -> 0.5 e^2; else 10 * (|e| - 5)
    out = huber(torch.tensor([-12.0, -10.0, 3.0]), 10.0)
    assert out.tolist() == [70.0, 50.0, 4.5]


def test_value_loss_clipping_and_huber():
    values = torch.tensor([[1.0, 2.0, 0.0]])
    old = torch.tensor([[0.9, 1.0, 0.0]])
    returns = torch.tensor([[1.5, 1.0, 20.0]])
    # step 0: V - V_old = 0.1 (inside 0.2): V_clip = V, e = 0.5     -> 0.125
    # step 1: V - V_old = 1.0 -> V_clip = 1.2; huber(1 - 2) = 0.5, huber(1 - 1.2) = 0.02 -> 0.5
    # step 2: e = 20 > delta 10                                      -> 10 * (20 - 5) = 150
    loss, m = value_loss(values, old, returns, torch.ones(1, 3))
    assert math.isclose(loss.item(), (0.125 + 0.5 + 150.0) / 3, rel_tol=1e-6)
    assert math.isclose(float(m["value_clip_ratio"]), 1 / 3, rel_tol=1e-6)
    # masking step 2: (0.125 + 0.5) / 2 = 0.3125, clip active on 1 of 2 valid steps
    loss, m = value_loss(values, old, returns, torch.tensor([[1, 1, 0]]))
    assert math.isclose(loss.item(), 0.3125, rel_tol=1e-6)
    assert float(m["value_clip_ratio"]) == 0.5


def test_value_loss_takes_the_larger_clipped_term():
    # V=2, V_old=1, R=3: unclipped huber(1) = 0.5; V_clip = 1.2, huber(1.8) = 1.62 -> 1.62
    loss, _ = value_loss(
        torch.tensor([[2.0]]), torch.tensor([[1.0]]), torch.tensor([[3.0]]), torch.ones(1, 1)
    )
    assert math.isclose(loss.item(), 1.62, rel_tol=1e-6)
    loss, m = value_loss(
        torch.tensor([[2.0]]),
        torch.tensor([[1.0]]),
        torch.tensor([[3.0]]),
        torch.ones(1, 1),
        clip=None,
    )
    assert loss.item() == 0.5 and float(m["value_clip_ratio"]) == 0.0


def test_entropy_loss():
    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert math.isclose(float(entropy_loss(entropy, mask)), 7 / 3, rel_tol=1e-6)  # (1+2+4)/3
    # per trajectory (1 + 2) / 2 = 1.5 and 4, then (1.5 + 4) / 2 = 2.75
    assert float(entropy_loss(entropy, mask, aggregation="trajectory_mean")) == 2.75


def test_kl_k3():
    # log r = ref - logp. r = 2: 2 - ln 2 - 1 = 0.306853; r = 0.5: 0.5 + ln 2 - 1 = 0.193147
    logp = torch.zeros(3)
    ref = torch.tensor([math.log(2.0), 0.0, math.log(0.5)])
    assert torch.allclose(kl_k3(logp, ref), torch.tensor([0.306853, 0.0, 0.193147]), atol=1e-6)
    # masked mean over the first two: 0.306853 / 2
    assert math.isclose(float(kl_loss(logp, ref, torch.tensor([1, 1, 0]))), 0.1534265, rel_tol=1e-5)


def test_trajectory_mean_drops_fully_masked_trajectories():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]])
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
    assert float(token_mean(x, mask)) == 2.0  # (1 + 2 + 3) / 3
    assert float(trajectory_mean(x, mask)) == 2.25  # (1.5 + 3) / 2, row 2 has no valid step
    assert float(trajectory_mean(x, torch.zeros(3, 2))) == 0.0
    # 1-d input: one step per trajectory, the masked third one dropped: (1 + 2) / 2
    assert float(trajectory_mean(torch.tensor([1.0, 2.0, 9.0]), torch.tensor([1, 1, 0]))) == 1.5
