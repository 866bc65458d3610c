"""The world-model health gate between a world model's training and RL in it (coevolve/gate.py)."""

from __future__ import annotations

import pytest

from wmrl_cli.coevolve.gate import enforce_gate, gate_failures
from wmrl_cli.config import RunConfig, resolve_config
from wmrl_cli.errors import WmrlError


def _check(gap: float | None, recall: float | None, raw_recall: float = 0.2) -> dict:
    return {
        "gate_step": 8,
        "action_gap@8": gap,
        "recall_at_reward_threshold": raw_recall,
        "recalibrated_recall_cv": recall,
    }


def _recalibrating() -> RunConfig:
    cfg = resolve_config("mw-coevolve-smoke")
    cfg.coevolve.recalibrate_threshold = True  # the gate reads the recalibrated recall
    return cfg


def test_gate_passes_without_floors_and_above_them(tmp_path) -> None:
    cfg = _recalibrating()
    assert gate_failures(_check(0.0, 0.0), cfg) == []  # no floor configured: nothing is checked
    cfg.coevolve.min_action_gap_db, cfg.coevolve.min_imagined_recall = 1.0, 0.6
    assert gate_failures(_check(1.2, 0.7), cfg) == []
    enforce_gate("wm_base", _check(1.2, 0.7), cfg, tmp_path)


def test_gate_names_each_metric_below_its_floor(tmp_path) -> None:
    cfg = _recalibrating()
    cfg.coevolve.min_action_gap_db, cfg.coevolve.min_imagined_recall = 1.0, 0.6
    failures = gate_failures(_check(0.1, 0.3), cfg)
    assert len(failures) == 2
    assert "action gap at step 8 +0.10 dB < 1.0" in failures[0]
    assert "recall of imagined success 0.30 < 0.6" in failures[1]
    assert "unmeasured" in gate_failures(_check(1.5, None), cfg)[0]  # no real success: no pass
    with pytest.raises(WmrlError, match=r"world model wm_evo1 failed the health check.*report"):
        enforce_gate("wm_evo1", _check(0.1, 0.9), cfg, tmp_path)
    # Without recalibration the gate reads the recall at the reward model's own threshold.
    cfg.coevolve.recalibrate_threshold = False
    assert "0.20 < 0.6" in gate_failures(_check(1.5, 0.9, raw_recall=0.2), cfg)[0]
