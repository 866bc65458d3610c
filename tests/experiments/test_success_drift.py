"""experiments/real-steps-to-gain/success_drift.py: per task, the NLL of a store's real
successes under each policy beside the reference's."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import torch

from tests.helpers import ROOT
from wmrl_cli.data.bc import BCDataset

SCRIPT = ROOT / "experiments" / "real-steps-to-gain" / "success_drift.py"


class FixedPolicy:
    """Log-probability -k per token for instruction k's samples (chunks [B,1,1])."""

    def eval(self):
        return self

    def actions_to_tokens(self, chunks):
        return chunks

    def __call__(self, frames, prompts, targets, temperature):
        value = torch.tensor([-float(p[-1]) for p in prompts])
        return SimpleNamespace(log_probs=value[:, None, None].expand(len(prompts), 2, 3))


def test_each_task_averages_its_samples_and_rows_read_against_the_reference(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
    from success_drift import table, task_nll

    data = BCDataset(
        frames=np.zeros((5, 2, 2, 3), np.uint8),
        chunks=np.zeros((5, 1, 1), np.float32),
        prompt_ids=np.array([0, 0, 1, 2, 2]),
        instructions=["do 1", "do 2", "do 3"],
    )
    # instructions 1 and 3 are one task's (two wordings), 2 another's; batches of 2 cross them
    nll = task_nll(FixedPolicy(), data, ["a", "b", "a"], batch=2)
    assert nll == {"a": (1 + 1 + 3 + 3) / 4, "b": 2.0}
    text = table({"base": nll, "rl": {"a": 2.5, "b": 1.5}}, "base")
    assert "| a | 2.000 | +0.500 |" in text and "| b | 2.000 | -0.500 |" in text
    assert "| mean | 2.000 | +0.000 |" in text


def test_a_missing_policy_is_one_line_and_exit_2(tmp_path) -> None:
    cmd = [sys.executable, str(SCRIPT), "--store", str(tmp_path), "--out", str(tmp_path / "o")]
    cmd += ["--policy", f"base={tmp_path / 'nowhere'}", "--policy", f"rl={tmp_path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not a policy folder" in proc.stderr and not (tmp_path / "o").exists()
