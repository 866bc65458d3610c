"""`wmrl co-evolve --profile smoke`: the whole pipeline end to end, killed and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import imageio.v2 as imageio

from tests.helpers import ROOT
from wmrl_cli.data.episodes import EpisodeStore


def _command(out) -> list[str]:
    return [sys.executable, "-m", "wmrl_cli", "co-evolve", "--profile", "smoke", "--out", str(out)]


def test_smoke_profile_end_to_end_with_sigkill_resume(tmp_path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl"}
    # First attempt: killed with SIGKILL right after RL stage 1 wrote its first checkpoint (a
    # kill point in the process itself: polling for the file raced a fast stage 1 to its end).
    kill = ["wmrl_cli.rl.trainer:save_checkpoint", "after", "1"]
    first = subprocess.run(
        [sys.executable, "-m", "tests.helpers.kill_at", *kill, "--", *_command(out)[3:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode == -signal.SIGKILL, first.stdout[-3000:] + first.stderr[-3000:]
    assert (out / "stage1" / "checkpoints" / "latest").exists(), "stage 1 never checkpointed"
    before = json.loads((out / "stages.json").read_text())
    assert {"sft", "eval_base", "base_rollouts", "world_model", "reward_model"} <= set(before)
    assert "stage1" not in before

    done = subprocess.run(_command(out), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for stage in before:
        assert f"stage {stage}: done, skipped" in done.stdout
    assert "resuming policy training from step_000001" in done.stdout
    assert "success judged by" in done.stdout  # each RL stage names its judge, as train-policy
    after = json.loads((out / "stages.json").read_text())
    assert all(after[name] == before[name] for name in before)  # finished stages untouched

    # Every stage left its artifacts, and the report covers every evaluated stage.
    for path in (
        "sft/policy/config.json",
        "sft/demos/index.json",
        "data/base/index.json",
        "data/base/kir.json",
        "wm_base/world_model/model.safetensors",
        "wm_base/world_model/reliability.json",
        "data/labelled_base/index.json",
        "rm_base/reward_model/config.json",
        "stage1/policy/model.safetensors",
        "data/evolved1/index.json",
        "wm_evo1/world_model/config.json",
        "wm_evo1_seed1/world_model/config.json",
        "stage2/policy/config.json",
        "report.md",
        "report.json",
    ):
        assert (out / path).is_file(), path
    report = json.loads((out / "report.json").read_text())
    # The chart is drawn, zeros too; the report says which RL stages updated.
    assert (out / "success_per_stage.png").is_file()
    # Where the acceptance audit kept wm_base, stage 2 had the frozen control's inputs and is
    # the control; otherwise the control ran apart in wm_base.
    kept = after["accept1"]["result"]["chosen"] == "current"
    control = [] if kept else ["frozen_control"]
    assert (out / "frozen_control" / "policy" / "config.json").is_file() == (not kept)
    assert report["frozen_control_same_as"] == ("stage2" if kept else None)
    sim = "simulator_control"  # the same RL from the base in the real simulator, last
    assert set(report["rl_activity"]) == {"stage1", "stage2", *control, sim}
    idle = [name for name, act in report["rl_activity"].items() if not act["updated"]]
    for name in idle:
        assert f"RL stage `{name}` made no update" in (out / "report.md").read_text()
    assert list(report["success"]) == ["base", "stage1", "stage2", *control, sim]
    # The method's real steps by kind: with the learned verdict, RL in imagination spends none.
    by_kind = report["real_steps_by_kind"]
    assert by_kind["calls"] == by_kind["exact"] == by_kind["rollouts"] == 0
    assert by_kind["base"] == report["base_policy_real_steps"] == before["sft"]["real_steps"] > 0
    assert by_kind["data"] + by_kind["base"] == report["total_real_steps_without_evaluation"]
    assert set(report["world_model_reliability"]) == {"wm_base", "wm_evo1"}
    assert report["wall_time_s"]["sft"] == before["sft"]["wall_s"]
    videos = sorted((out / "eval" / "stage2" / "videos").glob("*_grid.mp4"))
    assert len(videos) == 2 and imageio.get_reader(videos[0]).get_data(0).ndim == 3
    assert "| **overall** |" in (out / "report.md").read_text()
    # Each check saved real episodes beside their imagination (videos: true), linked in report.md.
    for name in ("wm_base", "wm_evo1"):
        video = out / "check" / name / "videos" / "open_loop_truth_vs_model.mp4"
        assert imageio.get_reader(video).get_data(0).ndim == 3
        assert (
            f"check/{name}/videos/open_loop_truth_vs_model.mp4" in (out / "report.md").read_text()
        )

    # The reward model also learned from the base policy's own imagined episodes in the world
    # model, one per task from RL's starts, each labelled by the simulator (real steps). The
    # PACE refinement keeps that judge (refine_reward_model: false): no second one.
    assert not {"labelled_evo1", "refine_rm1", "imagined_base"} & set(after)
    assert not (out / "rm_evo1").exists()
    labelled = EpisodeStore.open(out / "data" / "labelled_base")
    assert labelled.imagined and len(labelled) == 2  # mw2
    assert {int(m["length"]) for m in labelled.index} == {16}  # algorithm.max_episode_steps
    assert all(m["imagined"]["labels"] == "simulator" for m in labelled.index)
    assert after["labelled_base"]["real_steps"] == labelled.real_steps() == 32
    metrics = json.loads((out / "rm_base" / "reward_model" / "reward_metrics.json").read_text())
    assert str(out / "data" / "labelled_base") in metrics["data"]
    # ... and from the base policy's real rollouts as it acts (no perturbation, unlike the
    # world model's), run on after success: every episode lasts simulator.max_steps.
    real = EpisodeStore.open(out / "data" / "reward_real")
    assert len(real) == 2 and {int(m["length"]) for m in real.index} == {40}
    assert all(m["policy"] == "policy" for m in real.index)
    assert all(
        m["policy"].startswith("policy+ou") for m in EpisodeStore.open(out / "data" / "base").index
    )
    assert str(out / "data" / "reward_real") in metrics["data"]
    assert after["reward_rollouts"]["real_steps"] == real.real_steps() == 80

    # Real steps per stage: the episodes' lengths of what each stage collected or evaluated,
    # none for RL in imagination, whose env/real_steps carry the data collected before it.
    def lengths(path):
        index = json.loads(path.read_text())
        return sum(e["length"] for e in index.get("episodes", index))

    steps = {name: item["real_steps"] for name, item in after.items()}
    assert steps["sft"] == lengths(out / "sft" / "demos" / "index.json") > 0
    assert steps["base_rollouts"] == lengths(out / "data" / "base" / "index.json") > 0
    assert steps["eval_base"] == lengths(out / "eval" / "base" / "report.json") > 0
    assert steps["stage1"] == steps["stage2"] == steps["world_model"] == 0
    rows = [json.loads(line) for line in (out / "stage1" / "metrics.jsonl").open()]
    # from the base policy, as the simulator control counts: its demonstrations (sft) left out
    data = steps["base_rollouts"] + steps["labelled_base"] + steps["reward_rollouts"]
    data += steps["trust_stage1"]  # the trust audit's replays: real steps before stage 1
    assert {r["env/real_steps"] for r in rows} == {data}
    assert report["real_steps"] == steps
    assert report["total_real_steps"] == sum(steps.values())
    # The simulator control ran stage 1's and stage 2's steps (2 + 2) in the simulator from the
    # base policy; its real steps are its own, counted apart from the method's.
    rows = [json.loads(line) for line in (out / sim / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert steps[sim] == rows[-1]["env/real_steps"] == report["simulator_control_real_steps"] > 0
    assert "name: " + str(out / "sft" / "policy") in (out / sim / "config.yaml").read_text()
    method = [v for k, v in steps.items() if not k.startswith("eval") and k != sim]
    assert report["total_real_steps_without_evaluation"] == sum(method)
    assert f"{sim} - base" in report["differences"]
    assert "## Against RL in the real simulator" in (out / "report.md").read_text()
    assert "| stage1 |" in (out / "report.md").read_text()

    # Each world model was checked before RL in it; RL judged success at the threshold the check
    # settled (the profile's: the reward model's own), and the report compares stages episode by
    # episode.
    for name in ("wm_base", "wm_evo1"):
        assert (out / "check" / name / "report.md").is_file()
        check = after[f"eval_{name}"]["result"]
        assert steps[f"eval_{name}"] == check["real_steps"] > 0
        assert report["world_model_reliability"][name]["rl_threshold"] == check["rl_threshold"]
    stage1_cfg = (out / "stage1" / "config.yaml").read_text()
    threshold = after["eval_wm_base"]["result"]["rl_threshold"]
    assert f"success_threshold: {threshold}" in stage1_cfg
    # The refinement round trained two candidates; the evolved policy's audit in each and in
    # the current world model chose where stage 2 ran (its replays: real steps).
    accept = after["accept1"]["result"]
    assert list(accept["world_models"]) == ["current", "wm_evo1", "wm_evo1_seed1"]
    assert all(t["episodes"] == 2 for t in accept["world_models"].values())  # mw2, 1 per task
    assert steps["accept1"] == accept["real_steps"] > 0
    chosen = accept["world_models"][accept["chosen"]]["path"]
    assert f"path: {chosen}" in (out / "stage2" / "config.yaml").read_text()
    assert report["acceptance"]["round1"]["chosen"] == accept["chosen"]
    # The round's reliability row names the world model stage 2 ran in.
    stage2_wm = "wm_base" if kept else accept["chosen"]
    assert report["world_model_reliability"]["wm_evo1"]["world_model"] == stage2_wm
    assert "## World-model acceptance" in (out / "report.md").read_text()
    assert (out / "accept" / "round1" / "acceptance.json").is_file()
    assert "stage2 - base" in report["differences"]
    assert ("stage2 - frozen_control" in report["differences"]) == (not kept)
    if kept:
        assert "The frozen-world-model control is `stage2`" in (out / "report.md").read_text()
    # Per-task trust: stage 1's own audit (replays: real steps), stage 2's and the control's
    # the acceptance's tallies; at the smoke profile's floor 0 every task trains.
    assert steps["trust_stage1"] == after["trust_stage1"]["result"]["real_steps"] > 0
    assert (out / "trust" / "stage1" / "judge_audit.json").is_file()
    assert not {"trust_stage2", "trust_frozen_control"} & set(after)
    trust = report["trust"]
    assert set(trust) == {"stage1", "stage2", *control}
    assert trust["stage2"]["audit"] == f"accept/round1/{accept['chosen']}"
    assert all(t["train_tasks"] == ["handle-press", "coffee-button"] for t in trust.values())
    assert "train_tasks:\n  - handle-press\n  - coffee-button" in stage1_cfg
    assert "## Tasks RL trained on" in (out / "report.md").read_text()
