"""Rectified-flow utilities against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from wmrl_cli.world_models import flow_matching as fm
from wmrl_cli.world_models.wan import RLINF_CONTEXT_NOISE_SIGMA


def test_sigma_schedule_two_steps_shift_5() -> None:
    # linspace(1, 0, 3)[:-1] = [1, 0.5]; 0.5 -> 5*0.5 / (1 + 4*0.5) = 2.5 / 3; then the final 0.
    sigmas = fm.inference_sigmas(2, shift=5.0)
    assert torch.allclose(sigmas, torch.tensor([1.0, 5.0 / 6.0, 0.0], dtype=torch.float64))


def test_sigma_schedule_five_steps_shift_5() -> None:
    # [1, .8, .6, .4, .2] -> [1, 4/4.2, 3/3.4, 2/2.6, 1/1.8], then 0.
    expected = [1.0, 4 / 4.2, 3 / 3.4, 2 / 2.6, 1 / 1.8, 0.0]
    assert torch.allclose(fm.inference_sigmas(5), torch.tensor(expected, dtype=torch.float64))


def test_shift_one_is_plain_linspace() -> None:
    assert torch.allclose(fm.inference_sigmas(4, shift=1.0), torch.linspace(1, 0, 5).double())
    with pytest.raises(ValueError):
        fm.inference_sigmas(0)


def test_noising_target_and_x0_velocity_agree() -> None:
    x0, eps = torch.tensor([2.0]), torch.tensor([-1.0])
    x_t = fm.add_noise(x0, eps, 0.25)
    assert torch.allclose(x_t, torch.tensor([1.25]))  # 0.75 * 2 + 0.25 * -1
    assert torch.allclose(fm.velocity_target(x0, eps), torch.tensor([-3.0]))  # eps - x0
    assert torch.allclose(fm.velocity_from_x0(x_t, x0, torch.tensor(0.25)), torch.tensor([-3.0]))
    assert fm.sigma_to_timestep(torch.tensor(0.25)).item() == 250.0


def test_euler_with_exact_velocity_lands_on_data() -> None:
    # The path is straight, so Euler with the true velocity is exact for any step count.
    gen = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
    seen: list[float] = []

    def velocity(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        assert sigma.shape == (3,)
        seen.append(sigma[0].item())
        return fm.velocity_target(x0, eps)

    out = fm.euler_sample(velocity, eps, fm.inference_sigmas(2, shift=5.0))
    assert torch.allclose(out, x0, atol=1e-6)
    assert seen == pytest.approx([1.0, 5.0 / 6.0])


def test_training_sigmas_logit_normal_shifted_and_seeded() -> None:
    draw = lambda shift: fm.sample_training_sigmas(  # noqa: E731
        1000, shift=shift, generator=torch.Generator().manual_seed(3)
    )
    plain, shifted = draw(1.0), draw(5.0)
    assert torch.equal(plain, draw(1.0))
    assert bool(((plain > 0) & (plain < 1)).all())
    assert torch.allclose(shifted, fm.shift_sigmas(plain, 5.0))
    assert abs(plain.median().item() - 0.5) < 0.05  # sigmoid(N(0,1)) has median 0.5
    assert fm.shift_sigmas(torch.tensor(0.5), 5.0).item() == pytest.approx(5 / 6)


def test_rlinf_context_noise_level() -> None:
    # Index 950 of DiffSynth's 1000-step training grid: s = 0.05, shifted by 5.
    expected = fm.shift_sigmas(torch.tensor(0.05), 5.0).item()
    assert abs(RLINF_CONTEXT_NOISE_SIGMA - expected) < 1e-4


def test_delta_prediction_loss_by_hand() -> None:
    # Two latent positions (1 channel, 1 frame, 1x2); the target moves at the second only.
    anchor = torch.tensor([0.0, 0.0]).view(1, 1, 1, 1, 2)
    x0 = torch.tensor([0.0, 2.0]).view(1, 1, 1, 1, 2)
    x0_hat = torch.tensor([1.0, 1.0]).view(1, 1, 1, 1, 2)  # squared errors 1 and 1
    sigma = torch.tensor([0.5]).view(1, 1, 1, 1, 1)
    # Bounded at min_sigma: 1 / max(0.5, 1.0)^2 = 1 -> mean 1; at min_sigma 0.25: 1 / 0.25 = 4.
    assert fm.delta_prediction_loss(x0_hat, x0, anchor, sigma, 1.0).item() == pytest.approx(1.0)
    assert fm.delta_prediction_loss(x0_hat, x0, anchor, sigma, 0.25).item() == pytest.approx(4.0)
    # Motion weight 2: change |x0 - anchor| = (0, 2), mean 1 -> weights (1, 5), mean 3.
    # Errors (1, 1/4 * ... ) at min_sigma 1: (1, 1) -> (1*1 + 5*1) / 2 / 3 = 1.
    assert fm.delta_prediction_loss(x0_hat, x0, anchor, sigma, 1.0, 2.0).item() == pytest.approx(
        1.0
    )
    # Unequal errors show the weighting: errors (0, 4) -> (1*0 + 5*4) / 2 / 3 = 10/3 (vs 2).
    x0_hat = torch.tensor([0.0, 0.0]).view(1, 1, 1, 1, 2)
    plain = fm.delta_prediction_loss(x0_hat, x0, anchor, sigma, 1.0)
    weighted = fm.delta_prediction_loss(x0_hat, x0, anchor, sigma, 1.0, 2.0)
    assert (plain.item(), weighted.item()) == pytest.approx((2.0, 10.0 / 3.0))
