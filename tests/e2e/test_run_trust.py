"""Runs a researcher can trust (issue 15): one-line errors instead of tracebacks, plain YAML from
`presets show`, validation before anything is written, resume bookkeeping, logs for batch jobs
and warnings about silent mismatches."""

from __future__ import annotations

import json
import os
import shutil
import warnings

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from tests.helpers.output import one_error_line
from tests.helpers.sft import TINY, run_sft
from wmrl_cli.cli.app import app
from wmrl_cli.config import dump_config, resolve_config
from wmrl_cli.data.episodes import EpisodeStore

runner = CliRunner()
SMALL_SIM = ["--num-envs", "3", "--num-workers", "0", "--set", "simulator.max_steps=16"]


# train-policy's inputs (the `assets` fixture, tests/conftest.py): expert episodes of mw3 at 32x32
# (demos/), a 2-step tiny SFT policy (sft/), an untrained tiny OpenSora world model (wm/) and ResNet
# reward model (rm/).


@pytest.fixture(scope="module")
def demo_store(assets):
    return assets / "demos"


@pytest.fixture(scope="module")
def sft_run(assets):
    return assets / "sft"


@pytest.fixture(scope="module")
def models(assets):
    return assets


def _truncated_world_model(models, tmp_path):
    broken = tmp_path / "wm-broken"
    shutil.copytree(models / "wm", broken)
    weights = broken / "world_model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return broken


def _train_policy_args(sft_run, world_model, models, demo_store, out, steps=1, eval_trials=0):
    return [
        "train-policy", "--policy", str(sft_run), "--world-model", str(world_model),
        "--reward-model", str(models / "rm"), "--reset-set", str(demo_store),
        "--steps", str(steps), "--out", str(out),
        "--set", "algorithm.name=grpo", "--set", "algorithm.num_envs=4",
        "--set", "algorithm.group_size=2", "--set", "algorithm.max_episode_steps=16",
        "--set", "algorithm.minibatch_trajectories=2",
        "--set", f"algorithm.eval_trials={eval_trials}",
        "--set", "simulator.suite=mw3", "--set", "simulator.num_envs=3",
        "--set", "simulator.num_workers=0", "--set", "simulator.image_size=32",
        "--set", "simulator.max_steps=16", "--set", "num_threads=1",
    ]  # fmt: skip


# -- (4) one line instead of a traceback ------------------------------------------------------


def test_truncated_world_model_is_one_line(models, demo_store, sft_run, tmp_path) -> None:
    broken = _truncated_world_model(models, tmp_path)
    evaluated = runner.invoke(
        app,
        ["eval", "--world-model", str(broken), "--reward-model", str(models / "rm"),
         "--data", str(demo_store), "-o", str(tmp_path / "eval")],
    )  # fmt: skip
    one_error_line(evaluated, 1, "unreadable")
    assert not (tmp_path / "eval").exists()
    # train-policy reads the world model after it created its run directory: it removes it.
    trained = runner.invoke(
        app, _train_policy_args(sft_run, broken, models, demo_store, tmp_path / "rl")
    )
    one_error_line(trained, 1, "unreadable")
    assert not (tmp_path / "rl").exists()
    # train-wm --init loads it after its metrics logger opened: still one line, no directory.
    fine_tuned = runner.invoke(
        app,
        ["train-wm", "--data", str(demo_store), "--init", str(broken), "--steps", "1",
         "-o", str(tmp_path / "wm")],
    )  # fmt: skip
    one_error_line(fine_tuned, 1, "unreadable")
    assert not (tmp_path / "wm").exists()


