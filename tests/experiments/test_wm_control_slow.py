"""The synthetic controllability test end to end (slow: about 25 CPU minutes on one thread).

The dot world's experiment (`experiments/controllability/wm_control.py`) with the real `train-wm`
code path: an OpenSora autoencoder, then a denoiser with the stronger action path and the fast
recipe for 15 CPU minutes. A model that follows its actions puts the dot where the actions lead:
closer to the truth than copying the first frame with the true actions, and far from it with another
episode's actions (docs/benchmarks.md, "Controllability")."""

from __future__ import annotations

import json
import sys

import pytest

from tests.helpers import ROOT

CONTROLLABILITY = ROOT / "experiments" / "controllability"

RECIPE = [
    "world_model.action_tokens=true",
    "world_model.action_modulation=all",
    "world_model.train_shift=3",
    "world_model.lr=2e-3",
    "world_model.warmup_steps=20",
    "world_model.batch_size=8",
    "world_model.ema_decay=0.95",
]


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(CONTROLLABILITY))
    import wm_control

    monkeypatch.setattr(sys, "argv", ["wm_control.py", *argv])
    wm_control.main()


@pytest.mark.slow
def test_a_world_model_learns_to_move_the_dot_its_actions_move(tmp_path, monkeypatch) -> None:
    data = tmp_path / "data"
    _run(
        [
            "--minutes",
            "0.01",
            "--vae-steps",
            "200",
            "--val-every",
            "100000",
            "--out",
            str(tmp_path / "ae"),
            "--data",
            str(data),
        ],
        monkeypatch,
    )
    argv = [
        "--minutes",
        "15",
        "--val-every",
        "100",
        "--out",
        str(tmp_path / "wm"),
        "--data",
        str(data),
        "--set",
        f"world_model.vae_init={tmp_path / 'ae'}",
    ]
    for option in RECIPE:
        argv += ["--set", option]
    _run(argv, monkeypatch)
    final = json.loads((tmp_path / "wm" / "control.json").read_text())["curve"][-1]
    assert final["centroid_true@8"] < final["centroid_copy@8"] - 1.0
    assert final["centroid_other@8"] > final["centroid_copy@8"] + 1.0
    assert final["action_gap@8"] > 2.0 and final["response_ratio@8"] > 0.4
