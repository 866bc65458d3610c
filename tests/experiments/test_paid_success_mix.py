"""experiments/real-steps-to-gain/paid_success_mix.py: the logged paid success as a draw-weighted
mean of per-task paid rates, beside the equal-draws figure."""

from __future__ import annotations

import json

import pytest

from tests.helpers import ROOT


def test_a_draw_leaning_to_the_paid_task_raises_only_the_logged_figure(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
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


def test_the_recorded_steps_are_found_from_the_calls_starts(tmp_path, monkeypatch) -> None:
    """A rank summary written before `first_step` was recorded: the steps are those whose
    calls all started from their step's draws, not the newest call folder's (the last step
    made no call here, and an older step's folder is left from before the restart)."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
    from paid_success_mix import _first_step

    from wmrl_cli.errors import WmrlError

    def calls(step: int, entries: list[int]) -> None:
        folder = tmp_path / "verified_calls" / f"step_{step:06d}"
        folder.mkdir(parents=True)
        episodes = [{"imagined": {"reset_entry": e, "call": "confirmed"}} for e in entries]
        (folder / "index.json").write_text(json.dumps({"episodes": episodes}))

    calls(4, [7])  # before the restart
    calls(5, [1, 2])
    calls(6, [3])  # step 7 made no call
    summary = {"init_ids": [[1, 2], [3, 4], [5, 6]]}
    assert _first_step(tmp_path, [summary]) == 5
    assert _first_step(tmp_path, [{**summary, "first_step": 9}]) == 9  # recorded: as it says
    calls(7, [8])  # a call no step's draws hold
    with pytest.raises(WmrlError, match="cannot tell which steps"):
        _first_step(tmp_path, [summary])
