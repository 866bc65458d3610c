"""The per-task tally of the judge against the simulator on RL's training episodes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wmrl_cli.rl.judge_audit import JudgeAudit


def test_each_episode_lands_in_its_tasks_cell() -> None:
    audit = JudgeAudit(["press", "open"])
    # press: judged and real, judged only (a hack), judged only; open: missed, neither
    audit.add(np.array([0, 0, 0, 1, 1]), np.array([1, 1, 1, 0, 0]), np.array([1, 0, 0, 1, 0]))
    s = audit.summary()
    press, opened = s["tasks"]["press"], s["tasks"]["open"]
    assert (press["tp"], press["fp"], press["fn"], press["tn"]) == (1, 2, 0, 0)
    assert press["precision"] == pytest.approx(1 / 3) and press["recall"] == 1.0
    assert press["judged_rate"] == 1.0 and press["real_rate"] == pytest.approx(1 / 3)
    assert (opened["tp"], opened["fp"], opened["fn"], opened["tn"]) == (0, 0, 1, 1)
    assert opened["precision"] is None and opened["recall"] == 0.0
    assert s["overall"]["episodes"] == 5 and audit.episodes == 5


def test_the_tally_survives_a_checkpoint_round_trip(tmp_path) -> None:
    audit = JudgeAudit(["a", "b"])
    audit.add(np.array([1]), np.array([True]), np.array([False]))
    state = json.loads(json.dumps(audit.state_dict()))  # what the checkpoint stores
    resumed = JudgeAudit(["a", "b"])
    resumed.load_state_dict(state)
    resumed.add(np.array([1]), np.array([True]), np.array([True]))
    assert resumed.counts.tolist() == [[0, 0, 0, 0], [1, 1, 0, 0]]
    other_suite = JudgeAudit(["x"])
    other_suite.load_state_dict(state)  # names differ: counting starts afresh
    assert other_suite.episodes == 0
    path = resumed.write(tmp_path)
    assert json.loads(path.read_text())["tasks"]["b"]["fp"] == 1
    assert not list(tmp_path.glob(".*tmp"))


def test_task_ids_beyond_the_names_get_their_own_rows() -> None:
    audit = JudgeAudit([])
    audit.add(np.array([2]), np.array([False]), np.array([True]))
    assert audit.task_names == ["task 0", "task 1", "task 2"]
    assert audit.summary()["tasks"]["task 2"]["fn"] == 1


def test_false_calls_split_by_whether_the_real_frame_passes_too(tmp_path) -> None:
    audit = JudgeAudit(["press", "open"])
    # press: a true call, two false calls (one whose real frame the judge passes too); open:
    # a false call whose real frame does not pass; the real-frame flag of a true call is ignored
    audit.add(
        np.array([0, 0, 0, 1]),
        np.array([1, 1, 1, 1]),
        np.array([1, 0, 0, 0]),
        np.array([1, 1, 0, 0]),
    )
    s = audit.summary()
    press, opened = s["tasks"]["press"], s["tasks"]["open"]
    assert (press["fp_on_real_frame"], press["fp_imagined_only"]) == (1, 1)
    assert (opened["fp_on_real_frame"], opened["fp_imagined_only"]) == (0, 1)
    assert (s["overall"]["fp_on_real_frame"], s["overall"]["fp_imagined_only"]) == (1, 2)
    resumed = JudgeAudit(["press", "open"])
    resumed.load_state_dict(json.loads(json.dumps(audit.state_dict())))
    assert resumed.summary() == s
    unsplit = JudgeAudit(["press"])  # a clip judge: nothing recorded, no split reported
    unsplit.add(np.array([0]), np.array([1]), np.array([0]))
    assert "fp_on_real_frame" not in unsplit.summary()["overall"]
    assert "fp_on_real_frame" not in unsplit.state_dict()


def test_trusted_tasks_keep_the_verdicts_true_often_enough_and_the_silent() -> None:
    from wmrl_cli.rl.judge_audit import trusted_tasks

    audit = JudgeAudit(["often-true", "mostly-false", "silent", "at-floor"])
    for task, (tp, fp) in enumerate([(6, 3), (1, 2), (0, 0), (2, 2)]):
        audit.add([task] * (tp + fp + 3), [True] * (tp + fp) + [False] * 3,
                  [True] * tp + [False] * (fp + 3))  # fmt: skip
    rows = audit.summary()["tasks"]
    assert trusted_tasks(rows, 0.5) == ["often-true", "silent", "at-floor"]
    assert trusted_tasks(rows, 0.7) == ["silent"]
    assert trusted_tasks(rows, 0.0) == list(rows)
