"""experiments/judge-benchmark/judge_data_budget.py: nested per-task shares of a run's judge data,
held-out episodes no judge sees, the going-on figures paired with a reference judge; and the
script end to end on a hand-made run whose judges are already trained."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments" / "judge-benchmark"))
import judge_data_budget as budget  # noqa: E402  (a script of experiments/, not a package)
from judge_bench import Scored  # noqa: E402


def _index(tasks: dict[str, int]) -> list[dict]:
    return [{"task_name": t} for t, n in tasks.items() for _ in range(n)]


def test_shares_are_nested_per_task_and_seeded() -> None:
    index = _index({"a": 8, "b": 4})
    order = budget.per_task_order(index, seed=0)
    assert sorted(order["a"]) == list(range(8)) and sorted(order["b"]) == [8, 9, 10, 11]
    assert order == budget.per_task_order(index, seed=0) != budget.per_task_order(index, seed=1)
    quarter, half = budget.nested_share(order, 0.25), budget.nested_share(order, 0.5)
    assert len(quarter) == 3 and len(half) == 6  # 2 + 1, 4 + 2: per task
    assert set(quarter) <= set(half) <= set(budget.nested_share(order, 1.0))
    assert budget.nested_share(order, 0.0) == []
    # a task's order does not depend on the other tasks'
    assert budget.per_task_order(_index({"a": 8}), seed=0)["a"] == order["a"]
    with pytest.raises(budget.WmrlError, match="expected 0 to 1"):
        budget.nested_share(order, 1.5)


@pytest.mark.parametrize("spec", ["x", "x=1", "x=a,b", "=1,1", "x=2,0", "x=0,-1"])
def test_a_bad_judge_spec_is_one_clear_error(spec) -> None:
    with pytest.raises(budget.WmrlError, match="expected NAME=REAL,LABELLED"):
        budget.parse_judge(spec)
    assert budget.parse_judge("q=0.25,0.5") == ("q", (0.25, 0.5))


def _ep(task: str, calls_from: int | None, success_from: int | None, length: int = 16) -> Scored:
    scores = np.zeros(length, np.float32)
    if calls_from is not None:
        scores[calls_from:] = 1.0
    success = np.zeros(length, bool)
    if success_from is not None:
        success[success_from:] = True
    return Scored(task, "rl", scores, success, 4, "heldout")


def test_figures_and_the_pairing_with_a_reference() -> None:
    episodes = [
        _ep("a", 2, 9),  # called early, refuted; going on finds it at the end of its chunk 12
        _ep("a", 9, 9),  # found at once
        _ep("a", None, 5),  # never called
        _ep("b", 3, None),  # a false call
        _ep("b", None, None),  # quiet
    ]
    rows = budget.episode_rows(episodes, 0.5, 1)
    fig = budget.figures(rows)
    assert (fig["episodes"], fig["real_successes"], fig["calls"]) == (5, 3, 3)
    assert fig["recall_goes_on"] == pytest.approx(2 / 3) and fig["recall_ends"] == pytest.approx(
        1 / 3
    )
    assert fig["precision_ends"] == pytest.approx(1 / 3)
    result, same = budget.score_judge(episodes, 0.5, 1, 200, reference=rows)
    assert result["minus_reference"] == {"recall_goes_on": 0.0, "cost_goes_on": 0.0}
    assert result["minus_reference_interval95"]["recall_goes_on"] == [0.0, 0.0]
    assert set(result["tasks"]) == {"a", "b"} and result["tasks"]["b"]["real_successes"] == 0
    # a judge that calls nothing recalls nothing and replays nothing
    silent, _ = budget.score_judge(episodes, 2.0, 1, 200, reference=same)
    assert silent["all"]["recall_goes_on"] == 0.0 and silent["all"]["cost_goes_on"] == 0.0
    assert silent["minus_reference"]["recall_goes_on"] == pytest.approx(-2 / 3)
    low, high = silent["minus_reference_interval95"]["recall_goes_on"]
    assert low <= -2 / 3 <= high <= 0  # some draws hold only the never-called success


def _run(tmp_path):
    """A co-evolve run's data: 6 labelled and 4 real episodes per task (2 tasks), and stage 1's
    config."""
    from tests.helpers.episodes import visible_success_episode
    from wmrl_cli.config import resolve_config
    from wmrl_cli.config.loading import dump_config
    from wmrl_cli.data.episodes import EpisodeStore

    run = tmp_path / "run"
    for name, count, offset in (("labelled_base", 12, 0), ("reward_real", 8, 100),
                                ("base_merged", 4, 200)):  # fmt: skip
        eps = [visible_success_episode(offset + i, succeed=(i // 2) % 2 == 0) for i in range(count)]
        EpisodeStore(run / "data" / name).add(eps)
    (run / "stage1").mkdir()
    (run / "stage1" / "config.yaml").write_text(dump_config(resolve_config("mw-coevolve-smoke")))
    return run


def test_the_split_holds_out_episodes_no_judge_reads(tmp_path) -> None:
    from wmrl_cli.data.episodes import EpisodeStore

    run, out = _run(tmp_path), tmp_path / "out"
    judges = {"full": (1.0, 1.0), "half": (0.5, 0.5), "none": (0.0, 0.0)}
    record = budget.split(run, out, judges, test_per_task=2, seed=0)
    heldout = EpisodeStore.open(out / budget.HELDOUT / budget.HELDOUT)
    assert len(heldout) == 4 and record["heldout_steps"] == 4 * 12
    assert [m["id"] for m in heldout.index] == [0, 1, 2, 3]
    held_seeds = {m["seed"] for m in heldout.index}
    full = EpisodeStore.open(record["judges"]["full"]["stores"][1])
    assert len(full) == 8 and not held_seeds & {m["seed"] for m in full.index}
    half = record["judges"]["half"]
    assert half["real_steps"] == {"real": 4 * 12, "labelled": 4 * 12}
    assert half["judge_data_steps"] == 96 and record["judges"]["none"]["stores"] == []
    for path in half["stores"]:
        assert len(EpisodeStore.open(path)) == 4  # verified: every file whole
    with pytest.raises(budget.WmrlError, match="too few episodes"):
        budget.split(run, out, judges, test_per_task=6, seed=0)


def test_scores_trained_judges_end_to_end(tmp_path, capsys) -> None:
    from wmrl_cli.rewards.loading import save_reward_model
    from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model

    run, out = _run(tmp_path), tmp_path / "out"
    for name in ("full", "none"):  # trained already: the script keeps them
        model = build_resnet_reward_model(ResnetRewConfig(width=4))
        save_reward_model(model, out / "judges" / name / "reward_model")
    budget.main(["--run", str(run), "--out", str(out), "--judge", "full=1,1", "--judge",
                 "none=0,0", "--test-per-task", "2", "--draws", "50"])  # fmt: skip
    result = json.loads((out / "budget.json").read_text())
    assert set(result["results"]) == {"full", "none"}
    assert result["results"]["none"]["minus_reference"] is not None
    assert result["results"]["full"]["all"]["episodes"] == 4
    assert "| full | 192 |" in (out / "budget.md").read_text()  # 8 real + 8 labelled, 12 steps
    assert (out / "budget.png").stat().st_size > 0
    assert "trained, kept" in capsys.readouterr().out
    for argv, message in (
        (["--run", str(tmp_path / "nothing"), "--out", str(out)], "no stage1/config.yaml"),
        (["--run", str(run), "--out", str(out), "--reference", "x"], "not among the judges"),
        (["--run", str(run), "--out", str(out), "--test-per-task", "0"], "expected at least 1"),
    ):
        with pytest.raises(SystemExit) as stopped:
            budget.main(argv)
        assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_recall_at_a_matched_cost_over_a_threshold_sweep() -> None:
    episodes = [_ep("a", 2, 9), _ep("a", 9, 9), _ep("a", None, 5), _ep("b", 3, None)]
    swept = budget.sweep(episodes, 1)
    assert swept.found.shape == (len(swept.thresholds), 4) and np.isinf(swept.thresholds[-1])
    assert not swept.found[-1].any() and not swept.steps[-1].any()  # no call, no replay
    assert budget.recall_at_cost(swept, 0.0) == 0.0
    # the lowest threshold (0) calls every frame: every success paid, at the most replays
    assert budget.recall_at_cost(swept, 1.0) == 1.0
    assert budget.cost_for_recall(swept, 0.8) == swept.steps[0].sum() / swept.exact.sum()
    assert budget.cost_for_recall(swept, 1.01) is None
    cheapest = budget.cost_for_recall(swept, 0.5)
    assert 0 < cheapest <= 1 and budget.recall_at_cost(swept, cheapest) >= 0.5
    same = budget.matched(swept, 1.0, 50, swept)
    assert same["minus_reference"] == 0.0 and same["minus_reference_interval95"] == [0.0, 0.0]
    assert "minus_reference" not in budget.matched(swept, 1.0, 50, None)
