"""Group filters and dynamic sampling."""

import pytest
import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.rl.grouping import (
    band_filter,
    concat_groups,
    dynamic_sample,
    expand_group_mask,
    split_groups,
    varied_outcome_groups,
)


def test_drop_groups_with_equal_outcomes():
    outcomes = torch.tensor([1, 1, 1, 0, 1, 0, 0, 0, 0])  # G=3: all success, mixed, all fail
    assert varied_outcome_groups(outcomes, 3).tolist() == [False, True, False]
    assert varied_outcome_groups(torch.tensor([0.5, 0.5, 2.0, 0.5]), 2).tolist() == [False, True]


def test_accuracy_band_is_inclusive():
    success = torch.tensor([1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0])  # accuracies 1.0, 0.25, 0.0
    assert band_filter(success, 4, 0.1, 0.9).tolist() == [False, True, False]
    # RLinf's reward band [0.5, 4.5] keeps a group whose mean return is exactly 0.5
    assert band_filter(torch.tensor([0.0, 1.0, 5.0, 5.0]), 2, 0.5, 4.5).tolist() == [True, False]
    with pytest.raises(ConfigError):
        band_filter(success, 4, 0.9, 0.1)


def test_expand_group_mask():
    assert expand_group_mask(torch.tensor([True, False]), 2).tolist() == [True, True, False, False]


def _scripted(batches):
    calls = iter(batches)
    return lambda: next(calls)


def test_dynamic_sampling_accumulates_until_target():
    sampler = _scripted([["a-bad", "b-ok"], ["c-ok", "d-ok", "e-ok"], ["never"]])
    out = dynamic_sample(sampler, lambda g: g.endswith("ok"), target=3, max_tries=5)
    # call 1 keeps b; call 2 keeps c, d, e -> 4 >= 3, the surplus e is dropped
    assert out.groups == ["b-ok", "c-ok", "d-ok"] and out.tries == 2 and out.enough


def test_dynamic_sampling_stops_at_the_cap():
    out = dynamic_sample(lambda: ["bad", "bad"], lambda g: g == "ok", target=2, max_tries=3)
    assert out.groups == [] and out.tries == 3 and not out.enough
    out = dynamic_sample(_scripted([["ok", "bad"], ["ok"]]), lambda g: g == "ok", 2, 1)
    assert out.groups == ["ok"] and out.tries == 1 and not out.enough


def test_split_and_concat_groups_round_trip():
    batch = {"returns": torch.arange(4.0), "mask": torch.ones(4, 3)}
    groups = split_groups(batch, 2)
    assert len(groups) == 2 and groups[1]["returns"].tolist() == [2.0, 3.0]
    back = concat_groups(groups)
    assert torch.equal(back["returns"], batch["returns"]) and back["mask"].shape == (4, 3)
    with pytest.raises(ConfigError):
        split_groups(batch, 3)
