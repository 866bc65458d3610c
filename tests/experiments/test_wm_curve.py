"""experiments/world-model-budget/wm_curve.py: a world model's validation rows as a learning
curve (a resumed run's repeated step read once, a torn line skipped), and bad input as one line
with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT

SCRIPT = ROOT / "experiments" / "world-model-budget" / "wm_curve.py"


def _run(path, rows: list[dict]) -> str:
    path.mkdir()
    lines = "".join(json.dumps(r) + "\n" for r in rows)
    (path / "metrics.jsonl").write_text(lines + '{"step": 9, "eval/wm/psnr@8": 3')  # torn
    return str(path)


def test_validation_rows_make_a_curve_table_and_plot(tmp_path) -> None:
    run = _run(tmp_path / "wm", [
        {"step": 50, "train/wm/loss": 0.5},  # a training row: not on the curve
        {"step": 400, "eval/wm/psnr@8": 20.0, "eval/wm/action_gap@8": 1.0},
        {"step": 800, "eval/wm/psnr@8": 21.0, "eval/wm/action_gap@8": 1.5},
        {"step": 800, "eval/wm/psnr@8": 22.0, "eval/wm/action_gap@8": 2.0},  # resumed: last
    ])  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), f"base={run}", "--metric", "psnr@8", "--metric",
         "action_gap@8", "--metric", "response_ratio@8", "--out", str(out)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [line for line in done.stdout.splitlines() if line.startswith("| base")]
    assert rows == ["| base | 400 | 20.00 | 1.00 | - |", "| base | 800 | 22.00 | 2.00 | - |"]
    assert (out / "curve.md").read_text() == done.stdout
    assert (out / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_a_run_without_validation_is_one_line_exit_2(tmp_path) -> None:
    run = _run(tmp_path / "wm", [{"step": 50, "train/wm/loss": 0.5}])
    for spec in (f"base={run}", "no-equals-sign"):
        done = subprocess.run([sys.executable, str(SCRIPT), spec], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("error: ")
