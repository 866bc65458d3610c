"""Thresholds by best F1, and precision / recall / F1 at a threshold, on hand-made scores."""

import math

import pytest

from wmrl_cli.errors import WmrlError
from wmrl_cli.rewards.calibration import best_f1_threshold, binary_metrics

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
