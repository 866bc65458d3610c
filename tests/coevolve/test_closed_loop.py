"""coevolve.closed_loop_floor's rule (stages.closed_loop_tasks) and what the report says of it."""

from __future__ import annotations

import json

from wmrl_cli.coevolve.report import _closed_loop_lines
from wmrl_cli.coevolve.stages import closed_loop_tasks, task_successes


def test_a_task_whose_loop_succeeds_below_the_floor_of_its_real_rate_is_left_out() -> None:
    imagined = {"a": (4, 25), "b": (13, 25), "c": (0, 25), "d": (5, 25)}
    real = {"a": (13, 20), "b": (5, 20), "c": (0, 20), "d": (8, 20)}  # 65%, 25%, 0%, 40%
    loop = closed_loop_tasks(imagined, real, 0.5)
    # a: 16% < 32.5%: out. b: above real. c: no real success, nothing to lose. d: 20% = half.
    assert loop["train_tasks"] == ["b", "c", "d"]
    assert loop["excluded"] == {"a": {"imagined": [4, 25], "real": [13, 20]}}
    assert closed_loop_tasks(imagined, real, 0.5, within=["a", "c"])["train_tasks"] == ["c"]
    assert closed_loop_tasks(imagined, real, 0.0)["train_tasks"] == ["a", "b", "c", "d"]


def test_task_successes_counts_each_tasks_successful_episodes(tmp_path) -> None:
    rows = [("a", True), ("a", False), ("b", False), ("a", True)]
    episodes = [
        {
            "id": i,
            "file": f"e{i}.npz",
            "task_id": ord(t),
            "task_name": t,
            "length": 8,
            "success": ok,
        }
        for i, (t, ok) in enumerate(rows)
    ]
    index = {"format": "wmrl-episodes", "version": 1, "episodes": episodes}
    (tmp_path / "index.json").write_text(json.dumps(index))
    assert task_successes(str(tmp_path)) == {"a": (2, 3), "b": (0, 1)}


def test_the_report_names_each_left_out_task_with_both_rates() -> None:
    loop = {"train_tasks": ["b"], "excluded": {"a": {"imagined": [4, 25], "real": [13, 20]}}}
    lines = _closed_loop_lines({"stage1": {**loop, "floor": 0.5}})
    assert "| stage1 | 0.5 | 1 | a (4/25 / 13/20) |" in lines
    assert _closed_loop_lines({}) == []
