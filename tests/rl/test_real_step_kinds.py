"""rl/real_step_kinds.py: real steps by what spent them, and a checkpoint's split restored."""

from __future__ import annotations

from wmrl_cli.rl.real_step_kinds import KINDS, real_step_metrics, restored, taken_by_kind


class Imagined:
    real = False


class Simulator:
    real = True


class ExactlyJudged:
    real = True
    real_kind = "exact"


class Verified:
    real = False

    def pop_real_steps_by_kind(self) -> dict[str, int]:
        return {"calls": 30, "exact": 12}


def test_each_env_counts_its_own_kind() -> None:
    assert taken_by_kind(Imagined(), 100) == {}
    assert taken_by_kind(Simulator(), 100) == {"rollouts": 100}
    assert taken_by_kind(ExactlyJudged(), 100) == {"exact": 100}
    assert taken_by_kind(Verified(), 100) == {"calls": 30, "exact": 12}


def test_the_total_is_the_sum_of_the_kinds() -> None:
    metrics = real_step_metrics({"data": 1000, "calls": 30, "exact": 12, "rollouts": 0})
    assert metrics["env/real_steps"] == 1042.0
    assert {f"env/real_steps_{k}" for k in KINDS} < set(metrics)
    assert metrics["env/real_steps_calls"] == 30.0


def test_a_checkpoint_before_the_split_counts_its_total_as_data() -> None:
    assert restored({"real_steps": 5000}, 100) == {
        "data": 5000,
        "rollouts": 0,
        "calls": 0,
        "exact": 0,
    }
    split = {"data": 100, "rollouts": 0, "calls": 40, "exact": 2}
    assert restored({"real_steps": 142, "real_steps_by_kind": split}, 100) == split
    assert restored({}, 100)["data"] == 100