def test_out_naming_a_file_or_an_unwritable_path_is_one_line(tmp_path) -> None:
    a_file = tmp_path / "taken"
    a_file.write_text("not a directory")
    for out, fragment in ((a_file, "is a file"), (a_file / "below", "cannot create")):
        result = runner.invoke(
            app, ["eval", "--policy", "expert", "--suite", "mw2", "-n", "1", "-o", str(out)]
        )
        one_error_line(result, 2, f"--out {out}", fragment)
    assert a_file.read_text() == "not a directory"


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_malicious_training_state_is_refused_in_one_line(demo_store, tmp_path) -> None:
    out = tmp_path / "run"
    first = run_sft(out, demo_store, 1)
    assert first.exit_code == 0, first.output
    checkpoint = out / "checkpoints" / "step_000001"
    state = checkpoint / "training_state" / "state_0.pt"
    torch.save({"state": _Payload()}, state)
    resumed = run_sft(out, demo_store, 1)  # the same command again resumes from the checkpoint
    one_error_line(resumed, 1, "damaged", "state_0.pt")  # its checksum no longer matches
    # ... and with the checksum forged too, the unpickler refuses it
    from wmrl_cli.training.checkpoints import CHECKSUMS, _checksum

    sums = json.loads((checkpoint / CHECKSUMS).read_text())
    sums["training_state/state_0.pt"] = _checksum(state)
    (checkpoint / CHECKSUMS).write_text(json.dumps(sums))
    resumed = run_sft(out, demo_store, 1)
    line = one_error_line(resumed, 1, "refusing to load", "state_0.pt")
    assert "weights_only" not in resumed.output and "pwned" not in resumed.output, line


# -- (5) presets show ------------------------------------------------------------------------


def test_presets_show_prints_plain_yaml_whole(tmp_path) -> None:
    long_path = "/data/" + "very-long-asset-directory-name/" * 8 + "world_model"
    preset = tmp_path / "long.yaml"
    preset.write_text(yaml.safe_dump({"world_model": {"path": long_path}}))
    result = runner.invoke(app, ["presets", "show", str(preset)])
    assert result.exit_code == 0, result.output
    assert any(line.strip() == f"path: {long_path}" for line in result.output.splitlines())
    assert not any(line != line.rstrip() for line in result.output.splitlines())
    assert result.output == dump_config(resolve_config(str(preset)))
    assert yaml.safe_load(result.output)["world_model"]["path"] == long_path


# -- (9) validation before anything starts or is written ---------------------------------------


@pytest.mark.parametrize(
    ("processes", "fragment"), [("0", "at least 1"), ("-1", "at least 1"), ("3", "num_envs")]
)
def test_num_processes_checked_before_launch(
    processes, fragment, models, demo_store, sft_run, tmp_path, monkeypatch
) -> None:
    import subprocess

    def no_launch(*args, **kwargs):
        raise AssertionError("torchrun was started")

    monkeypatch.setattr(subprocess, "call", no_launch)
    args = _train_policy_args(sft_run, models / "wm", models, demo_store, tmp_path / "rl")
    result = runner.invoke(app, [*args, "--num-processes", processes])
    one_error_line(result, 2, fragment)
    assert not (tmp_path / "rl").exists()


