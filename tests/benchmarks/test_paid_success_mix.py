"""benchmarks/paid_success_mix.py: the logged paid success as a draw-weighted mean of per-task
paid rates, beside the equal-draws figure."""

from __future__ import annotations

import pytest

from tests.helpers import ROOT


def test_a_draw_leaning_to_the_paid_task_raises_only_the_logged_figure(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from paid_success_mix import mix_split

    # task 0 paid half the time, task 1 never; step 2 draws task 0 three times as often
    drawn = [[0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1]]
    confirmed = [[0], [0, 0, 0]]
    result = mix_split(drawn, confirmed, num_tasks=3)
    assert result["draws"] == [8, 4, 0] and result["confirmed"] == [4, 0, 0]
    assert result["rate"] == [0.5, 0.0, 0.0]
    assert result["logged"] == pytest.approx(4 / 12)
    assert result["equal_draws"] == pytest.approx(0.25)  # task 2, never drawn, is left out
    first, second = result["steps"]
    assert first["logged"] == 0.25 and second["logged"] == 3 / 8
    assert first["at_pooled_rates"] == 0.25 and second["at_pooled_rates"] == 3 / 8
    assert second["draw_share"] == [0.75, 0.25, 0.0]
