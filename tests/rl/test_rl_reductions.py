"""Masked reductions and explained variance, against hand-computed values."""

import math

import torch

from wmrl_cli.rl.reductions import explained_variance, masked_mean, masked_stats, masked_sum

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1, 1, 0], [1, 0, 0]])


def test_masked_sum_and_mean():
    assert float(masked_sum(X, M)) == 7.0  # 1 + 2 + 4
    assert math.isclose(float(masked_mean(X, M)), 7.0 / 3.0, rel_tol=1e-6)
    # per row: (1 + 2) / 2 = 1.5 and 4 / 1 = 4
    assert masked_mean(X, M, dim=1).tolist() == [1.5, 4.0]


def test_step_mask_broadcasts_over_token_dims():
    x = torch.arange(12.0).reshape(2, 3, 2)  # [B,T,A]; row 0 step 0 holds 0,1; row 1 step 0: 6,7
    mask = torch.tensor([[1, 0, 0], [1, 0, 0]])
    # (0 + 1 + 6 + 7) / 4 = 3.5
    assert float(masked_mean(x, mask)) == 3.5


def test_no_valid_entry_gives_zero_not_nan():
    x = torch.tensor([[1.0, 2.0]], requires_grad=True)
    out = masked_mean(x, torch.zeros(1, 2))
    assert out.item() == 0.0
    out.backward()
    assert x.grad.tolist() == [[0.0, 0.0]]


def test_masked_stats():
    stats = masked_stats(X, M)
    assert math.isclose(float(stats["mean"]), 7.0 / 3.0, rel_tol=1e-6)
    assert float(stats["min"]) == 1.0 and float(stats["max"]) == 4.0
    empty = masked_stats(X, torch.zeros(2, 3))
    assert [float(v) for v in empty.values()] == [0.0, 0.0, 0.0]


def test_explained_variance():
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert float(explained_variance(y.clone(), y)) == 1.0
    # y - y_hat = [0, 0, 0, -1]: mean -0.25, Var = (3 * 0.0625 + 0.5625) / 4 = 0.1875
    # Var[y] = (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25  ->  EV = 1 - 0.1875 / 1.25 = 0.85
    ev = explained_variance(torch.tensor([1.0, 2.0, 3.0, 5.0]), y)
    assert math.isclose(float(ev), 0.85, rel_tol=1e-6)


def test_explained_variance_constant_target_is_zero_not_nan():
    ev = explained_variance(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 3.0, 3.0]))
    assert float(ev) == 0.0


def test_explained_variance_ignores_masked_entries():
    # the masked 4th entry (y=100, y_hat=0) would dominate; valid entries are predicted exactly
    y = torch.tensor([1.0, 2.0, 3.0, 100.0])
    y_hat = torch.tensor([1.0, 2.0, 3.0, 0.0])
    mask = torch.tensor([1, 1, 1, 0])
    assert float(explained_variance(y_hat, y, mask)) == 1.0
