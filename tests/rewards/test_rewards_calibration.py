"""Thresholds by best F1, and precision / recall / F1 at a threshold, on hand-made scores."""

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from wmrl_cli.errors import WmrlError
from wmrl_cli.rewards.base import round_scores
from wmrl_cli.rewards.calibration import (
    best_f1_threshold,
    binary_metrics,
    cross_validated_threshold,
    judge_threshold,
    raw_score_threshold,
)

SCORES = [0.9, 0.8, 0.4, 0.3, 0.2]
LABELS = [1, 0, 1, 0, 0]


def test_metrics_at_a_threshold():
    # >= 0.5 predicts [1, 1, 0, 0, 0]: TP 1 (0.9), FP 1 (0.8), FN 1 (0.4), TN 2
    m = binary_metrics(SCORES, LABELS, 0.5)
    assert (m.tp, m.fp, m.fn, m.tn) == (1, 1, 1, 2)
    assert (m.precision, m.recall, m.f1) == (0.5, 0.5, 0.5)
    # nothing predicted positive: precision and F1 are 0, not NaN
    none = binary_metrics(SCORES, LABELS, 0.95)
    assert (none.precision, none.recall, none.f1) == (0.0, 0.0, 0.0)


def test_best_f1_threshold():
    # cut at 0.9: P 1,   R 1/2 -> F1 2/3      cut at 0.8: P 1/2, R 1/2 -> 1/2
    # cut at 0.4: P 2/3, R 1   -> F1 0.8      cut at 0.3: P 1/2, R 1   -> 2/3
    # cut at 0.2: P 2/5, R 1   -> F1 4/7.     Best: 0.4; threshold halfway to 0.3 = 0.35
    m = best_f1_threshold(SCORES, LABELS)
    assert math.isclose(m.threshold, 0.35)
    assert (m.tp, m.fp, m.fn, m.tn) == (2, 1, 0, 2)
    assert math.isclose(m.f1, 0.8)


def test_separable_scores_get_the_midpoint():
    m = best_f1_threshold([0.1, 0.95, 0.3, 0.8], [0, 1, 0, 1])
    assert math.isclose(m.threshold, 0.55) and m.f1 == 1.0  # halfway between 0.3 and 0.8


def test_ties_prefer_the_higher_threshold():
    # cut 0.9: TP 1 FP 0 FN 1 -> F1 2/3; cut 0.2: TP 2 FP 2 FN 0 -> F1 4/6 = 2/3; keep 0.9
    m = best_f1_threshold([0.9, 0.6, 0.5, 0.2], [1, 0, 0, 1])
    assert math.isclose(m.threshold, 0.75) and math.isclose(m.f1, 2 / 3)


def test_equal_scores_are_cut_together():
    # 0.5 appears twice (one success, one failure): the cut "score >= 0.5" takes both
    m = best_f1_threshold([0.5, 0.5, 0.2], [1, 0, 0])
    assert math.isclose(m.threshold, 0.35) and (m.tp, m.fp) == (1, 1)


def test_bad_inputs():
    with pytest.raises(WmrlError, match="no success"):
        best_f1_threshold([0.1, 0.2], [0, 0])
    with pytest.raises(WmrlError, match="as many labels"):
        binary_metrics([0.1, 0.2], [1], 0.5)
    with pytest.raises(WmrlError, match="0 \\(failure\\) or 1"):
        binary_metrics([0.1], [2], 0.5)


def test_cross_validated_threshold_counts_out_of_sample():
    labels = [1, 0, 1, 0, 1, 0, 1, 0]
    # groups 0 and 2 form one fold, 1 and 3 the other; both folds hold both score patterns, so
    # a cut chosen on either fold separates the other
    scores = [0.9, 0.5, 0.9, 0.5, 0.6, 0.2, 0.6, 0.2]
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    in_sample = best_f1_threshold(scores, labels)
    cv = cross_validated_threshold(scores, labels, groups)
    assert cv.threshold == in_sample.threshold  # the threshold to use: fitted on everything
    assert (cv.tp, cv.fp, cv.fn, cv.tn) == (4, 0, 0, 4)
    # now fold A (groups 0, 2) scores 0.9 / 0.5 and fold B (1, 3) 0.6 / 0.2: in sample one cut
    # (0.55) separates all, but a cut chosen on B (0.4) calls A's 0.5 a success and one chosen
    # on A (0.7) misses B's 0.6
    scores = [0.9, 0.5, 0.6, 0.2, 0.9, 0.5, 0.6, 0.2]
    assert best_f1_threshold(scores, labels).f1 == 1.0
    cv = cross_validated_threshold(scores, labels, groups)
    assert (cv.tp, cv.fp, cv.fn, cv.tn) == (2, 2, 2, 2)
    assert cross_validated_threshold([0.9, 0.1], [1, 0], [0, 1]) is None  # a fold without success
    with pytest.raises(WmrlError):
        cross_validated_threshold([0.9, 0.1], [1, 0], [0])


