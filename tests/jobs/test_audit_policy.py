"""`wmrl eval --audit`: the judge's verdict on a fixed policy's imagined episodes against the
simulator's replay of the same actions, with no update."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.helpers.train_policy import model_args, options
from wmrl_cli.cli.app import app

runner = CliRunner()


def audit_args(root, out, per_task: int, *extra: str) -> list[str]:
    """eval --audit of the tiny SFT policy in the tiny imagined env (mw3, 4 envs a batch)."""
    sets = options(out, 1, "grpo", 4, eval_trials=0)[4:]  # the config, without --steps/--out
    return [
        "eval",
        "--audit",
        *model_args(root),
        "--set",
        f"world_model.reset_set={root / 'demos'}",
        "-n",
        str(per_task),
        "--out",
        str(out),
        *sets,
        *extra,
    ]


def _summary(run_dir):
    return json.loads((run_dir / "judge_audit.json").read_text())


def test_the_audit_counts_every_episode_once_per_task(assets, tmp_path) -> None:
    # 3 tasks x 3 episodes in batches of 4: the last batch is padded, the padding not counted.
    result = runner.invoke(app, audit_args(assets, tmp_path / "a", 3))
    assert result.exit_code == 0, result.output
    summary = _summary(tmp_path / "a")
    assert [row["episodes"] for row in summary["tasks"].values()] == [3, 3, 3]
    overall = summary["overall"]
    assert overall["tp"] + overall["fp"] + overall["fn"] + overall["tn"] == 9
    # A single-frame judge: every false call is the judge's or the world model's.
    assert overall["fp_on_real_frame"] + overall["fp_imagined_only"] == overall["fp"]
    assert summary["real_steps"] >= 9  # every counted episode replayed, at least a step each
    assert "the judge on the policy's imagined episodes" in result.output
    # Seeded: the same starts, samples and noise give the same tally.
    again = runner.invoke(app, [*audit_args(assets, tmp_path / "a", 3), "--overwrite"])
    assert again.exit_code == 0, again.output
    assert _summary(tmp_path / "a") == summary


@pytest.mark.parametrize(("threshold", "judged"), [(0.0, 1.0), (1.0, 0.0)])
def test_the_audit_reports_the_verdict_rl_would_train_on(
    assets,
    tmp_path,
    threshold: float,
    judged: float,
) -> None:
    """Every score passes a threshold of 0 (each episode called in its first chunk), and an
    untrained judge's scores stay below 1: the tally follows the configured verdict."""
    out = tmp_path / "t"
    extra = ["--set", f"reward_model.success_threshold={threshold}"]
    result = runner.invoke(app, audit_args(assets, out, 2, *extra))
    assert result.exit_code == 0, result.output
    overall = _summary(out)["overall"]
    assert overall["judged_rate"] == judged
    if judged == 0.0:
        assert overall["tp"] == overall["fp"] == 0 and overall["precision"] is None


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--set", "algorithm.env=simulator"], "algorithm.env"),
        (["--data", "somewhere"], "--audit"),
        (["--save-video"], "--audit"),
    ],
)
def test_bad_audit_input_is_one_line_and_leaves_nothing(
    assets,
    tmp_path,
    extra: list[str],
    needle: str,
) -> None:
    out = tmp_path / "bad"
    result = runner.invoke(app, audit_args(assets, out, 1, *extra))
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.slow  # the suite's 15-minute budget
def test_a_call_confirmed_by_another_world_model(assets, tmp_path) -> None:
    """reward_model.confirm_world_models: the confirming draw comes from the world model named
    (here the same one loaded again); a call counts only once it repeats there, so no more
    episodes are called than without the confirmation."""
    alone = runner.invoke(app, audit_args(assets, tmp_path / "alone", 2))
    assert alone.exit_code == 0, alone.output
    extra = ["--set", "reward_model.confirm_draws=1",
             "--set", f"reward_model.confirm_world_models=[{assets / 'wm'}]"]  # fmt: skip
    confirmed = runner.invoke(app, audit_args(assets, tmp_path / "confirmed", 2, *extra))
    assert confirmed.exit_code == 0, confirmed.output
    judged = [_summary(tmp_path / d)["overall"]["judged_rate"] for d in ("alone", "confirmed")]
    assert judged[1] <= judged[0]
    wrong = ["--set", f"reward_model.confirm_world_models=[{assets / 'wm'}]"]
    refused = runner.invoke(app, audit_args(assets, tmp_path / "wrong", 2, *wrong))
    assert refused.exit_code == 2 and "one per confirming draw" in refused.output
    assert not (tmp_path / "wrong").exists()


def test_coevolve_acceptance_audits_each_world_model_on_the_same_starts(
    assets,
    tmp_path,
) -> None:
    """co-evolve's acceptance (coevolve/stages.py: audit_world_models): each world model runs the
    same seeded episodes, so the same world model named twice gets the same tally, and the
    current one (first) wins the tie."""
    from wmrl_cli.coevolve.stages import audit_world_models
    from wmrl_cli.config import resolve_config

    sets = options(tmp_path / "unused", 1, "grpo", 4, eval_trials=0)[4:]
    cfg = resolve_config(overrides=sets[1::2])
    cfg.coevolve.accept_audit_per_task = 2
    wm = str(assets / "wm")
    result = audit_world_models(
        cfg, tmp_path / "accept", str(assets / "sft"), {"current": wm, "again": wm},
        str(assets / "rm"), str(assets / "demos"), None,
    )  # fmt: skip
    current, again = result["world_models"]["current"], result["world_models"]["again"]
    assert current == again and current["episodes"] == 6
    assert result["chosen"] == "current"
    assert result["real_steps"] >= 2 * 6
    saved = json.loads((tmp_path / "accept" / "acceptance.json").read_text())
    assert saved["chosen"] == "current"
    assert (tmp_path / "accept" / "again" / "judge_audit.json").is_file()