def test_accelerate_launch_that_starts_one_process_is_refused(expert_episodes, tmp_path):
    """`accelerate launch --cpu --num_processes 2` runs its script once (its simple launcher):
    refused in one line before anything is written, not trained quietly on one rank."""
    import subprocess
    import sys

    demo_store = tmp_path / "demos"
    EpisodeStore(demo_store).add(expert_episodes)

    cmd = [
        sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--cpu",
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "-m", "wmrl_cli", "sft", "--data", str(demo_store),
        "--steps", "1", "--out", str(tmp_path / "sft"), *TINY,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode != 0  # accelerate adds its own CalledProcessError about the child
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stdout + proc.stderr[-3000:]
    assert "--num_processes 2 started a single process" in errors[0]
    assert "wmrl_cli/" not in proc.stderr  # no traceback of ours
    assert not (tmp_path / "sft").exists()


# -- (7) resume bookkeeping ------------------------------------------------------------------


def test_damaged_latest_resumes_from_newest_checkpoint_without_duplicate_steps(
    demo_store, tmp_path
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    out = tmp_path / "run"
    first = run_sft(out, demo_store, 3, "--set", "sft.save_every=1")
    assert first.exit_code == 0, first.output
    straight = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # `latest` names step 3, which is gone (a damaged disk, a partial copy): step 2 is newest.
    shutil.rmtree(out / "checkpoints" / "step_000003")
    # What an attempt killed after logging step 3 but before checkpointing it leaves behind.
    with (out / "metrics.jsonl").open("a") as handle:
        handle.write(json.dumps({"step": 3, "train/sft/loss": 99.0, "stale": 1.0}) + "\n")
        handle.write('{"step": 4, "train/sft/lo')  # torn by the kill
    writer = SummaryWriter(str(out / "tensorboard"))
    writer.add_scalar("train/sft/loss", 99.0, 3)
    writer.close()

    resumed = run_sft(out, demo_store, 3, "--set", "sft.save_every=1")
    assert resumed.exit_code == 0, resumed.output
    assert "resuming from step_000002" in resumed.output
    assert "resuming behaviour cloning from step 2" in resumed.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert "stale" not in rows[-1] and rows[-1]["train/sft/loss"] != 99.0
    assert rows[-1]["train/sft/loss"] == pytest.approx(straight[-1]["train/sft/loss"], rel=1e-6)
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("train/sft/loss")]
    assert [step for step, _ in logged] == [1, 2, 3]
    assert logged[-1][1] == pytest.approx(rows[-1]["train/sft/loss"])
    # (8) batch jobs: CliRunner's stdout is no terminal, so plain lines stand in for the bar.
    assert "step 3/3" in resumed.output and "train/sft/loss" in resumed.output


# -- (8) batch jobs --------------------------------------------------------------------------


def test_videos_are_padded_to_macro_blocks_without_warnings(tmp_path, caplog) -> None:
    import imageio.v2 as imageio

    from wmrl_cli.evaluation.videos import write_mp4

    frames = np.random.default_rng(0).integers(0, 255, (4, 34, 50, 3), dtype=np.uint8)
    with caplog.at_level("WARNING"):
        write_mp4(tmp_path / "v.mp4", frames, fps=5)
    assert not [r for r in caplog.records if "macro_block_size" in r.getMessage()]
    first = imageio.get_reader(tmp_path / "v.mp4").get_data(0)
    assert first.shape == (48, 64, 3)
    assert (first[36:, :] > 200).all() and (first[:, 52:] > 200).all()  # white padding


def test_meta_world_expert_warning_filtered_at_its_source() -> None:
    from metaworld.policies.policy import move

    from wmrl_cli.sims.experts import ExpertPolicy
    from wmrl_cli.sims.suites import get_suite

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # pyproject's filter for the test suite is off here
        ExpertPolicy(get_suite("mw2"))
        move(np.zeros(3), np.ones(3), p=10.0)
    assert not [w for w in caught if "Constant(s) may be too high" in str(w.message)]


def test_train_policy_prints_final_real_success_and_takes_a_seed(
    models, demo_store, sft_run, tmp_path
) -> None:
    out = tmp_path / "rl"
    args = _train_policy_args(sft_run, models / "wm", models, demo_store, out, eval_trials=1)
    result = runner.invoke(app, [*args, "--seed", "123"])
    assert result.exit_code == 0, result.output
    assert "real success at step 1:" in result.output
    assert yaml.safe_load((out / "config.yaml").read_text())["simulator"]["seed"] == 123
    assert "step 1/1" in result.output  # the plain log line of a batch job


# -- (10) silent mismatches ------------------------------------------------------------------


def test_eval_warns_when_a_policy_runs_outside_its_training_setting(sft_run, tmp_path) -> None:
    result = runner.invoke(
        app,
        ["eval", "--policy", str(sft_run), "--suite", "mw2", "--image-size", "64", "-n", "1",
         "-o", str(tmp_path / "eval"), *SMALL_SIM],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    warning = next(line for line in result.output.splitlines() if line.startswith("warning:"))
    assert "suite mw3 (trained) vs mw2" in warning and "image size 32 (trained) vs 64" in warning
    same = runner.invoke(
        app,
        ["eval", "--policy", str(sft_run), "--suite", "mw3", "--image-size", "32", "-n", "1",
         "-o", str(tmp_path / "same"), *SMALL_SIM],
    )  # fmt: skip
    assert same.exit_code == 0, same.output
    assert "warning:" not in same.output


def test_co_evolve_takes_a_seed(tmp_path, monkeypatch) -> None:
    import wmrl_cli.coevolve.pipeline as pipeline

    seen = {}

    def fake_co_evolve(cfg, run_dir, ranks=1):
        seen["seed"] = cfg.simulator.seed
        return {"success": {"base": {"overall": 0.5}}}

    monkeypatch.setattr(pipeline, "co_evolve", fake_co_evolve)
    result = runner.invoke(
        app, ["co-evolve", "--profile", "smoke", "--seed", "11", "--out", str(tmp_path / "ce")]
    )
    assert result.exit_code == 0, result.output
    assert seen["seed"] == 11


def test_eval_world_model_opens_a_published_layout(models, demo_store, tmp_path, monkeypatch):
    from tests.helpers.published_layouts import write_opensora_libero
    from wmrl_cli.errors import WmrlError
    from wmrl_cli.evaluation import reliability
    from wmrl_cli.world_models.opensora import OpenSoraWorldModel

    published = write_opensora_libero(tmp_path / "RLinf-OpenSora-LIBERO-Spatial", frame_size=32)
    loaded = {}

    def stop_after_loading(wm, rm, store, ids, sim, **kwargs):
        loaded["model"] = wm
        raise WmrlError("loaded")

    monkeypatch.setattr(reliability, "evaluate_world_model", stop_after_loading)
    result = runner.invoke(
        app,
        ["eval", "--world-model", str(published), "--reward-model", str(models / "rm"),
         "--data", str(demo_store), "--set", "world_model.backend=opensora",
         "-o", str(tmp_path / "eval")],
    )  # fmt: skip
    one_error_line(result, 1, "loaded")
    assert isinstance(loaded["model"], OpenSoraWorldModel)


def test_co_evolve_report_flags_rl_without_updates_and_charts_zeros(tmp_path) -> None:
    """The README promises success_per_stage.png: it was left out when every success was 0;
    zeros are a result, and the chart is drawn (a stale one replaced)."""
    from wmrl_cli.coevolve.report import PLOT_FILE, write_report
    from wmrl_cli.rl.activity import rl_activity

    stage = tmp_path / "stage1"
    stage.mkdir()
    rows = [{"step": s, "rollout/kept_groups_fraction": 0.0, "train/actor/grad_norm": 0.0}
            for s in (1, 2)]  # fmt: skip
    (stage / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    activity = rl_activity(stage)
    assert activity == {
        "steps": 2,
        "kept_groups_fraction": 0.0,
        "max_grad_norm": 0.0,
        "updated": False,
    }
    (tmp_path / PLOT_FILE).write_bytes(b"stale chart")
    zero = {"overall": 0.0, "per_task": {"a": 0.0, "b": 0.0}}
    cfg = resolve_config("mw-coevolve-smoke")

    def report_for(stage1, act):
        evals = {"base": zero, "stage1": stage1}
        return write_report(tmp_path, cfg, evals, {}, {}, {"sft": 1.0}, {"sft": 0}, act)

    report = report_for(zero, {"stage1": activity})
    text = (tmp_path / "report.md").read_text()
    assert "RL stage `stage1` made no update" in text
    assert "| stage1 | 2 | 0.00 | - | 0 |" in text  # no training success recorded
    assert (tmp_path / PLOT_FILE).read_bytes().startswith(b"\x89PNG") and PLOT_FILE in text
    assert report["rl_activity"]["stage1"]["updated"] is False
    moved = {"overall": 0.5, "per_task": {"a": 1.0, "b": 0.0}}
    report_for(moved, {"stage1": {**activity, "updated": True, "max_grad_norm": 0.3}})
    text = (tmp_path / "report.md").read_text()
    assert "made no update" not in text and (tmp_path / PLOT_FILE).stat().st_size > 100


def test_rl_activity_reads_the_training_success_curve(tmp_path) -> None:
    from wmrl_cli.rl.activity import rl_activity

    successes = [0.1] * 5 + [0.2] * 10 + [0.4] * 5  # 20 steps: first 5 at 10%, last 5 at 40%
    rows = [
        {"rollout/kept_groups_fraction": 0.25, "train/actor/grad_norm": 0.5,
         "env/success_once": s}
        for s in successes
    ]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    activity = rl_activity(tmp_path)
    assert activity["train_success_first"] == pytest.approx(0.1)
    assert activity["train_success_last"] == pytest.approx(0.4)
    assert activity["updated"] and activity["kept_groups_fraction"] == pytest.approx(0.25)
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0] | {"env/success_once": 1.0}))
    one = rl_activity(tmp_path)  # one step: both ends are that step
    assert one["train_success_first"] == one["train_success_last"] == 1.0


