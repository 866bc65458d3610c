"""co-evolve's stage cache: a changed config reruns exactly the stages it reaches
(coevolve/stage_cache.py), and `co-evolve --update` adopts the new config."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from wmrl_cli.cli.app import app
from wmrl_cli.coevolve.stage_cache import StageCache
from wmrl_cli.config import resolve_config

# name, kind of stage (READS), the stages whose outputs it uses: a miniature of co_evolve
STAGES = (
    ("sft", "sft", ()),
    ("eval_base", "eval", ("sft",)),
    ("world_model", "world_model", ("sft",)),
    ("reward_model", "reward_model", ("sft",)),
    ("eval_wm_base", "check", ("world_model", "reward_model")),
    ("stage1", "rl", ("sft", "world_model", "reward_model", "eval_wm_base")),
    ("eval_stage1", "eval", ("stage1",)),
)


def _run(run_dir: Path, cfg) -> list[str]:
    ran: list[str] = []
    p = StageCache(run_dir, 0, cfg)
    for name, reads, after in STAGES:

        def work(name: str = name) -> str:
            (run_dir / name).mkdir(parents=True, exist_ok=True)
            (run_dir / name / "output.txt").write_text(name)
            ran.append(name)
            return name

        assert p.run(name, work, reads=reads, after=after, outputs=(name,)) == name
    return ran


def test_a_changed_setting_reruns_the_stages_it_reaches(tmp_path) -> None:
    cfg = resolve_config("mw-coevolve-smoke")
    every = [name for name, _, _ in STAGES]
    assert _run(tmp_path, cfg) == every
    assert _run(tmp_path, cfg) == []  # the same config: everything is kept

    cfg.world_model.lr = 1e-3  # the world model and what is built on it
    (tmp_path / "world_model" / "stale-checkpoint").write_text("from the old config")
    assert _run(tmp_path, cfg) == ["world_model", "eval_wm_base", "stage1", "eval_stage1"]
    assert not (tmp_path / "world_model" / "stale-checkpoint").exists()  # outputs cleared first

    cfg.coevolve.eval_trials += 1  # evaluations only
    assert _run(tmp_path, cfg) == ["eval_base", "eval_stage1"]
    cfg.reward_model.augment_shift = 2  # the reward model, the check and RL read it
    assert _run(tmp_path, cfg) == ["reward_model", "eval_wm_base", "stage1", "eval_stage1"]
    cfg.training.lr = 1e-5  # RL alone, and the evaluation of its policy
    assert _run(tmp_path, cfg) == ["stage1", "eval_stage1"]
    cfg.reward_model.audit_with_simulator = True  # under reward_model, but read by RL alone
    assert _run(tmp_path, cfg) == ["stage1", "eval_stage1"]

    # Gate floors, bookkeeping and logging change no finished stage.
    cfg.coevolve.min_action_gap_db = 0.5
    cfg.world_model.save_every = 7
    cfg.logging.progress = not cfg.logging.progress
    assert _run(tmp_path, cfg) == []
    # A setting no stage declares is assumed to matter to all of them.
    cfg.eval.episodes_per_task += 3
    assert _run(tmp_path, cfg) == every


def test_stages_recorded_before_fingerprints_are_kept(tmp_path) -> None:
    cfg = resolve_config("mw-coevolve-smoke")
    old = StageCache(tmp_path, 0)  # no config: no fingerprints, as runs made before them
    old.run("sft", lambda: "sft", reads="sft")
    assert old.state["sft"]["fingerprint"] is None
    assert _run(tmp_path, cfg) == [name for name, _, _ in STAGES[1:]]
    assert StageCache(tmp_path, 0, cfg).state["sft"]["fingerprint"] is not None


def test_a_training_stage_records_its_ranks_and_is_kept_on_others(tmp_path) -> None:
    cfg = resolve_config("mw-coevolve-smoke")
    first = StageCache(tmp_path, 0, cfg)
    assert first.run("stage1", lambda: "policy", reads="rl", ranks=8) == "policy"
    first.run("eval_stage1", lambda: {"overall": 0.5}, reads="eval", after=("stage1",))
    assert first.state["stage1"]["ranks"] == 8 and "ranks" not in first.state["eval_stage1"]
    again = StageCache(tmp_path, 0, cfg)  # resumed with another --num-processes: kept

    def rerun() -> str:
        raise AssertionError("a stage done on other ranks ran again")

    assert again.run("stage1", rerun, reads="rl", ranks=2) == "policy"
    assert again.state["stage1"]["ranks"] == 8  # what it was trained on


def test_co_evolve_update_adopts_the_new_config(tmp_path, monkeypatch) -> None:
    import wmrl_cli.coevolve.pipeline as pipeline

    seen = []

    def finished(cfg, run_dir, ranks=1):
        seen.append(cfg.coevolve.eval_trials)
        (run_dir / "report.md").write_text("a finished run")
        return {"success": {"base": {"overall": 0.5}}}

    monkeypatch.setattr(pipeline, "co_evolve", finished)
    runner = CliRunner()
    base = ["co-evolve", "--profile", "smoke", "--out", str(tmp_path / "ce")]
    assert runner.invoke(app, base).exit_code == 0
    changed = [*base, "--set", "coevolve.eval_trials=3"]
    refused = runner.invoke(app, changed)
    assert refused.exit_code == 2 and "--update" in refused.output
    updated = runner.invoke(app, [*changed, "--update"])
    assert updated.exit_code == 0, updated.output
    assert "coevolve.eval_trials 1 -> 3" in updated.output
    assert seen == [1, 3]
    assert "eval_trials: 3" in (tmp_path / "ce" / "config.yaml").read_text()
    both = runner.invoke(app, [*changed, "--update", "--resume"])
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_an_rl_stage_with_the_anchor_clones_the_store_at_the_runs_coefficient(tmp_path) -> None:
    from wmrl_cli.coevolve.stages import rl_config

    cfg = resolve_config("mw-coevolve-smoke", overrides=["coevolve.bc_anchor=0.5"])
    args = (cfg, tmp_path / "stage1", "policy", "wm", "rm", "starts", None)
    anchored = rl_config(*args, bc_data="run/data/reward_real").algorithm
    assert (anchored.bc_coef, anchored.bc_data) == (0.5, "run/data/reward_real")
    plain = rl_config(*args).algorithm
    assert (plain.bc_coef, plain.bc_data) == (0.0, None)
