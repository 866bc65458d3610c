"""GAE and GRPO advantages against hand-computed values."""

import pytest
import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.advantages import (
    broadcast_advantages,
    gae,
    grpo_advantages,
    grpo_step_advantages,
    trajectory_returns,
)

REWARDS = torch.tensor([[1.0, 0.0, 2.0]])
VALUES = torch.tensor([[0.5, 1.0, 1.5]])
NEXT_VALUE = torch.tensor([2.0])


def test_gae_without_done():
    # gamma = 0.9, lambda = 0.5, gamma * lambda = 0.45
    # t=2: delta = 2 + 0.9 * 2.0 - 1.5 = 2.3                 A2 = 2.3
    # t=1: delta = 0 + 0.9 * 1.5 - 1.0 = 0.35                A1 = 0.35 + 0.45 * 2.3 = 1.385
    # t=0: delta = 1 + 0.9 * 1.0 - 0.5 = 1.4                 A0 = 1.4 + 0.45 * 1.385 = 2.02325
    adv, ret = gae(REWARDS, VALUES, torch.zeros(1, 3), NEXT_VALUE, gamma=0.9, lam=0.5)
    assert torch.allclose(adv, torch.tensor([[2.02325, 1.385, 2.3]]), atol=1e-6)
    # returns = A + V
    assert torch.allclose(ret, torch.tensor([[2.52325, 2.385, 3.8]]), atol=1e-6)


def test_gae_done_stops_bootstrap_and_recursion():
    # done at t=1: t=1 has no bootstrap and does not look at A2
    # t=1: delta = 0 - 1.0 = -1.0                            A1 = -1.0
    # t=0: delta = 1 + 0.9 * 1.0 - 0.5 = 1.4                 A0 = 1.4 + 0.45 * (-1.0) = 0.95
    dones = torch.tensor([[0.0, 1.0, 0.0]])
    adv, ret = gae(REWARDS, VALUES, dones, NEXT_VALUE, gamma=0.9, lam=0.5)
    assert torch.allclose(adv[:, :2], torch.tensor([[0.95, -1.0]]), atol=1e-6)
    assert torch.allclose(ret[:, :2], torch.tensor([[1.45, 0.0]]), atol=1e-6)


def test_gae_with_unit_gamma_lambda_is_reward_to_go():
    # values 0, gamma = lambda = 1: A_t = sum_{k>=t} r_k = [1+2+3, 2+3, 3]
    adv, _ = gae(
        torch.tensor([[1.0, 2.0, 3.0]]), torch.zeros(1, 3), torch.zeros(1, 3), torch.zeros(1), 1, 1
    )
    assert adv.tolist() == [[6.0, 5.0, 3.0]]


def test_trajectory_returns_sum_to_first_done():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 5.0, 0.0]])
    dones = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 0]])
    # row 0: 1 + 2 (done at t=1, the 3 and 4 after it are ignored); row 1: 5
    assert trajectory_returns(rewards, dones).tolist() == [3.0, 5.0]
    # per-action rewards [B,T,C] are summed over the chunk: 1 + 1 + 2 + 0
    chunked = torch.tensor([[[1.0, 1.0], [2.0, 0.0], [9.0, 9.0]]])
    assert trajectory_returns(chunked, torch.tensor([[0, 1, 0]])).tolist() == [4.0]


def test_grpo_uses_sample_std_and_zero_for_equal_groups():
    returns = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    adv = grpo_advantages(returns, group_size=4)
    # group 0: mean 0.5, sample std = sqrt(4 * 0.25 / (4 - 1)) = sqrt(1/3) = 0.577350
    #          A = +-0.5 / (0.577350 + 1e-6) = +-0.866024
    # group 1: all returns equal -> std 0 -> A = 0 / (0 + 1e-6) = 0
    expected = torch.tensor([0.866024, -0.866024, -0.866024, 0.866024, 0.0, 0.0, 0.0, 0.0])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_grpo_group_of_two_distinguishes_sample_from_population_std():
    # mean 2, sample std = sqrt((1 + 1) / 1) = 1.414214 -> A = +-0.707107
    # (the population std 1 would give +-1)
    adv = grpo_advantages(torch.tensor([3.0, 1.0]), group_size=2)
    assert torch.allclose(adv, torch.tensor([0.707107, -0.707107]), atol=1e-5)


def test_grpo_mean_only():
    returns = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    adv = grpo_advantages(returns, group_size=4, normalize_std=False)
    assert adv.tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]


def test_grpo_rejects_bad_group_size():
    with pytest.raises(ConfigError):
        grpo_advantages(torch.ones(6), group_size=4)
    with pytest.raises(ConfigError):
        grpo_advantages(torch.ones(4), group_size=1)
    # without std a group of one is defined: A = R - R = 0
    assert grpo_advantages(torch.ones(2), group_size=1, normalize_std=False).tolist() == [0, 0]


def test_broadcast_to_valid_steps():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    assert broadcast_advantages(torch.tensor([2.0, -1.0]), mask).tolist() == [
        [2.0, 2.0, 0.0],
        [-1.0, -1.0, -1.0],
    ]


def test_grpo_step_advantages_pipeline():
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    dones = torch.tensor([[0, 0, 1, 0], [0, 0, 0, 1]])
    adv, returns = grpo_step_advantages(rewards, dones, group_size=2)
    assert returns.tolist() == [1.0, 0.0]
    # mean 0.5, sample std sqrt(0.5) = 0.707107 -> A = +-0.707107
    # row 0 is masked after its done at t=2; row 1 is valid through its done at t=3
    a = 0.707107
    expected = torch.tensor([[a, a, a, 0.0], [-a, -a, -a, -a]])
    assert torch.allclose(adv, expected, atol=1e-5)
