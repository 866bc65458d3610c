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


@pytest.mark.parametrize("batch_size", [1, 2])
def test_per_episode_values_average_to_the_summary_in_episode_order(batch_size: int) -> None:
    # the third episode lasts one chunk: NaN at step 8, so the mean at 8 is of the other two
    short = _episode(0.5, 2)
    short.frames, short.actions = short.frames[: CHUNK + 1], short.actions[:CHUNK]
    short.rewards, short.success = short.rewards[:CHUNK], short.success[:CHUNK]
    episodes = [_episode(1.0, 0), _episode(-1.0, 1), short]
    report = open_loop_eval(ShiftModel(1.0), episodes, 8, batch_size=batch_size, action_check=True)
    values = report.per_episode((4, 8))
    assert set(values) == {"psnr@4", "action_gap@4", "psnr@8", "action_gap@8"}
    assert len(values["psnr@4"]) == 3 and np.isnan(values["psnr@8"][2])
    summary = report.summary((4, 8))
    for key in values:
        assert np.nanmean(values[key]) == pytest.approx(summary[key], rel=1e-5)
    # without alternatives: PSNR alone
    assert set(open_loop_eval(ShiftModel(1.0), episodes, 8).per_episode((4, 8))) == {
        "psnr@4",
        "psnr@8",
    }