def test_held_success_counts_runs_across_chunks() -> None:
    from wmrl_cli.rewards.calibration import held_success

    scores = np.array([[0.9, 0.9, 0.2, 0.9], [0.9, 0.9, 0.9, 0.9]])
    calls, run = held_success(scores, 0.5, 2, np.array([0, 1]))
    # row 0 starts a run at its first frame; row 1 carries one frame in from the last chunk
    assert calls.tolist() == [[False, True, False, False], [True, True, True, True]]
    assert run.tolist() == [1, 5]
    one, _ = held_success(scores, 0.5, 1, np.zeros(2, dtype=np.int64))
    assert np.array_equal(one, scores >= 0.5)  # k=1: RLinf's rule


def test_held_score_is_where_the_rule_switches() -> None:
    from wmrl_cli.rewards.calibration import held_score, held_success

    scores = np.array([0.2, 0.9, 0.7, 0.95, 0.1])
    assert held_score(scores, 1) == 0.95 and held_score(scores, 2) == 0.7
    assert held_score(scores, 6) == -np.inf  # shorter than k: never a success
    for k in (1, 2, 3):
        t = held_score(scores, k)
        start = np.zeros(1, dtype=np.int64)
        assert held_success(scores[None], t, k, start)[0].any()
        assert not held_success(scores[None], np.nextafter(t, 2.0), k, start)[0].any()


def test_judge_threshold_says_where_it_came_from(tmp_path) -> None:
    """The configured threshold wins; else the reward model's own, named by what it was set on
    (reward_metrics.json); else RLinf's 0.9."""
    model = SimpleNamespace(threshold=0.76)
    assert judge_threshold(0.5, model, tmp_path) == (0.5, "reward_model.success_threshold")
    assert judge_threshold(None, SimpleNamespace(threshold=None), tmp_path)[0] == 0.9
    assert judge_threshold(None, model, tmp_path) == (
        0.76, "the reward model's own, recorded in its config"
    )  # fmt: skip
    for set_on, words in (("frames", "on held-out frames"), ("policy_episodes", "episodes")):
        (tmp_path / "reward_metrics.json").write_text(json.dumps({"threshold_from": set_on}))
        value, source = judge_threshold(None, model, tmp_path)
        assert value == 0.76 and words in source
    for broken in ("{not json", "[1, 2]"):
        (tmp_path / "reward_metrics.json").write_text(broken)
        assert "recorded in its config" in judge_threshold(None, model, tmp_path)[1]


@pytest.mark.parametrize("threshold", [0.9, 0.5, 0.3, 1.0, 0.0, 1.5])
def test_raw_score_threshold_gives_the_rounded_verdict(threshold) -> None:
    """On raw probabilities, the returned threshold calls exactly the frames that the judge
    calls on RLinf's rounded scores at `threshold`; without rounding it is `threshold`."""
    p = np.array([0.0, 0.2, 0.4999, 0.5, np.nextafter(np.float32(0.5), np.float32(1)), 0.7, 1.0])
    p = p.astype(np.float32)
    raw = raw_score_threshold(threshold, round_scores=True)
    np.testing.assert_array_equal(p >= raw, round_scores(p) >= threshold)
    assert raw_score_threshold(threshold, round_scores=False) == threshold


def test_verdict_threshold_is_the_runs_own(tmp_path) -> None:
    """Reports measure RL's verdict: a train-reward run directory's model records where its
    threshold came from; with `round_scores` the threshold on raw scores is p > 0.5."""
    from wmrl_cli.config.reward_model import RewardModelConfig
    from wmrl_cli.jobs.check_models import verdict_threshold

    model_dir = tmp_path / "reward_model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "reward_metrics.json").write_text('{"threshold_from": "policy_episodes"}')
    model = SimpleNamespace(threshold=0.76)
    value, source = verdict_threshold(RewardModelConfig(), model, tmp_path)
    assert value == 0.76 and "policy episodes" in source
    value, source = verdict_threshold(RewardModelConfig(round_scores=True), model, tmp_path)
    assert 0.5 < value < 0.5001 and source.endswith("on scores rounded to 0/1")
    cfg = RewardModelConfig(success_threshold=0.3)
    assert verdict_threshold(cfg, model, None) == (0.3, "reward_model.success_threshold")
