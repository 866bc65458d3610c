"""experiments/controllability/compare_scores.py: scores side by side, each centroid error
paired by episode against the first model's, and a bad score file as one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT

SCRIPT = ROOT / "experiments" / "controllability" / "compare_scores.py"
KEYS = (
    "centroid_true@8",
    "centroid_tracks_other@8",
    "centroid_true@16",
    "centroid_tracks_other@16",
)


def _score(path, guidance: float, errors: list[float]) -> str:
    score = {"sampling_steps": 2, "sampler_guidance": guidance}
    score.update({k: 1.0 for k in ("action_gap@8", "response_ratio@8", "psnr@8")})
    score.update({k: sum(errors) / len(errors) for k in KEYS})
    score["per_episode"] = {k: errors for k in KEYS}
    path.write_text(json.dumps(score))
    return str(path)


def test_each_model_is_paired_with_the_first(tmp_path) -> None:
    guided = _score(tmp_path / "a.json", 2.0, [1.0, 2.0, 3.0, 4.0])
    student = _score(tmp_path / "b.json", 1.0, [0.5, 1.5, 2.5, 3.5])  # 0.5 px better, each one
    out = subprocess.run(
        [sys.executable, str(SCRIPT), f"guided={guided}", f"student={student}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| guided | 4 |") and rows[2].startswith("| student | 2 |")
    assert "2.00 (-0.50 [-0.50, -0.50])" in rows[2]


def test_a_bad_score_is_one_line(tmp_path) -> None:
    (tmp_path / "old.json").write_text(json.dumps({"psnr@8": 1.0}))
    for spec in (f"x={tmp_path / 'old.json'}", "no-name", f"y={tmp_path / 'missing.json'}"):
        out = subprocess.run([sys.executable, str(SCRIPT), spec], capture_output=True, text=True)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), spec
