"""RL's real-simulator evaluation spread over the ranks (jobs/assembly.py `real_eval_callback`):
each rank runs its share of the batches and every rank gets the report a single rank makes,
episode for episode; the process group waits `training.dist_timeout_minutes`."""

from __future__ import annotations

import json

from tests.helpers.eval_ranks import OVERRIDES
from wmrl_cli.evaluation.policy_eval import rank_share
from wmrl_cli.ranks import run_ranks


def test_ranks_share_whole_batches_round_robin() -> None:
    ids = list(range(9))
    assert rank_share(ids, 2, 0, 1) == ids
    assert rank_share(ids, 2, 0, 2) == [0, 1, 4, 5, 8]
    assert rank_share(ids, 2, 1, 2) == [2, 3, 6, 7]
    assert rank_share(ids, 4, 2, 3) == [8]
    assert rank_share(ids, 4, 3, 4) == []  # more ranks than batches: nothing to run
    shares = [rank_share(ids, 3, r, 4) for r in range(4)]
    assert sorted(i for share in shares for i in share) == ids


def test_two_ranks_evaluate_the_episodes_one_rank_does(assets, tmp_path) -> None:
    reports, ranks = {}, {}
    for n in (1, 2):
        out = tmp_path / f"ranks{n}"
        out.mkdir()
        ended = run_ranks(n, "tests.helpers.eval_ranks", [str(assets / "sft"), str(out)])
        assert (ended.code, ended.errors) == (0, [])
        reports[n] = json.loads((out / "eval" / "step_000001.json").read_text())
        ranks[n] = [json.loads((out / f"rank_{r}.json").read_text()) for r in range(n)]
    assert "training.dist_timeout_minutes=7" in OVERRIDES
    assert [r["timeout_minutes"] for r in ranks[2]] == [7.0, 7.0]  # the group's own timeout
    one, two = reports[1], reports[2]
    assert len(one["episodes"]) == 9
    assert two["episodes"] == one["episodes"]  # same episodes, seeds, lengths and outcomes
    assert (two["per_task"], two["overall"]) == (one["per_task"], one["overall"])
    # every rank got the whole report's metrics
    assert ranks[2][0]["metrics"] == ranks[2][1]["metrics"] == ranks[1][0]["metrics"]


def test_a_batch_samples_the_same_actions_whatever_ran_before_it(assets) -> None:
    import numpy as np

    from wmrl_cli.envs.interface import Obs
    from wmrl_cli.policies.checkpoint import from_pretrained
    from wmrl_cli.policies.registry import LearnedPolicy

    policy = LearnedPolicy(from_pretrained(assets / "sft" / "policy", device="cpu"), seed=3)
    rng = np.random.default_rng(0)
    obs = Obs(rng.integers(0, 255, (2, 32, 32, 3), dtype=np.uint8), ["reach", "push"], np.arange(2))

    def batch(first: int) -> np.ndarray:
        policy.start_episodes([first, first + 1])
        return policy.act(obs, sample=True).actions

    alone = batch(4)
    batch(0)
    policy.act(obs, sample=True)  # a batch that ran longer
    assert np.array_equal(batch(4), alone)
    assert not np.array_equal(batch(6), alone)  # another batch samples its own actions
