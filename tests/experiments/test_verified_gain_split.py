"""experiments/real-steps-to-gain/verified_gain_split.py's reading of labelled imagined episodes: a
call is paid only where the simulator's success comes by it; recall over the episodes whose actions
succeed."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import torch

from tests.helpers import ROOT
from wmrl_cli.data.episodes import EpisodeStore


class ScriptedJudge:
    """Scores each frame by the episode's task id: the frames of task k score 1 from frame k."""

    kind = "resnet"

    def predict(self, frames, task_ids=None):
        scores = torch.zeros(frames.shape[:2])
        first = int(frames[0, 0, 0, 0, 0])  # each episode's first pixel: where its call falls
        if first:
            scores[0, first:] = 1.0
        return scores


def test_paid_needs_the_real_success_by_the_call(expert_episodes, tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "real-steps-to-gain"))
    from verified_gain_split import split

    base = expert_episodes[0]
    length = base.success.shape[0]

    def episode(call_frame: int, success_from: int | None):
        frames = np.zeros_like(base.frames)
        frames[0, 0, 0, 0] = call_frame  # 0: never called
        success = np.zeros(length, dtype=bool)
        if success_from is not None:
            success[success_from:] = True
        return dataclasses.replace(base, frames=frames, success=success, sim_states={})

    store = tmp_path / "store"
    EpisodeStore(store).add(
        [
            episode(5, 2),  # called at step 4, real from step 2: paid
            episode(5, 9),  # called at step 4, real only later: a false call
            episode(0, 3),  # real, never called: missed
            episode(6, None),  # called, never real
        ]
    )
    verdict = SimpleNamespace(round_scores=False, success_frames=1)
    row = split(store, ScriptedJudge(), verdict, 0.5)
    assert (row["episodes"], row["calls"], row["paid"]) == (4, 3, 1)
    assert row["real_success"] == 0.75 and row["paid_success"] == 0.25
    assert row["recall"] == 1 / 3 and row["precision"] == 1 / 3
