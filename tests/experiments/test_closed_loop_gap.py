"""experiments/real-steps-to-gain/closed_loop_gap.py: the policy's real success acting on real
frames and acting in the world model, paired start by start per task; replay_fidelity.py: the
imagined frames against the replayed real ones."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "experiments" / "real-steps-to-gain" / "closed_loop_gap.py"


def _store(path, episodes) -> None:
    path.mkdir(parents=True)
    rows = [{"task_name": t, "seed": s, "success": ok} for t, s, ok in episodes]
    (path / "index.json").write_text(json.dumps({"episodes": rows}))


def _report(path, episodes) -> None:
    path.mkdir(parents=True)
    rows = [{"task": t, "seed": s, "success": ok} for t, s, ok in episodes]
    (path / "report.json").write_text(json.dumps({"episodes": rows}))


def test_each_imagined_episode_is_paired_with_its_starts_real_episode(tmp_path) -> None:
    # task a: start 1 imagined twice (a success once), start 2 once; task b: imagination only
    _store(tmp_path / "store", [("a", 1, True), ("a", 1, False), ("a", 2, False), ("b", 3, True)])
    _report(tmp_path / "demo", [("a", 1, True), ("b", 3, False)])
    _report(tmp_path / "rollout", [("a", 2, True)])
    out = tmp_path / "out"
    cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store"), "--out", str(out)]
    cmd += ["--real", f"{tmp_path / 'demo'},{tmp_path / 'rollout'}", "--resamples", "200"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((out / "closed_loop_gap.json").read_text())
    assert rows["a"]["episodes"] == 3 and rows["a"]["real_successes"] == 3
    assert rows["a"]["imagined_frames"] == pytest.approx(1 / 3) and rows["a"]["kept"] == 1
    assert rows["a"]["difference"] == pytest.approx(-2 / 3)
    assert (rows["b"]["real_frames"], rows["b"]["imagined_frames"]) == (0.0, 1.0)
    assert rows["all"]["episodes"] == 4 and rows["all"]["difference"] == pytest.approx(-0.25)
    assert "| a | 3 | 100% | 33% | -66.7" in (out / "closed_loop_gap.md").read_text()
    assert (out / "closed_loop_gap.png").stat().st_size > 0


def test_a_start_without_a_real_episode_is_one_line(tmp_path) -> None:
    _store(tmp_path / "store", [("a", 1, True), ("a", 7, False)])
    _report(tmp_path / "demo", [("a", 1, True)])
    cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path / "store")]
    cmd += ["--real", str(tmp_path / "demo"), "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: 1 imagined start(s) have no real episode, e.g. a seed 7: evaluate the policy "
        "from the store's starts (--seed as the docstring says)"
    ]
    assert not (tmp_path / "out").exists()


def test_replay_fidelity_psnr_is_per_step(monkeypatch) -> None:
    """replay_fidelity.py: PSNR by step, capped at 100 dB where frames match exactly."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
    import numpy as np
    from replay_fidelity import psnr_by_step

    real = np.zeros((3, 4, 4, 3), np.uint8)
    imagined = real.copy()
    imagined[1] += 255  # every pixel off by the full range: 0 dB
    imagined[2, 0, 0, 0] = 255  # one value in 48: 10 log10(48)
    psnr = psnr_by_step(imagined, real)
    assert psnr[0] == 100.0  # identical frames: capped, not infinite
    assert psnr[1] == 0.0
    assert psnr[2] == pytest.approx(10 * np.log10(48))


