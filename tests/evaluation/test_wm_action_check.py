"""Action sensitivity in the open-loop evaluation: the same rollout under other actions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.toy_world import ShiftModel
from wmrl_cli.data.episodes import Episode
from wmrl_cli.evaluation.world_model_eval import open_loop_eval

SIZE, CHUNK, A = 8, 4, 2


def _episode(direction: float, seed: int) -> Episode:
    steps = 2 * CHUNK
    actions = np.zeros((steps, A), dtype=np.float32)
    actions[:, 0] = direction
    levels = np.clip(120 + 40 * direction * np.arange(steps + 1), 0, 255).astype(np.uint8)
    frames = np.broadcast_to(levels[:, None, None, None], (steps + 1, SIZE, SIZE, 3)).copy()
    return Episode(
        task_id=0,
        task_name="toy",
        instruction="toy",
        seed=seed,
        init_id=0,
        frames=frames,
        actions=actions,
        rewards=np.zeros(steps, dtype=np.float32),
        success=np.zeros(steps, dtype=bool),
        chunk_size=CHUNK,
    )


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_model_that_follows_its_actions_has_a_positive_gap(batch_size: int) -> None:
    episodes = [_episode(1.0, 0), _episode(-1.0, 1)]
    report = open_loop_eval(ShiftModel(1.0), episodes, 8, batch_size=batch_size, action_check=True)
    assert report.psnr[0] == pytest.approx(100.0, abs=1.0)  # exact prediction
    assert report.other_actions_psnr is not None
    assert all(g > 10.0 for g in (report.action_gap(s) for s in range(1, 9)))
    assert "action_gap@8" in report.summary()


def test_a_model_that_ignores_its_actions_has_no_gap() -> None:
    episodes = [_episode(1.0, 0), _episode(-1.0, 1)]
    report = open_loop_eval(ShiftModel(0.0), episodes, 8, action_check=True)
    assert [report.action_gap(s) for s in range(1, 9)] == [0.0] * 8
    assert report.psnr == report.copy_psnr  # it is the copy baseline


def test_no_check_by_default_or_with_one_episode() -> None:
    model = ShiftModel(1.0)
    assert open_loop_eval(model, [_episode(1.0, 0)] * 2, 8).other_actions_psnr is None
    single = open_loop_eval(model, [_episode(1.0, 0)], 8, action_check=True)
    assert single.action_gap(8) is None and "action_gap@8" not in single.summary()
