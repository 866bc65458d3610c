"""experiments/real-steps-to-gain/task_split.py: per-task held-out successes and the sampler's
counts per arm."""

from __future__ import annotations

import json

from tests.helpers import ROOT


def test_each_arm_reads_its_steps_evaluation_and_sampler_state(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
    from task_split import markdown, task_split

    def report(path, rates):
        path.parent.mkdir(parents=True, exist_ok=True)
        per_task = dict(zip(["a", "b"], rates))
        path.write_text(json.dumps({"trials_per_task": 20, "per_task": per_task}))

    report(tmp_path / "base" / "report.json", [0.2, 0.0])
    report(tmp_path / "arm" / "eval" / "step_000005.json", [0.4, 0.35])
    state = tmp_path / "arm" / "checkpoints" / "step_000005" / "training_state" / "state.json"
    state.parent.mkdir(parents=True)
    sampler = {"trials": [3.0, 12.5], "successes": [1.0, 4.0]}
    state.write_text(json.dumps({"extra": {"sampler": sampler}}))
    report(tmp_path / "uniform" / "eval" / "step_000005.json", [0.1, 0.0])
    arms = {"arm": tmp_path / "arm", "uniform": tmp_path / "uniform"}
    result = task_split(tmp_path / "base", arms, 5)
    assert result["held_out"] == {"base": [4, 0], "arm": [8, 7], "uniform": [2, 0]}
    assert result["sampler"] == {"arm": sampler}  # the uniform arm has no sampler state
    assert "| b | 12.5 / 4.0 |" in markdown(result)