def test_replay_fidelity_strips_pair_each_imagined_frame_with_the_real_one(monkeypatch) -> None:
    """--strips: per episode the imagined row over the real row, columns the start and the
    strip's steps; the real row's column for step s is the frame after action s."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
    import numpy as np
    from replay_fidelity import STRIP_STEPS, strip

    steps = 40  # reaches 16 and 32 of STRIP_STEPS
    imagined = np.arange(steps + 1, dtype=np.uint8)[:, None, None, None].repeat(3, axis=-1)
    imagined = np.broadcast_to(imagined, (steps + 1, 2, 2, 3)).copy()
    real = imagined[1:] + 100  # the frame after action s: value s + 100
    image = strip([(imagined, real), (imagined, real)], scale=1)
    columns = 1 + sum(s <= steps for s in STRIP_STEPS)
    assert image.shape == (2 * 2 + 2 + 2 * 2, columns * 2, 3)  # two pairs, one gap
    assert image[0, ::2, 0].tolist() == [0, 16, 32]  # imagined: the start, then steps
    assert image[2, ::2, 0].tolist() == [0, 116, 132]  # real: the same start, then the replay
    assert (image[4:6] == 255).all()


def test_replay_fidelity_moving_region_is_where_the_real_frame_left_the_start(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
    import numpy as np
    from replay_fidelity import moving_mse_by_step

    start = np.zeros((4, 4, 3), np.uint8)
    real = np.stack([start, start.copy()])
    real[1, 0, 0] = 255  # step 2: one pixel moved
    imagined = real.copy()
    imagined[1, 3, 3] = 255  # an error outside the moving region: not counted
    mse = moving_mse_by_step(imagined, real, start)
    assert np.isnan(mse[0]) and mse[1] == 0.0
    held = np.stack([start, start])  # the start held still misses the moved pixel entirely
    assert moving_mse_by_step(held, real, start)[1] == 1.0


def test_replay_fidelity_without_a_stage_is_one_line(tmp_path) -> None:
    store = tmp_path / "run" / "data" / "labelled_base"
    _store(store, [("a", 1, True)])
    script = ROOT / "experiments" / "real-steps-to-gain" / "replay_fidelity.py"
    cmd = [sys.executable, str(script), "--run", str(tmp_path / "run")]
    cmd += ["--out", str(tmp_path / "o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'run' / 'stage1' / 'config.yaml'}: not found (--run takes a "
        "co-evolve run with its stage 1)"
    ]
    assert not (tmp_path / "o").exists()


def test_replay_fidelity_with_an_unknown_task_is_one_line(tmp_path) -> None:
    run = tmp_path / "run"
    _store(run / "data" / "labelled_base", [("a", 1, True)])
    (run / "stage1").mkdir()
    (run / "stage1" / "config.yaml").write_text("{}\n")
    script = ROOT / "experiments" / "real-steps-to-gain" / "replay_fidelity.py"
    cmd = [sys.executable, str(script), "--run", str(run), "--tasks", "b"]
    cmd += ["--out", str(tmp_path / "o")]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: --tasks b: not a task of {run / 'data' / 'labelled_base'}"
    ]
    assert not (tmp_path / "o").exists()


def _run_dir(assets, tmp_path):
    """A co-evolve run's files imagined_loop.py reads: run.json, sft/policy, data/base_merged."""
    import shutil

    from wmrl_cli.config.loading import resolve_config

    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    shutil.copytree(assets / "demos", run / "data" / "base_merged")
    (run / "sft").mkdir()
    (run / "sft" / "policy").symlink_to(assets / "sft" / "policy", target_is_directory=True)
    overrides = [
        "simulator.suite=mw3",
        "simulator.image_size=32",
        "simulator.num_workers=0",
        "simulator.seed=5",
        "world_model.backend=opensora",
        "world_model.num_inference_steps=1",
        "algorithm.num_envs=2",
        "algorithm.max_episode_steps=16",
        "coevolve.reward_policy_rollouts_per_task=2",
    ]
    cfg = resolve_config(overrides=overrides)
    (run / "run.json").write_text(json.dumps({"config": cfg.model_dump(mode="json")}))
    return run


def test_imagined_loop_is_the_labelled_stage_on_the_tasks_asked(assets, tmp_path) -> None:
    """imagined_loop.py: the run's labelled_base stage (its starts and seed) in the world model
    given, on the tasks given: the stage's own call, restricted, gives the same episodes."""
    from wmrl_cli.coevolve.stages import imagine_policy
    from wmrl_cli.config.loading import validate_config

    run = _run_dir(assets, tmp_path)
    script = ROOT / "experiments" / "real-steps-to-gain" / "imagined_loop.py"
    kept = "drawer-open"
    out = tmp_path / "loop"
    args = ["--run", str(run), "--world-model", str(assets / "wm" / "world_model")]
    done = subprocess.run(
        [sys.executable, str(script), *args, "--tasks", kept, "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cfg = validate_config(json.loads((run / "run.json").read_text())["config"])
    imagine_policy(
        cfg, str(run / "sft" / "policy"), str(assets / "wm" / "world_model"),
        str(run / "data" / "base_merged"), tmp_path / "whole", 5 + 3_000_000,
    )  # fmt: skip
    got = json.loads((out / "index.json").read_text())["episodes"]
    stage = json.loads((tmp_path / "whole" / "index.json").read_text())["episodes"]
    assert {e["task_name"] for e in got} == {kept} and len(got) == 2
    assert [e["seed"] for e in got] == [e["seed"] for e in stage if e["task_name"] == kept]
    bad = subprocess.run(
        [sys.executable, str(script), *args, "--tasks", "no-such", "--out", str(tmp_path / "b")],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "unknown task 'no-such'" in bad.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop", "run", "whole"]
