"""The co-evolve report's figures: the success plot with intervals, 0 told from missing, and
the check videos' labelled panes."""

from __future__ import annotations

import numpy as np

from wmrl_cli.coevolve.report import plot_success
from wmrl_cli.evaluation.videos import label_panes


def test_success_plot_draws_zero_and_missing_apart(tmp_path, monkeypatch) -> None:
    import matplotlib.axes

    texts: list[str] = []
    real_text = matplotlib.axes.Axes.text

    def record(self, x, y, s, *args, **kwargs):
        texts.append(s)
        return real_text(self, x, y, s, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "text", record)
    evals = {
        "base": {"overall": 0.25, "interval95": [0.1, 0.5], "per_task": {"a": 0.5, "b": 0.0}},
        "stage1": {"overall": 0.5, "interval95": [0.2, 0.8], "per_task": {"a": 1.0}},
    }
    path = plot_success(evals, tmp_path / "success.png", trials_per_task=4)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert texts.count("0") == 1 and texts.count("n/a") == 1


def test_label_panes_adds_a_band_with_text() -> None:
    frames = np.full((2, 32, 64, 3), 100, np.uint8)
    labelled = label_panes(frames, ["real", "imagined"])
    assert labelled.shape == (2, 46, 64, 3)
    band = labelled[0, :14]
    assert (band < 128).any() and (band == 255).any()  # black text on white
    assert (band[:, :32] < 128).any() and (band[:, 32:] < 128).any()  # a label on each pane
    assert np.array_equal(labelled[:, 14:], frames)


def test_report_draws_the_real_steps_curve_where_stages_were_evaluated(tmp_path) -> None:
    import json

    from wmrl_cli.coevolve.report import CURVE_FILE, _real_steps_curve

    def evaluation(successes: list[bool]) -> dict:
        episodes = [{"init_id": i, "seed": i, "success": s} for i, s in enumerate(successes)]
        return {"episodes": episodes, "overall": sum(successes) / len(successes)}

    (tmp_path / "eval" / "base").mkdir(parents=True)
    base = [False] * 3 + [True]
    (tmp_path / "eval" / "base" / "report.json").write_text(json.dumps(evaluation(base)))
    stage = tmp_path / "stage1"
    (stage / "eval").mkdir(parents=True)
    rows = [{"step": s, "env/real_steps": 1000 + 10 * s} for s in (1, 2)]
    (stage / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step in (1, 2):
        outcomes = [True] * step + base[step:]
        (stage / "eval" / f"step_{step:06d}.json").write_text(json.dumps(evaluation(outcomes)))
    (tmp_path / "stage2").mkdir()  # evaluated only after it: no curve
    lines = _real_steps_curve(tmp_path, ["stage1", "stage2"])
    assert (tmp_path / CURVE_FILE).is_file()
    table = "\n".join(lines)
    assert "| stage1 | 2 | 1,020 | 75.0% | +50.0" in table and "stage2" not in table
    assert _real_steps_curve(tmp_path, ["stage2"]) == []


def test_the_methods_real_steps_split_by_kind(tmp_path) -> None:
    import json

    from wmrl_cli.coevolve.report import _method_steps_by_kind, _rl_table
    from wmrl_cli.rl.activity import rl_activity

    stage = tmp_path / "stage1"
    stage.mkdir()
    rows = [
        {"step": 1, "env/real_steps": 1010, "env/real_steps_data": 1000, "env/real_steps_calls": 6,
         "env/real_steps_exact": 4, "env/real_steps_rollouts": 0},
        {"step": 2, "env/real_steps": 1030, "env/real_steps_data": 1000, "env/real_steps_calls": 20,
         "env/real_steps_exact": 10, "env/real_steps_rollouts": 0},
    ]  # fmt: skip
    # a run still writing (or killed mid-line) leaves a torn last line, which is skipped
    torn = '{"step": 3, "env/real_steps": 10'
    (stage / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)
    act = rl_activity(stage)
    assert act["real_steps_by_kind"] == {"rollouts": 0, "calls": 20, "exact": 10}
    control = {"real_steps_by_kind": {"rollouts": 500, "calls": 0, "exact": 0}}
    split = _method_steps_by_kind(1030, 0, {"stage1": act, "simulator_control": control})
    assert split == {"base": 0, "data": 1000, "rollouts": 0, "calls": 20, "exact": 10}  # no control
    # the base policy's demonstrations, shared with the control, are not the method's data
    split = _method_steps_by_kind(1030, 300, {"stage1": act})
    assert split == {"base": 300, "data": 700, "rollouts": 0, "calls": 20, "exact": 10}
    assert "| 0 / 20 / 10 |" in "\n".join(_rl_table({"stage1": act}))
    assert _method_steps_by_kind(1030, 0, {"stage1": {"steps": 2}}) is None  # logged before it
    assert "Cloned beside RL" not in "\n".join(_rl_table({"stage1": act}))
    for row, loss in zip(rows, (2.5, 2.25)):
        row["train/bc/loss"] = loss  # coevolve.bc_anchor
    (stage / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "stage1 2.500 -> 2.250." in "\n".join(_rl_table({"stage1": rl_activity(stage)}))
