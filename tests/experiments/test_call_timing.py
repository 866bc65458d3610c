"""experiments/judge-benchmark/call_timing.py: each episode's outcome and real steps under the
ending rule (verified imagination today), the going-on rule and the exact verdict; and the
script end to end on a hand-made set."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments" / "judge-benchmark"))
import call_timing  # noqa: E402  (a script of experiments/, not a package)


def _b(text: str) -> np.ndarray:
    return np.array([c == "1" for c in text], bool)


@pytest.mark.parametrize(
    ("calls", "success", "expected"),
    [
        # (outcome, found going on, lead, steps ending, steps going on, steps exact); chunk 2
        ("00000000", "00001111", ("uncalled", False, None, 0, 0, 5)),
        ("00000000", "00000000", ("quiet", False, None, 0, 0, 8)),
        ("00001100", "00001111", ("found", True, None, 5, 5, 5)),  # replay stops at success
        # called at step 2, refuted; called again at 6: the replay goes on to the success
        ("01000100", "00001111", ("early", True, 3, 2, 5, 5)),
        # an early call never repeated: missed both ways, the goer-on spends the first replay
        ("11000000", "00000011", ("early", False, 6, 2, 2, 7)),
        ("00110011", "00000000", ("false", False, None, 4, 8, 8)),  # every call refuted
    ],
)
def test_each_rule_pays_and_spends_per_episode(calls, success, expected) -> None:
    assert call_timing.time_episode(_b(calls), _b(success), 2) == expected


def test_the_chunk_ends_of_calls_are_in_order_and_clipped_to_the_episode() -> None:
    assert call_timing.call_chunk_ends(_b("1100001"), 3) == [3, 7]
    assert call_timing.call_chunk_ends(_b("000"), 3) == []


def test_recall_and_cost_are_against_the_real_successes_and_the_exact_steps() -> None:
    rows = [
        call_timing.Timed("t", True, "found", True, None, 4, 4, 4),
        call_timing.Timed("t", True, "early", True, 2, 1, 6, 6),
        call_timing.Timed("t", True, "uncalled", False, None, 0, 0, 8),
        call_timing.Timed("t", False, "quiet", False, None, 0, 0, 10),
    ]
    row = call_timing.summarize(rows)
    assert (row["real_successes"], row["found"], row["early"], row["uncalled"]) == (3, 1, 1, 1)
    assert row["recall_ends"] == pytest.approx(1 / 3)
    assert row["recall_goes_on"] == pytest.approx(2 / 3)
    assert row["cost_ends"] == pytest.approx(5 / 28) and row["cost_goes_on"] == pytest.approx(
        10 / 28
    )
    assert row["early_lead_median"] == 2.0


def test_times_verdicts_on_a_hand_made_set(tmp_path, capsys) -> None:
    """Every score passes at threshold 0: each episode is called at its first frame, before any
    success, so the ending rule finds none; going on finds every real success."""
    from tests.helpers.episodes import visible_success_episode
    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.rewards.loading import save_reward_model
    from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model

    for label, offset in (("base", 0), ("rl05", 10)):
        episodes = [visible_success_episode(offset + i, succeed=i % 2 == 0) for i in range(6)]
        EpisodeStore(tmp_path / "set" / label).add(episodes)
    save_reward_model(build_resnet_reward_model(ResnetRewConfig(width=4)), tmp_path / "rm")
    out, md, png = tmp_path / "t.json", tmp_path / "t.md", tmp_path / "t.png"
    call_timing.main(["--set", str(tmp_path / "set"), "--judge", f"always={tmp_path / 'rm'}@0:k1",
                      "--out", str(out), "--markdown", str(md)])  # fmt: skip
    row = json.loads(out.read_text())["always"]["tasks"]["all"]
    assert row["episodes"] == 6 and row["real_successes"] == 3
    assert row["found"] == 0 and row["early"] == 3
    assert row["recall_ends"] == 0.0 and row["recall_goes_on"] == 1.0
    assert 0 < row["cost_ends"] < row["cost_goes_on"] <= 1.0
    assert "| all | 3 | 0 | 3 | 0 |" in md.read_text()
    with pytest.raises(SystemExit) as stopped:  # too few real successes per task to plot
        call_timing.main(["--set", str(tmp_path / "set"), "--judge", f"a={tmp_path / 'rm'}@0:k1",
                          "--plot", str(png)])  # fmt: skip
    assert stopped.value.code == 2 and "real successes to plot" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        call_timing.main(["--set", str(tmp_path / "nothing"), "--judge", "a=b"])
    assert stopped.value.code == 2 and "no such set" in capsys.readouterr().err
