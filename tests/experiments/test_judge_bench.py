"""experiments/judge-benchmark/judge_bench.py: how one episode is judged, the per-task rates
and the target, and the script end to end on a tiny set (a base and an "RL" policy rolled in an
untrained world model, labelled by the simulator) scored with a tiny judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments" / "judge-benchmark"))
import judge_bench  # noqa: E402  (a script of experiments/, not a package)
from judge_bench import Judged  # noqa: E402


@pytest.mark.parametrize(
    ("calls", "success", "expected"),
    [
        ([0, 0, 0, 0], [0, 0, 1, 1], (False, False)),  # never called: a miss
        ([0, 0, 1, 1], [0, 0, 1, 1], (True, True)),  # called when it succeeds
        ([0, 1, 0, 0], [0, 0, 0, 1], (True, False)),  # called in the first chunk, true after it
        ([1, 0, 0, 0], [0, 1, 0, 0], (True, True)),  # true within the called chunk
        ([0, 0, 0, 1], [1, 0, 0, 0], (True, True)),  # a success that held and ended earlier
    ],
)
def test_a_call_is_true_when_the_simulator_succeeded_by_the_end_of_its_chunk(
    calls, success, expected
) -> None:
    assert judge_bench.judge_episode(np.array(calls, bool), np.array(success, bool), 2) == expected


def test_recall_counts_only_the_real_successes_a_true_call_pays() -> None:
    judged = [
        Judged("a", "rl", real=True, called=True, true_call=True),
        Judged("a", "rl", real=True, called=True, true_call=False),  # called too early: unpaid
        Judged("a", "rl", real=True, called=False, true_call=False),
        Judged("a", "rl", real=False, called=True, true_call=False),
        Judged("a", "rl", real=False, called=False, true_call=False),
    ]
    row = judge_bench.rates(judged)
    assert (row["calls"], row["true_calls"], row["real_successes"], row["found"]) == (3, 1, 3, 1)
    assert row["precision"] == pytest.approx(1 / 3) and row["recall"] == pytest.approx(1 / 3)
    assert row["f1"] == pytest.approx(1 / 3)
    low, high = judge_bench.f1_interval(judged)
    assert 0.0 <= low <= row["f1"] <= high <= 1.0
    assert judge_bench.rates([])["f1"] is None


def test_the_target_needs_every_eligible_task_and_six_of_them() -> None:
    def row(real: int, precision: float, recall: float) -> dict:
        return {"real_successes": real, "precision": precision, "recall": recall}

    good = {f"t{i}": row(10, 0.9, 0.8) for i in range(6)}
    assert judge_bench.meets_target({**good, "all": row(60, 0.9, 0.8)})["met"]
    assert not judge_bench.meets_target({**good, "t0": row(10, 0.9, 0.5)})["met"]
    few = {**good, "t0": row(9, 0.0, 0.0)}  # too few real successes: not judged, 5 tasks left
    assert judge_bench.meets_target(few)["eligible"] == [f"t{i}" for i in range(1, 6)]
    assert not judge_bench.meets_target(few)["met"]


def test_a_bad_judge_spec_is_one_line() -> None:
    assert judge_bench.parse_judge("fit=runs/rm@task")[2] == judge_bench.PER_TASK
    assert judge_bench.parse_judge("today=runs/rm@0.9:k8")[1:] == (
        Path("runs/rm"),
        0.9,
        8,
    )
    with pytest.raises(judge_bench.WmrlError, match="expected NAME=RM"):
        judge_bench.parse_judge("runs/rm")


def test_scores_verdicts_per_task_and_group(tmp_path, capsys) -> None:
    """A set of hand-made stores; verdicts at thresholds no score passes (never calls) and every
    score passes (calls every episode at its first frame, before any success)."""
    from tests.helpers.episodes import visible_success_episode
    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.rewards.loading import save_reward_model
    from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model

    for label, offset in (("base", 0), ("rl05", 10)):
        episodes = [visible_success_episode(offset + i, succeed=i % 2 == 0) for i in range(6)]
        EpisodeStore(tmp_path / "set" / label).add(episodes)
    save_reward_model(build_resnet_reward_model(ResnetRewConfig(width=4)), tmp_path / "rm")
    rm, out = tmp_path / "rm", tmp_path / "result.json"
    judges = ["--judge", f"never={rm}@1.5", "--judge", f"always={rm}@0:k1"]
    judges += ["--judge", f"fitted={rm}@task:k1"]
    judge_bench.main(["score", "--set", str(tmp_path / "set"), *judges, "--out", str(out)])
    body = json.loads(out.read_text())
    for group in ("base", "rl"):
        never, always = (
            body["never"]["groups"][group]["all"],
            body["always"]["groups"][group]["all"],
        )
        assert (never["episodes"], never["real_successes"], never["calls"]) == (6, 3, 0)
        assert never["precision"] is None and never["recall"] == 0.0
        assert (always["calls"], always["true_calls"], always["found"]) == (6, 0, 0)
        assert always["precision"] == 0.0 and always["f1"] == 0.0
    assert "| rl | all | 6 | 3 | 6 | 0.00 [0.00, 0.39] |" in capsys.readouterr().out
    fitted = body["fitted"]
    assert fitted["threshold"] == "per task" and set(fitted["task_thresholds"]) == {"t0", "t1"}
    assert fitted["groups"]["base"]["all"]["episodes"] == 6  # each judged out of sample
    assert 0.0 <= body["never"]["groups"]["rl"]["all"]["auc"] <= 1.0

    only = tmp_path / "only.json"
    judge_bench.main(["score", "--set", str(tmp_path / "set"), *judges[:2], "--only", "rl05",
                      "--out", str(only)])  # fmt: skip
    assert set(json.loads(only.read_text())["never"]["groups"]) == {"rl"}
    with pytest.raises(judge_bench.WmrlError, match="rl99 not among the set's policies"):
        judge_bench.main(["score", "--set", str(tmp_path / "set"), *judges[:2], "--only", "rl99"])


def test_builds_of_other_labels_run_side_by_side(tmp_path, monkeypatch) -> None:
    """The base policy's rollouts start before RL has made its checkpoints: two builds of
    different labels into one set each keep what the other recorded in the manifest."""
    out = tmp_path / "set"
    args = ["build", "--world-model", "wm", "--reset-set", "demos", "--out", str(out)]

    def rollout(command, check):
        target = Path(command[command.index("--out") + 1])
        target.mkdir(parents=True)
        if target.name == "rl05":  # the base build records its policy while rl05 rolls
            monkeypatch.setattr(judge_bench.subprocess, "run", plain)
            judge_bench.main([*args, "--policy", "base=p"])
        return subprocess.CompletedProcess(command, 0)

    def plain(command, check):
        Path(command[command.index("--out") + 1]).mkdir(parents=True)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(judge_bench.subprocess, "run", rollout)
    judge_bench.main([*args, "--policy", "rl05=q", "--policy", "rl10=r"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["policies"]) == {"base", "rl05", "rl10"}
    assert manifest["policies"]["base"]["group"] == "base"


def test_score_needs_the_base_policy(tmp_path) -> None:
    """@task thresholds are fitted on the base group: a set without one is refused."""
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "manifest.json").write_text(
        json.dumps({"policies": {"rl05": {"path": "q", "group": "rl"}}})
    )
    with pytest.raises(judge_bench.WmrlError, match="no 'base' policy"):
        judge_bench.main(["score", "--set", str(tmp_path / "set"), "--judge", "t=rm"])


def test_a_build_cut_short_rolls_the_unfinished_policy_again(tmp_path, monkeypatch) -> None:
    """A set build killed while rolling `rl05` left a partial store that `wmrl rollout` refuses
    (files it did not finish); the manifest says which policies are done, so the next build
    skips those and rolls the unfinished one again from an empty folder."""
    out = tmp_path / "set"
    rolled = []

    def rollout(command, check):
        target = Path(command[command.index("--out") + 1])
        assert not target.exists()  # the partial store is gone before the rollout starts
        target.mkdir(parents=True)
        rolled.append(target.name)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(judge_bench.subprocess, "run", rollout)
    args = ["build", "--world-model", "wm", "--reset-set", "demos", "--out", str(out)]
    judge_bench.main([*args, "--policy", "base=p"])
    (out / "rl05").mkdir()
    (out / "rl05" / "config.yaml").write_text("cut short\n")
    judge_bench.main([*args, "--policy", "base=p", "--policy", "rl05=q"])
    assert rolled == ["base", "rl05"]
    assert set(json.loads((out / "manifest.json").read_text())["policies"]) == {"base", "rl05"}


def test_ranking_auc_counts_ties_half() -> None:
    from judge_bench import Scored, ranking_auc

    def episode(top: float, success: bool) -> Scored:
        return Scored("t", "rl", np.array([0.0, top]), np.array([False, success]), 2)

    assert ranking_auc([episode(0.9, True), episode(0.1, False)], 1) == 1.0
    assert ranking_auc([episode(0.1, True), episode(0.9, False)], 1) == 0.0
    assert ranking_auc([episode(0.5, True), episode(0.5, False)], 1) == 0.5
    assert ranking_auc([episode(0.5, True)], 1) is None  # one outcome only


def test_a_per_task_threshold_is_fitted_where_the_successes_score_high() -> None:
    """Two tasks whose successes show at different score levels: one shared threshold misses
    one task's successes; per task each is called, and the RL group is judged at the base's."""
    from judge_bench import Scored, best_threshold, judge

    def episode(task: str, group: str, level: float, success: bool) -> Scored:
        scores = np.full(8, 0.1)
        flags = np.zeros(8, bool)
        if success:
            scores[4:], flags[4:] = level, True
        return Scored(task, group, scores, flags, 4)

    episodes = [
        episode(task, group, level, i % 2 == 0)
        for task, level in (("high", 0.9), ("low", 0.3))
        for group in ("base", "rl")
        for i in range(8)
    ]
    shared = judge_bench.rates(judge(episodes, {"high": 0.5, "low": 0.5}, 1))
    assert shared["recall"] == pytest.approx(0.5)
    base_low = [ep for ep in episodes if ep.task == "low" and ep.group == "base"]
    assert 0.1 < best_threshold(base_low, 1, default=0.5) <= 0.3
    judged, fitted = judge_bench.task_thresholds_judged(episodes, 1, default=0.5)
    rl = judge_bench.rates([j for j in judged if j.group == "rl"])
    assert rl["recall"] == 1.0 and rl["precision"] == 1.0
    assert fitted["high"] > fitted["low"]


@pytest.mark.slow  # about 2 minutes: an SFT policy, two labelled rollouts, two verdicts
def test_builds_and_scores_a_tiny_set(assets, tmp_path) -> None:
    preset = tmp_path / "preset.yaml"
    preset.write_text(
        "simulator: {suite: mw3, image_size: 32, num_workers: 0, num_envs: 2}\n"
        "algorithm: {max_episode_steps: 16}\n"
        "world_model: {num_inference_steps: 1}\n"
    )
    out = tmp_path / "set"
    build = [
        sys.executable, "experiments/judge-benchmark/judge_bench.py", "build",
        "--world-model", str(assets / "wm"), "--reset-set", str(assets / "demos"),
        "--policy", f"base={assets / 'sft'}", "--policy", f"rl02={assets / 'sft'}",
        "-n", "1", "--preset", str(preset), "--out", str(out),
    ]  # fmt: skip
    made = subprocess.run(build, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["policies"]["base"]["group"] == "base"
    assert manifest["policies"]["rl02"]["group"] == "rl" and manifest["bytes"] > 0

    result = tmp_path / "result.json"
    score = [
        sys.executable, "experiments/judge-benchmark/judge_bench.py", "score", "--set", str(out),
        "--judge", f"tiny={assets / 'rm'}", "--judge", f"strict={assets / 'rm'}@0.99:k2",
        "--preset", str(preset), "--out", str(result), "--threads", "1",
    ]  # fmt: skip
    scored = subprocess.run(score, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert scored.returncode == 0, scored.stdout[-2000:] + scored.stderr[-3000:]
    assert "| rl | all | 3 |" in scored.stdout
    body = json.loads(result.read_text())
    assert body["strict"]["threshold"] == 0.99 and body["strict"]["frames"] == 2
    assert body["tiny"]["threshold"] == 0.5  # the model's own
    for name in ("tiny", "strict"):
        groups = body[name]["groups"]
        assert set(groups) == {"base", "rl"}
        assert groups["base"]["all"]["episodes"] == groups["rl"]["all"]["episodes"] == 3
        assert body[name]["target_rl"]["met"] is False  # too few real successes to judge

    bad = subprocess.run(
        [*score[:5], "--judge", "no-equals-sign"], cwd=ROOT, capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: bad --judge")


def _dry_run(name: str, seed: str, runs: Path, rl: str | None = None):
    """experiments/judge-benchmark/NAME --dry-run, with RL set when given."""
    env = {**os.environ, **({"RL": rl} if rl else {})}
    script = ROOT / "experiments" / "judge-benchmark" / name
    return subprocess.run(
        ["bash", str(script), seed, str(runs), "--dry-run"], capture_output=True, text=True, env=env
    )


def test_the_set_script_runs_the_recipe_in_order(tmp_path) -> None:
    """judge_bench_set.sh --dry-run: the commands it would run, in order."""
    script = ROOT / "experiments" / "judge-benchmark" / "judge_bench_set.sh"
    proc = subprocess.run(
        ["bash", str(script), "3", str(tmp_path), "--dry-run"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert len(commands) == 4
    coevolve, exact, build, score = commands
    assert f"--seed 3 --out {tmp_path}/ce-long-verified-s3" in coevolve
    assert "--set reward_model.source=simulator" in exact and "--steps 20" in exact
    assert f"--preset {tmp_path}/ce-long-verified-s3/stage1/config.yaml" in exact
    for label, step in (("rl05", 5), ("rl10", 10), ("rl20", 20)):
        assert f"{label}={tmp_path}/exact-long-s3/checkpoints/step_{step:06d}/model" in build
    assert "--seed 1000" in build and "--set simulator.num_envs=32" in build and "@task" in score

    lever = subprocess.run(
        ["bash", str(script), "3", str(tmp_path), "--dry-run"],
        capture_output=True,
        text=True,
        env={**os.environ, "RL": "simulator"},
    )
    exact = [line for line in lever.stdout.splitlines() if "train-policy" in line][0]
    assert "--env simulator" in exact and "reward_model.source=simulator" not in exact
    # the stage's imagined inputs cleared: train-policy --env simulator refuses them (2026-11-29)
    for cleared in ("world_model.path=null", "reward_model.path=null", "reward_model.source=model"):
        assert f"--set {cleared}" in exact
    assert f"--out {tmp_path}/simulator-long-s3" in exact
    bad = subprocess.run(
        ["bash", str(script), "3", str(tmp_path), "--dry-run"],
        capture_output=True,
        text=True,
        env={**os.environ, "RL": "model"},
    )
    assert bad.returncode == 2 and "expected exact or simulator" in bad.stderr


def test_the_candidates_script_trains_then_scores_out_of_sample(tmp_path) -> None:
    """judge_candidates.sh --dry-run: the three candidates train on today's judge's data
    plus the set's base and rl05 episodes; every verdict is scored, then timed, on rl10 and
    rl20 only."""
    proc = _dry_run("judge_candidates.sh", "2", tmp_path, "simulator")
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert len(commands) == 5
    refined, clip, latent, score, timing = commands
    assert "--kind latent --world-model <world_model.path of" in latent
    assert f"latent-per-task={tmp_path}/judge-latent-simulator-s2@task" in score
    for trained in (refined, clip, latent):
        assert f"--data {tmp_path}/judge-set-simulator-s2/rl05" in trained
        assert f"--data {tmp_path}/judge-set-simulator-s2/base" in trained
        assert "rl10" not in trained and "rl20" not in trained
    assert "--init" in refined and "--kind videomae" in clip
    assert "--only rl10,rl20" in score and f"refined={tmp_path}/judge-refined-simulator-s2" in score
    assert "call_timing.py" in timing and "--only rl10,rl20" in timing
    assert f"clip-per-task={tmp_path}/judge-clip-simulator-s2@task" in timing


def test_the_summary_sets_verdicts_side_by_side(tmp_path, capsys) -> None:
    """summary.py: a row per task of the RL group, `P / R / AUC` per verdict in the order of the
    files (a later file's verdict of the same name replaces the earlier), the target's tasks."""
    sys.path.insert(0, str(ROOT / "experiments" / "judge-benchmark"))
    import summary

    def row(successes, precision, recall, auc):
        return {"episodes": 32, "real_successes": successes, "precision": precision,
                "recall": recall, "auc": auc}  # fmt: skip

    def verdict(recall):
        rl = {"a": row(12, 0.9, recall, 0.8), "b": row(0, None, None, None),
              "all": row(12, 0.9, recall, 0.8)}  # fmt: skip
        target = {"eligible": ["a"], "passed": ["a"] if recall >= 0.7 else [], "met": False}
        return {"groups": {"rl": rl}, "target_rl": target}

    first, second = tmp_path / "scores.json", tmp_path / "candidates.json"
    first.write_text(json.dumps({"today": verdict(0.25), "clip": verdict(0.1)}))
    second.write_text(json.dumps({"clip": verdict(0.75)}))
    summary.main(
        [
            str(first),
            str(second),
            "--markdown",
            str(tmp_path / "t.md"),
            "--plot",
            str(tmp_path / "p.png"),
        ]
    )
    assert (tmp_path / "p.png").stat().st_size > 0
    lines = (tmp_path / "t.md").read_text().splitlines()
    assert (
        lines[0] == "| task | episodes | real successes | today: P / R / AUC | clip: P / R / AUC |"
    )
    assert lines[2] == "| a | 32 | 12 | 0.90 / 0.25 / 0.80 | 0.90 / 0.75 / 0.80 |"
    assert lines[3] == "| b | 32 | 0 | - / - / - | - / - / - |"
    assert lines[4].startswith("| all |")
    assert lines[-1].endswith("today: 0 of 1; clip: 1 of 1 (a).")
    with pytest.raises(summary.WmrlError, match="no such scores file"):
        summary.main([str(tmp_path / "missing.json")])


def test_the_simulator_lever_passes_train_policys_input_check(tmp_path) -> None:
    """RL=simulator's train-policy, on a stage config that names a world model, a judge and a
    verified verdict: the settings the script clears pass `--env simulator`'s input check, which
    refused the stage's config as it was (2026-11-29: the lever had only been dry-run)."""
    from wmrl_cli.config import resolve_config
    from wmrl_cli.config.loading import dump_config
    from wmrl_cli.errors import ConfigError
    from wmrl_cli.jobs.inputs import check_simulator_rl

    imagined = ["world_model.path=wm", "reward_model.path=rm", "reward_model.source=verified"]
    stage = tmp_path / "ce-long-verified-s0" / "stage1" / "config.yaml"
    stage.parent.mkdir(parents=True)
    stage.write_text(dump_config(resolve_config("mw-coevolve-long", overrides=imagined)))
    proc = _dry_run("judge_bench_set.sh", "0", tmp_path, "simulator")
    command = [line for line in proc.stdout.splitlines() if "train-policy" in line][0].split()
    sets = [command[i + 1] for i, word in enumerate(command) if word == "--set"]
    simulator = {"algorithm.env": "simulator"}
    check_simulator_rl(resolve_config(str(stage), options=simulator, overrides=sets))
    with pytest.raises(ConfigError, match="uses no world model"):
        check_simulator_rl(resolve_config(str(stage), options=simulator))
