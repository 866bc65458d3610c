"""Policy shift: the policy's KL between real and imagined frames, on the toy world."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.helpers.toy_world import ShiftModel, toy_episode, toy_episodes
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.policy_shift import policy_shift_eval, token_kl

BINS = 16


class BrightnessPolicy:
    """Logits [B, 1, 1, BINS] peaked at the bin of the frame's brightness: a policy whose action
    depends on the state the frame shows."""

    def __init__(self) -> None:
        self.calls = 0

    def forward(self, images: torch.Tensor, prompts: list[str], temperature: float = 1.0):
        assert len(prompts) == len(images)
        self.calls += 1
        level = images.float().mean((1, 2, 3)) / 255.0
        centers = torch.linspace(0, 1, BINS)
        logits = -((centers[None] - level[:, None]) ** 2) / 0.01 / temperature
        return SimpleNamespace(logits=logits[:, None, None])


def test_token_kl_is_the_kl_of_the_softmaxes() -> None:
    p, q = torch.tensor([0.5, 0.5]), torch.tensor([0.9, 0.1])
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    kl = token_kl(p.log()[None, None, None], q.log()[None, None, None])
    assert kl.shape == (1,) and kl.item() == pytest.approx(expected, rel=1e-5)
    same = torch.randn(3, 2, 4, BINS)
    assert torch.allclose(token_kl(same, same), torch.zeros(3), atol=1e-6)
    # bins a top-k cut from the reference add nothing, where they would be NaN
    cut = torch.tensor([0.0, 0.0, float("-inf")])[None, None, None]
    assert token_kl(cut, torch.tensor([1.0, 0.0, 2.0])[None, None, None]).isfinite().all()


def test_a_model_that_follows_its_actions_costs_the_policy_nothing() -> None:
    episodes = toy_episodes()
    report = policy_shift_eval(ShiftModel(1.0), BrightnessPolicy(), episodes, horizon=8)
    assert report.steps == [4] and report.episodes == len(episodes)  # t = 8 ends the episodes
    assert report.kl["imagined"][0] == pytest.approx(0.0, abs=1e-4)
    assert report.kl["first"][0] > 0.1 and report.kl["other"][0] > 0.1
    assert set(report.by_task) == {"toy0"} and "policy_kl@4" in report.summary()


def test_a_model_that_ignores_its_actions_looks_like_the_first_frame() -> None:
    report = policy_shift_eval(ShiftModel(0.0), BrightnessPolicy(), toy_episodes(), horizon=8)
    assert report.kl["imagined"][0] == pytest.approx(report.kl["first"][0], rel=1e-5)
    half = policy_shift_eval(ShiftModel(0.5), BrightnessPolicy(), toy_episodes(), horizon=8)
    assert 0.0 < half.kl["imagined"][0] < report.kl["imagined"][0]


def test_other_frames_come_from_the_same_task_and_short_episodes_drop_out() -> None:
    rng = np.random.default_rng(1)
    long = [toy_episode(rng.uniform(-0.4, 0.4, (12, 2)), seed=i, task_id=i % 2) for i in range(4)]
    short = toy_episode(rng.uniform(-0.4, 0.4, (4, 2)), seed=9, task_id=0)
    report = policy_shift_eval(ShiftModel(1.0), BrightnessPolicy(), [*long, short], horizon=12)
    assert report.steps == [4, 8]
    assert all(np.isfinite(v) for kind in report.kl.values() for v in kind)
    # the short episode has ended by step 8: the long ones alone count there
    alone = policy_shift_eval(ShiftModel(1.0), BrightnessPolicy(), long, horizon=12)
    assert report.kl["imagined"][1] == pytest.approx(alone.kl["imagined"][1])
    # nor does an ended episode stand in as the other episode with its last frame
    pair = policy_shift_eval(ShiftModel(1.0), BrightnessPolicy(), [long[0], short], horizon=12)
    assert np.isfinite(pair.kl["imagined"][1]) and np.isnan(pair.kl["other"][1])
    assert set(report.by_task) == {"toy0", "toy1"}
    with pytest.raises(WmrlError, match="at least one chunk"):
        policy_shift_eval(ShiftModel(1.0), BrightnessPolicy(), long, horizon=3)
    with pytest.raises(WmrlError, match="lasts beyond its first chunk"):
        policy_shift_eval(ShiftModel(1.0), BrightnessPolicy(), [short], horizon=8)
