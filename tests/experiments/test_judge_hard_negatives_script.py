"""experiments/judge-hard-negatives/judge_hard_negatives.py on tiny call stores: the expert episodes
as one confirmed and two false calls per RL step, the judge fine-tuned on step 1, tested on step
2."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import ROOT
from wmrl_cli.config import dump_config, resolve_config
from wmrl_cli.data.episodes import VERIFIED_CALL_LABELS, EpisodeStore


def _calls(episodes) -> list:
    out = []
    for i, episode in enumerate(episodes):
        success = episode.success if i == 0 else np.zeros_like(episode.success)
        call = "confirmed" if i == 0 else "false"
        imagined = {"labels": VERIFIED_CALL_LABELS, "reset_entry": i, "call": call}
        out.append(dataclasses.replace(episode, success=success, sim_states={}, imagined=imagined))
    return out


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
def test_fine_tunes_on_the_early_calls_and_rereads_the_later_ones(
    assets, expert_episodes, tmp_path
) -> None:
    calls = tmp_path / "verified_calls"
    (tmp_path / "config.yaml").write_text(dump_config(resolve_config("mw-coevolve-smoke")))
    for step in (1, 2):
        EpisodeStore(calls / f"step_{step:06d}").add(_calls(expert_episodes))
    out = tmp_path / "out"
    cmd = [
        sys.executable, "experiments/judge-hard-negatives/judge_hard_negatives.py",
        "--reward-model", str(assets / "rm"), "--calls", str(calls), "--split", "1",
        "--data", str(assets / "demos"), "--steps", "3",
        "--out", str(out),
    ]  # fmt: skip
    assert cmd[6:8] == ["--split", "1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    result = json.loads((out / "judge_hard_negatives.json").read_text())
    assert (result["train_steps"], result["test_steps"]) == ([1], [2])
    assert (result["train_calls"], result["train_false_calls"]) == (3, 2)
    for name in ("base", "fine_tuned", "fine_tuned_at_base_threshold"):
        row = result[name]
        assert row["confirmed"] == 1 and 0 <= row["true_calls"] <= min(row["calls"], 1)
        assert row["calls"] <= 3
    assert (out / "reward_model").is_dir()
    # a split with nothing on one side: one line, exit 2
    proc = subprocess.run(
        [*cmd[:7], "5", *cmd[8:]], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2 and proc.stderr.startswith("error: --split 5 leaves no calls")