# -- (6) eval into an existing directory -----------------------------------------------------


def test_eval_refuses_a_non_empty_directory_unless_overwrite(tmp_path) -> None:
    out = tmp_path / "eval"
    args = ["eval", "--policy", "expert", "--suite", "mw2", "-n", "1", "--image-size", "32",
            "-o", str(out), *SMALL_SIM]  # fmt: skip
    first = runner.invoke(app, [*args, "--save-video"])
    assert first.exit_code == 0, first.output
    assert any((out / "videos").iterdir())
    (out / "notes.txt").write_text("mine")  # the user's, written after the run
    refused = runner.invoke(app, args)
    one_error_line(refused, 2, "earlier evaluation", "--overwrite")
    assert (out / "videos").is_dir()
    replaced = runner.invoke(app, [*args, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert not (out / "videos").exists()
    assert json.loads((out / "report.json").read_text())["suite"] == "mw2"
    assert (out / "notes.txt").read_text() == "mine"


def test_eval_refuses_a_directory_it_did_not_write(tmp_path) -> None:
    out = tmp_path / "eval"
    (out / "videos").mkdir(parents=True)
    (out / "report.json").write_text("{}")
    args = ["eval", "--policy", "expert", "--suite", "mw2", "-n", "1", "--image-size", "32",
            "-o", str(out), *SMALL_SIM, "--overwrite"]  # fmt: skip
    one_error_line(runner.invoke(app, args), 2, "did not write")
    assert (out / "report.json").read_text() == "{}"


# -- (1) (2) the run-directory rule ----------------------------------------------------------


def _hidden(run) -> int:
    return json.loads((run / "policy" / "config.json").read_text())["policy"]["llm"]["hidden_size"]


def test_rerun_with_another_config_stops_unless_resume_or_overwrite(demo_store, tmp_path) -> None:
    out = tmp_path / "run"
    first = run_sft(out, demo_store, 1)
    assert first.exit_code == 0, first.output
    recorded = (out / "config.yaml").read_text()
    changed = run_sft(out, demo_store, 1, "--set", "sft.llm_hidden=64")
    one_error_line(changed, 2, f"--out {out}", "sft.llm_hidden 32 -> 64", "--resume")
    assert (out / "config.yaml").read_text() == recorded and _hidden(out) == 32
    # --resume: the run goes on with what it recorded; the command's 64 is ignored, and said so.
    kept = run_sft(out, demo_store, 1, "--set", "sft.llm_hidden=64", "--resume")
    assert kept.exit_code == 0, kept.output
    assert "ignored: sft.llm_hidden 32 -> 64" in kept.output
    assert yaml.safe_load((out / "config.yaml").read_text())["sft"]["llm_hidden"] == 32
    # --overwrite: a new run at 64 in place of the old one.
    fresh = run_sft(out, demo_store, 1, "--set", "sft.llm_hidden=64", "--overwrite")
    assert fresh.exit_code == 0, fresh.output
    assert "resuming" not in fresh.output and _hidden(out) == 64
    assert yaml.safe_load((out / "config.yaml").read_text())["sft"]["llm_hidden"] == 64
    # Bookkeeping settings may change between attempts.
    again = run_sft(out, demo_store, 1, "--set", "sft.llm_hidden=64", "--set", "sft.save_every=5")
    assert again.exit_code == 0 and "resuming behaviour cloning from step 1" in again.output


def test_a_setting_added_since_the_run_differs_only_off_its_default() -> None:
    from wmrl_cli.config import RunConfig
    from wmrl_cli.run_dirs import record_differences, run_record

    new = run_record(RunConfig(), "co-evolve")
    old = json.loads(json.dumps(new))
    del old["config"]["coevolve"]["reward_real_rollouts_per_task"]  # a run older than the option
    assert record_differences(old, new) == []
    new["config"]["coevolve"]["reward_real_rollouts_per_task"] = 20
    assert record_differences(old, new) == ["coevolve.reward_real_rollouts_per_task None -> 20"]


def test_changed_input_files_are_a_different_run(tmp_path) -> None:
    from tests.helpers.episodes import visible_success_episode

    store = tmp_path / "store"
    EpisodeStore(store).add([visible_success_episode(i, succeed=i % 3 != 0) for i in range(8)])
    args = ["train-reward", "--data", str(store), "--steps", "2", "--width", "4",
            "--set", "reward_model.batch_size=8", "--out", str(tmp_path / "rm")]  # fmt: skip
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert runner.invoke(app, args).exit_code == 0  # the same inputs: run again
    (store / "extra-episode-notes.txt").write_text("the store changed")
    one_error_line(runner.invoke(app, args), 2, "data (the files in", "changed")


def test_default_out_makes_a_rerun_resume(demo_store, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["sft", "--suite", "mw3", "--data", str(demo_store), "--steps", "1", *TINY]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert (tmp_path / "runs" / "sft" / "policy" / "config.json").is_file()
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "resuming behaviour cloning from step 1" in again.output
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["sft"]


def test_co_evolve_rerun_with_another_suite_is_refused(tmp_path, monkeypatch) -> None:
    import wmrl_cli.coevolve.pipeline as pipeline

    def finished(cfg, run_dir, ranks=1):
        (run_dir / "report.md").write_text(f"Suite {cfg.simulator.suite}")
        return {"success": {"base": {"overall": 0.5}}}

    monkeypatch.setattr(pipeline, "co_evolve", finished)
    out = tmp_path / "ce"
    base = ["co-evolve", "--profile", "smoke", "--out", str(out)]
    assert runner.invoke(app, base).exit_code == 0
    result = runner.invoke(app, [*base, "--set", "simulator.suite=mw3"])
    one_error_line(result, 2, "simulator.suite 'mw2' -> 'mw3'")
    assert (out / "report.md").read_text() == "Suite mw2"


def test_progress_prints_plain_lines_where_there_is_no_terminal(monkeypatch) -> None:
    """A batch job's log shows a long loop moving: a line at most every `every_s` and one at
    the end, where a progress bar would draw nothing."""
    from wmrl_cli import logging as wmrl_logging

    lines: list[str] = []
    monkeypatch.setattr(wmrl_logging.err_console, "print", lambda text: lines.append(text))
    with wmrl_logging.progress_task("imagined rollouts", 4, every_s=3600) as advance:
        for _ in range(4):
            advance()
    assert lines == ["imagined rollouts: 4/4, 0 s"]  # nothing between: the hour never passed
    with wmrl_logging.progress_task("replays", 2, every_s=0) as advance:
        advance(2)
    assert lines[-1] == "replays: 2/2, 0 s"
    with wmrl_logging.progress_task("off", 2, enabled=False) as advance:
        advance(2)
    assert len(lines) == 2
