"""Co-evolve's RL stages on several ranks (ranks.py `on_ranks`): a stage started on 2 ranks from
the pipeline's process is `train-policy --num-processes 2` with the stage's config, and the
ranks' failure is the pipeline's, with their exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.train_policy import args, metrics, options
from wmrl_cli.coevolve import stages
from wmrl_cli.config import resolve_config
from wmrl_cli.ranks import RanksFailed


def stage_config(root, out):
    """The run config a co-evolve RL stage gets, with the settings of train-policy's tests."""
    opts = options(out, 2, "grpo", 4, eval_trials=0)
    overrides = [opts[i + 1] for i, arg in enumerate(opts) if arg == "--set"]
    return resolve_config(overrides=[*overrides, "training.steps=2"])


def stage(root, out, ranks: int, reset_set: str | None = None) -> str:
    return stages.rl(
        stage_config(root, out),
        out,
        str(root / "sft"),
        str(root / "wm"),
        str(root / "rm"),
        reset_set or str(root / "demos"),
        real_steps=7,
        ranks=ranks,
    )


# two 2-rank runs (about 30 s on a 2-core CPU): slow, the suite's budget; a stage on ranks runs
# in CI through the refinement below
@pytest.mark.slow
def test_a_stage_on_two_ranks_is_train_policy_on_two_ranks(assets, tmp_path) -> None:
    policy = stage(assets, tmp_path / "stage", 2)
    assert os.path.isdir(policy)
    cmd = [sys.executable, "-m", "wmrl_cli", *args(assets, tmp_path / "cli", 2, "grpo", 4)]
    cmd += ["--set", "algorithm.eval_trials=0", "--num-processes", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    for rank in (0, 1):
        ranked, cli = (
            json.loads((run / "ranks" / f"rank_{rank}.json").read_text())
            for run in (tmp_path / "stage", tmp_path / "cli")
        )
        assert ranked["weights_sha256"] == cli["weights_sha256"], rank
        assert ranked["init_ids"] == cli["init_ids"], rank
    stage_rows, cli_rows = (
        metrics(tmp_path / "stage" / "metrics.jsonl"),
        metrics(tmp_path / "cli" / "metrics.jsonl"),
    )
    assert len(stage_rows) == 2
    # the same training; the stage's real steps start at the data collected before it
    for row in stage_rows:
        assert row["env/real_steps_data"] == row["env/real_steps"] == 7
    for row in (*stage_rows, *cli_rows):
        row.pop("env/real_steps")
        row.pop("env/real_steps_data")
    assert stage_rows == cli_rows


def test_the_ranks_failure_stops_the_stage_with_their_status(assets, tmp_path, capfd) -> None:
    stale = tmp_path / "stage" / "ranks_result.json"  # an earlier attempt's result
    stale.parent.mkdir()
    stale.write_text('{"result": "an earlier policy"}')
    with pytest.raises(RanksFailed) as failed:
        stage(assets, tmp_path / "stage", 2, reset_set=str(tmp_path / "no-such-store"))
    assert failed.value.exit_code != 0
    # the ranks' line, once, naming the stage; the ranks themselves printed nothing
    said = str(failed.value).splitlines()
    assert len(said) == 1 and said[0].startswith("stage on 2 ranks: "), said
    assert "no-such-store" in said[0]
    err = capfd.readouterr().err
    assert "error" not in err, err[-3000:]  # (it failed once under load, 2026-12-07, unseen)
    assert not (tmp_path / "stage" / "ranks_result.json").exists()


def test_co_evolve_checks_its_ranks_before_it_writes(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from wmrl_cli.cli.app import app

    out = tmp_path / "run"
    cmd = ["co-evolve", "--profile", "smoke", "--out", str(out), "--num-processes", "4"]
    result = CliRunner().invoke(app, cmd)  # 4 envs in groups of 2 do not split over 4 ranks
    assert result.exit_code == 2, result.output
    assert "algorithm.num_envs" in result.output and "processes (2 x 4)" in result.output
    assert not out.exists()
    monkeypatch.setenv("LOCAL_RANK", "0")  # started under torchrun: each rank would run it all
    result = CliRunner().invoke(app, cmd[:-2])
    assert result.exit_code == 2 and "co-evolve runs in one process" in result.output
    assert not out.exists()


@pytest.mark.parametrize("plan", ["rl", "refinement"])
def test_co_evolve_checks_the_given_start_memory_plans_before_it_writes(
    assets, tmp_path, monkeypatch, plan
) -> None:
    from typer.testing import CliRunner

    import wmrl_cli.memory.budget as memory_budget
    from wmrl_cli.cli.app import app

    if plan == "refinement":  # the RL stages fit: the refinement's plan is checked too
        monkeypatch.setattr(memory_budget, "check_rl_memory", lambda *args: None)

    out = tmp_path / "run"
    given = {
        "coevolve.start": "given",
        "policy.name": assets / "sft",
        "world_model.path": assets / "wm",
        "world_model.backend": "opensora",
        "reward_model.path": assets / "rm",
        "world_model.reset_set": assets / "demos",
        "training.memory_budget_gb": 0.001,  # no plan fits
    }
    sets = [arg for key, value in given.items() for arg in ("--set", f"{key}={value}")]
    cmd = ["co-evolve", "--profile", "smoke", "--out", str(out), "--num-processes", "2", *sets]
    result = CliRunner().invoke(app, cmd)
    assert result.exit_code == 2, result.output
    expected = "the memory plan needs" if plan == "rl" else "the world model's training needs"
    assert expected in result.output, result.output
    assert not out.exists()


# the suite's 15-minute budget (2026-11-29); the denoiser's 2-rank sharded training stays in the
# default suite (tests/training/test_denoiser_sharding.py)
@pytest.mark.slow
def test_a_refinement_on_two_sharded_ranks(assets, tmp_path) -> None:
    from wmrl_cli.world_models.factory import load_world_model

    sets = {
        "world_model.backend": "opensora",
        "world_model.sharding": "fsdp",
        "world_model.batch_size": 2,
        "world_model.val_episodes": 1,
        "world_model.val_horizon": 4,
        "world_model.window_stride": 16,
        "world_model.num_inference_steps": 1,
        "simulator.image_size": 32,
        "num_threads": 1,
        "logging.progress": False,
    }
    cfg = resolve_config(overrides=[f"{k}={v}" for k, v in sets.items()])
    out = tmp_path / "wm_evo1"
    model = stages.train_wm(cfg, str(assets / "demos"), out, str(assets / "wm"), 2, ranks=2)
    assert load_world_model(model).action_dim == 4
    ranks = [json.loads((out / "ranks" / f"rank_{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights_sha256"] != ranks[1]["weights_sha256"]  # each held its shards
    assert (out / "checkpoints" / "step_000002" / "training_state" / "sharded").is_dir()
