"""The memory plan (memory/plan.py) against the bytes the code allocates
(tests/helpers/memory_plan_count.py): the storage count on fake tensors equals the count on real
ones (tiny size, byte for byte), the count itself, FSDP's shards, and at full size the plan
holds every count within 15% (slow: about a minute on fake tensors, nothing allocated;
`make memory-plan-check` runs it and prints the table of docs/benchmarks.md)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import memory_plan_count as check


def test_a_storage_counts_once_whatever_its_views_and_leaves_when_freed() -> None:
    tracker = check.StorageTracker()
    with tracker:
        a = torch.zeros(1024)  # 4 KiB
        view = a[:10].view(2, 5)
        b = a * 2  # a new storage
        assert tracker.now == 8192 and tracker.peak == 8192
        del a, b
        assert tracker.now == 4096  # the view keeps the first storage alive
        del view
    assert tracker.now == 0 and tracker.peak == 8192


def _bytes(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "seconds"}


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
def test_fake_tensors_count_the_bytes_real_ones_allocate(monkeypatch) -> None:
    lora = {"lora_rank": 32}
    real = check.policy_variant("tiny", check.Counted(real=True), lora, 4)
    fake = check.policy_variant("tiny", check.Counted(real=False), lora, 4)
    assert _bytes(fake) == _bytes(real)
    assert real["kept_for_backward_gib"] > 0 and real["moments_gib"] > 0
    monkeypatch.setitem(check.IMAGINE_RUNS, "tiny", ((2, None), (2, 1)))
    monkeypatch.setitem(check.OTHER_RUNS, "tiny", ((2, None), (2, 1)))
    real_wm = check.imagination_section("tiny", check.Counted(real=True))
    fake_wm = check.imagination_section("tiny", check.Counted(real=False))
    assert [_bytes(r) for r in fake_wm] == [_bytes(r) for r in real_wm]
    assert all(r["working_set_gib"] > 0 for r in real_wm)
    windows = [(r["context_frames"], r["chunk"], r["image"]) for r in real_wm[:6]]
    assert windows == [(4, 8, 32)] * 2 + [(8, 4, 32)] * 2 + [(4, 8, 16)] * 2
    for whole, batched in zip(real_wm[::2], real_wm[1::2]):  # one env per VAE call holds less
        assert batched["working_set_gib"] < whole["working_set_gib"]


def test_rank_zero_of_eight_fake_fsdp_ranks_holds_an_eighth_of_the_state() -> None:
    """wmrl's FSDP sharding in a process group whose collectives move nothing: rank 0 holds
    its shard of the weights, gradients and moments, and the group is gone afterwards."""
    import torch.distributed as dist

    model = check.fullsize.build_policy("tiny", torch.device("meta"))
    shard = sum(p.numel() for p in model.parameters()) * 4 / 8 / 2**30  # float32, one rank's
    eight = check.policy_variant("tiny", check.Counted(real=False), {}, 4, 8)
    assert eight["gradients_gib"] == pytest.approx(shard, rel=0.05)  # FSDP pads each shard
    assert eight["moments_gib"] == pytest.approx(2 * shard, rel=0.05)
    assert shard < eight["weights_gib"] < 1.2 * shard  # + the buffers, which are not sharded
    assert not dist.is_initialized()


@pytest.mark.slow
def test_the_memory_plan_holds_the_full_size_count_within_fifteen_percent() -> None:
    result = check.run("full", real=False)
    print("\n" + check.markdown(result))  # the table of docs/benchmarks.md (make memory-plan-check)
    for row in result["policy"]:
        # the plan may overstate (it adds every gradient to every activation, which backward
        # frees as it makes them) but must not understate what the code allocates
        assert 0.85 < row["ratio"] < 1.05, (row["variant"], row["peak_gib"], row["plan_gib"])
        rollout = row["rollout_peak_gib"] / row["plan_rollout_gib"]  # rarely the peak: apart
        assert 0.85 < rollout < 1.05, (row["variant"], row["rollout_peak_gib"])
    for r in result["imagination"]:
        assert 0.85 < r["working_set_gib"] / r["plan_gib"] < 1.05, r
