"""Real steps to gain: an arm's real success at its evaluation steps against the real steps
it had spent, paired with the base evaluation, over seeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.real_steps import learning_curve, mean_over_seeds


def report(successes: list[bool]) -> dict:
    episodes = [{"init_id": i, "seed": i, "success": s} for i, s in enumerate(successes)]
    return {"episodes": episodes, "overall": sum(successes) / len(successes)}


def fake_run(
    root: Path, evals: dict[int, list[bool]], real_per_step: int, verified: bool = False
) -> Path:
    (root / "eval").mkdir(parents=True)
    rows = [{"step": s, "env/real_steps": s * real_per_step} for s in range(1, max(evals) + 1)]
    tally = {"verify/calls": 4.0, "verify/call_rate": 0.4, "verify/confirmed_fraction": 0.75}
    for row in rows if verified else []:  # 10 episodes, 4 calls, 3 confirmed
        row.update(tally, **{"verify/real_steps": real_per_step})
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"ste')
    for step, outcomes in evals.items():
        (root / "eval" / f"step_{step:06d}.json").write_text(json.dumps(report(outcomes)))
    return root


BASE = [False] * 8 + [True] * 2  # 20%


def test_one_run_is_paired_with_the_base_at_each_evaluated_step(tmp_path) -> None:
    run = fake_run(tmp_path / "r", {5: BASE, 10: [True] * 4 + BASE[4:]}, real_per_step=100)
    curve = learning_curve(run, report(BASE), offset_real_steps=1000)
    assert [p.step for p in curve] == [5, 10]
    assert [p.real_steps for p in curve] == [1500, 2000]
    assert curve[0].difference == 0.0 and curve[0].low == curve[0].high == 0.0
    assert curve[1].success == pytest.approx(0.6)
    assert curve[1].difference == pytest.approx(0.4)
    assert curve[1].low > 0.0 and curve[1].high <= 0.8


def test_seeds_average_where_every_run_evaluated(tmp_path) -> None:
    better = [True] * 4 + BASE[4:]
    one = fake_run(tmp_path / "a", {5: better, 10: better}, real_per_step=100)
    two = fake_run(tmp_path / "b", {5: BASE}, real_per_step=300)
    arm = mean_over_seeds([(one, 0), (two, 0)], report(BASE))
    assert [p.step for p in arm] == [5] and arm[0].seeds == 2
    assert arm[0].real_steps == pytest.approx(1000)
    assert arm[0].difference == pytest.approx(0.2)
    elsewhere = {"episodes": [{"init_id": 100, "seed": 100, "success": True}]}
    with pytest.raises(WmrlError, match="share no held-out episode"):
        mean_over_seeds([(one, 0)], elsewhere)
    only_step_3 = fake_run(tmp_path / "c", {3: BASE}, real_per_step=1)
    with pytest.raises(WmrlError, match="no evaluation"):
        mean_over_seeds([(only_step_3, 0), (one, 0)], report(BASE))


def test_seeds_of_a_whole_pipeline_are_each_paired_with_their_own_base(tmp_path) -> None:
    # seed 0's base succeeds on 2 of 10, seed 1's on 6: each run gains 2 episodes (+0.2) over
    # its own base
    base_one = [True] * 4 + BASE[4:]
    one = fake_run(tmp_path / "a", {5: [True] * 2 + BASE[2:]}, real_per_step=100)
    two = fake_run(tmp_path / "b", {5: [True] * 6 + BASE[6:]}, real_per_step=100)
    arm = mean_over_seeds([(one, 0), (two, 0)], [report(BASE), report(base_one)])
    assert arm[0].difference == pytest.approx(0.2) and arm[0].success == pytest.approx(0.6)
    assert 0.0 < arm[0].low < 0.2 < arm[0].high  # no pair ever loses: the interval stays above 0
    # against seed 0's base alone, seed 1 would read +0.6: the mean +0.4
    assert mean_over_seeds([(one, 0), (two, 0)], report(BASE))[0].difference == pytest.approx(0.4)
    with pytest.raises(WmrlError, match="one per run"):
        mean_over_seeds([(one, 0), (two, 0)], [report(BASE)])


def test_the_script_writes_table_json_and_plot(tmp_path) -> None:
    base_dir = tmp_path / "base"
    base_dir.mkdir()
    (base_dir / "report.json").write_text(json.dumps(report(BASE)))
    sim = fake_run(tmp_path / "sim", {5: [True] * 4 + BASE[4:]}, real_per_step=10_000)
    imag = fake_run(tmp_path / "imag", {5: [True] * 2 + BASE[2:]}, real_per_step=50, verified=True)
    out = tmp_path / "out"
    script = ROOT / "experiments" / "real-steps-to-gain" / "real_steps_to_gain.py"
    argv = [sys.executable, str(script), "--base", str(base_dir), "--arm", f"simulator={sim}",
            "--arm", f"verified={imag}", "--offset", "verified=20000", "--out", str(out),
            "--resamples", "200"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    curves = json.loads((out / "curves.json").read_text())
    assert curves["simulator"][0]["real_steps"] == 50_000
    assert curves["verified"][0]["real_steps"] == 20_250
    assert "| verified | 5 | 20,250 | 40.0% | +20.0" in (out / "curves.md").read_text()
    assert (out / "real_steps_to_gain.png").read_bytes()[:4] == b"\x89PNG"
    # the verified arm's tally per step; the simulator arm has none
    verification = (out / "verification.md").read_text()
    assert "| verified 0 | 5 | 4 | 0.40 | 0.75 | 50 | 250 |" in verification
    assert "simulator" not in verification and "| verified 0 | 5 |" in done.stdout
    bad = subprocess.run([*argv[:4], "--arm", "nonsense", "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert bad.returncode != 0 and "NAME=VALUE" in bad.stderr
    # a base per seed: one arm of two runs, each against its own base
    two_bases = [*argv[:3], f"{base_dir},{base_dir}", "--arm", f"simulator={sim},{sim}",
                 "--out", str(out), "--resamples", "200"]  # fmt: skip
    done = subprocess.run(two_bases, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "curves.json").read_text())["simulator"][0]["seeds"] == 2
    unmatched = [*two_bases[:5], f"simulator={sim}", *two_bases[6:]]
    done = subprocess.run(unmatched, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and "1 run(s) for 2 --base evaluations" in done.stderr
