"""Intervals of success rates and paired differences (evaluation/intervals.py), and the
co-evolution report's paired differences between stages."""

from __future__ import annotations

import numpy as np
import pytest

from wmrl_cli.evaluation.intervals import pair_by_init_id, paired_difference, wilson_interval


def test_wilson_interval_known_values_and_edges() -> None:
    low, high = wilson_interval(70, 200)  # the mw-sft base in docs/results.md: 35.0%
    assert round(100 * low, 1) == 28.7 and round(100 * high, 1) == 41.8
    assert wilson_interval(0, 20)[0] == 0.0 and wilson_interval(0, 20)[1] > 0.1
    assert wilson_interval(20, 20)[1] == 1.0 and wilson_interval(20, 20)[0] < 0.9
    assert wilson_interval(0, 0) == (0.0, 1.0)
    narrow, wide = wilson_interval(50, 100), wilson_interval(5, 10)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_paired_difference_cancels_shared_difficulty() -> None:
    rng = np.random.default_rng(0)
    a = rng.random(200) < 0.35
    same = paired_difference(a, a)
    assert same.difference == 0.0 and same.low == 0.0 and same.high == 0.0
    better = a.copy()
    better[np.flatnonzero(~a)[:20]] = True  # 20 of 200 episodes flip to success, none back
    d = paired_difference(a, better)
    assert d.difference == pytest.approx(0.10) and 0.0 < d.low < 0.10 < d.high
    worse = paired_difference(better, a)
    assert worse.difference == pytest.approx(-0.10) and worse.high < 0.0
    with pytest.raises(ValueError, match="equally long"):
        paired_difference(a, a[:-1])


def test_pair_by_init_id_keeps_shared_episodes_in_order() -> None:
    left, right = pair_by_init_id([(3, True), (1, False), (2, True)], [[2, False], [1, True]])
    assert left == [False, True] and right == [True, False]


def test_co_evolve_report_shows_intervals_and_paired_differences(tmp_path) -> None:
    from wmrl_cli.coevolve.report import stage_differences, write_report
    from wmrl_cli.config import resolve_config

    def stage(successes: list[bool]) -> dict:
        n = len(successes)
        return {
            "overall": sum(successes) / n,
            "interval95": list(wilson_interval(sum(successes), n)),
            "per_task": {"a": sum(successes) / n},
            "outcomes": [[i, s] for i, s in enumerate(successes)],
        }

    base = [i % 4 == 0 for i in range(40)]  # 25%
    stage1 = [s or i % 4 == 1 for i, s in enumerate(base)]  # 50%, every base success kept
    stage2 = [s or i % 4 == 2 for i, s in enumerate(stage1)]  # 75%
    frozen = stage1
    evals = {"base": stage(base), "stage1": stage(stage1), "stage2": stage(stage2),
             "frozen_control": stage(frozen)}  # fmt: skip
    diffs = stage_differences(evals)
    assert list(diffs) == ["stage1 - base", "stage2 - base", "stage2 - stage1",
                           "stage2 - frozen_control"]  # fmt: skip
    assert diffs["stage2 - base"]["difference"] == pytest.approx(0.5)
    assert diffs["stage2 - frozen_control"]["low"] > 0
    cached = {"overall": 0.25, "per_task": {"a": 0.25}}  # a stage cached before outcomes
    assert stage_differences({"base": cached, "stage1": stage(stage1)}) == {}
    cfg = resolve_config("mw-coevolve-smoke")
    report = write_report(tmp_path, cfg, evals, {}, {}, {"sft": 1.0}, {"sft": 0})
    text = (tmp_path / "report.md").read_text()
    assert report["differences"] == diffs
    assert "| stage2 - base | +50.0 |" in text and "paired bootstrap" in text
    assert "**25.0 [" in text  # overall with its Wilson interval
    assert report["rl_audit_real_steps"] == 0 and "RL audit" not in text
    # An audited run: its RL stages' real steps are the audit's replays, counted apart.
    cfg.reward_model.audit_with_simulator = True
    steps = {"sft": 100, "eval_base": 50, "stage1": 700, "stage2": 900}
    walls = dict.fromkeys(steps, 1.0)
    activity = {name: {"steps": 1, "kept_groups_fraction": 0.5, "max_grad_norm": 1.0}
                for name in ("stage1", "stage2")}  # fmt: skip
    ranks = {"stage1": 8, "stage2": 8}
    report = write_report(tmp_path, cfg, evals, {}, {}, walls, steps, activity, ranks=ranks)
    assert (
        report["ranks"] == ranks
        and "| stage1 | 1 on 8 ranks | 700 |" in (tmp_path / "report.md").read_text()
    )
    assert report["rl_audit_real_steps"] == 1600
    assert report["total_real_steps_without_evaluation"] == 1700
    assert (
        "| without evaluation and the RL audit | | **100** | |"
        in (tmp_path / "report.md").read_text()
    )
    # The simulator control: its gain beside the method's, its real steps counted apart.
    control = [s or i % 4 == 3 for i, s in enumerate(base)]  # 50%
    evals_sim = {**evals, "simulator_control": stage(control)}
    steps_sim = {**steps, "simulator_control": 5000, "eval_simulator_control": 50}
    activity_sim = {**activity, "simulator_control": {**activity["stage1"], "steps": 2}}
    walls_sim = dict.fromkeys(steps_sim, 1.0)
    report = write_report(tmp_path, cfg, evals_sim, {}, {}, walls_sim, steps_sim, activity_sim)
    assert list(report["differences"])[-2:] == ["simulator_control - base",
                                               "stage2 - simulator_control"]  # fmt: skip
    assert report["simulator_control_real_steps"] == 5000
    assert report["rl_audit_real_steps"] == 1600  # the audit's replays, not the control's steps
    assert report["total_real_steps_without_evaluation"] == 1700
    text = (tmp_path / "report.md").read_text()
    assert "## Against RL in the real simulator" in text and "2 steps of the same RL" in text
    assert "| simulator_control | +25.0 [" in text and "| 5000 |" in text
    # Both arms count from the base policy: its demonstrations (sft, 100) are in neither.
    assert report["base_policy_real_steps"] == 100
    assert "| stage2 (the method) | +50.0 [" in text and "| 0 |" in text
    assert "demonstrations, 100 real steps, left out of both" in text
    # Per-task trust: each RL stage's tasks and those its audit left out, with their calls.
    trust = {
        "stage1": {
            "train_tasks": ["a", "b"],
            "excluded": {"c": {"precision": 0.25, "tp": 1, "fp": 3}},
            "audit": "trust/stage1",
        }
    }
    cfg.coevolve.trust_precision_floor = 0.5
    report = write_report(tmp_path, cfg, evals, {}, {}, walls, steps, activity, trust=trust)
    assert report["trust"] == trust
    text = (tmp_path / "report.md").read_text()
    assert "## Tasks RL trained on (the verdict's audited precision at least 0.5)" in text
    assert "| stage1 | `trust/stage1` | 2 | c (1/4) |" in text
