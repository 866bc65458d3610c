"""benchmarks/wm_train_memory.py at tiny size: the fake-tensor count of a world-model training
step is the real CPU count byte for byte, holds at least the weights, gradients, moments and EMA
copy, and gradient checkpointing lowers the backward's peak. The full-size count (a few
minutes) is the script's: docs/benchmarks.md."""

from __future__ import annotations

import pytest

from tests.helpers import ROOT


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import wm_train_memory

    return wm_train_memory


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
def test_fake_counts_what_real_tensors_allocate_and_checkpointing_keeps_less(script) -> None:
    keys = ("weights_gib", "with_ema_gib", "update_peak_gib", "step_peak_gib")
    peaks = {}
    for checkpointing in (True, False):
        fake, real = (
            script.train_step_peaks(
                "opensora", "tiny", 2, checkpointing, script.counting.Counted(r)
            )
            for r in (False, True)
        )
        assert [fake[k] for k in keys] == [real[k] for k in keys]
        assert fake["peak_gib"] >= fake["arithmetic_gib"] > fake["with_ema_gib"]
        peaks[checkpointing] = fake["update_peak_gib"]
    assert peaks[True] < peaks[False]


def test_the_count_and_the_plan_are_set_side_by_side(script, tmp_path) -> None:
    counted = script.counting.Counted(False)
    row = script.train_step_peaks("wan", "tiny", 2, False, counted, frames=(8, 4))
    assert row["plan_gib"] > 0 and "reserved_peak_gib" not in row  # a GPU's only
    assert (row["context_frames"], row["chunk"]) == (8, 4)
    table = script.markdown([row, {**row, "error": "out of memory"}], "fake tensors (counted)")
    assert table.startswith("measured on fake tensors (counted)")
    assert "| wan | 8+4 | 32x32 | 2 |" in table and "out of memory" in table.splitlines()[-1]


def test_a_window_is_two_counts_with_a_chunk_the_vae_takes(script) -> None:
    import argparse

    assert script.window_frames("16,8") == (16, 8)
    for bad in ("4", "4,6", "6,8", "0,8", "a,8", "4,8,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            script.window_frames(bad)


def test_a_frame_size_the_model_refuses_is_a_row_of_its_own(script) -> None:
    """The run goes on to its other rows (as after an out-of-memory)."""
    from types import SimpleNamespace

    args = SimpleNamespace(size="tiny", batch=2, image=20, gpu=False, precision="bf16")
    row = script.measured_row("wan", (4, 8), True, args, script.counting.Counted(False))
    assert row["image"] == 20 and "multiples of 8" in row["error"]
    assert script.markdown([row], "x").splitlines()[-1].endswith("multiples of 8x8 |")


@pytest.mark.slow  # the suite's 15-minute budget (2026-11-29: the suite had reached 17.6)
def test_rank_zero_of_sharded_ranks_holds_its_share(script) -> None:
    """--ranks: the denoiser sharded over a fake process group (collectives move nothing):
    rank 0 holds about half the trained weights of one rank, and the group is gone after."""
    import torch.distributed as dist

    counted = script.counting.Counted(False)
    one = script.train_step_peaks("opensora", "tiny", 2, True, counted)
    two = script.train_step_peaks("opensora", "tiny", 2, True, counted, ranks=2)
    assert (one["ranks"], two["ranks"]) == (1, 2)
    assert one["trained_params"] == two["trained_params"]  # the whole denoiser's count
    shard = (one["with_ema_gib"] - one["weights_gib"]) / 2  # the EMA copy: one rank's weights
    assert two["with_ema_gib"] - two["weights_gib"] == pytest.approx(shard, rel=0.1)
    # sharded validation gathers the whole denoiser beside the shard: above the steps' weights
    assert two["validation_peak_gib"] > two["with_ema_gib"] and one["validation_peak_gib"] is None
    assert "| 2 | yes |" in script.markdown([two], "x") and "validation" in script.markdown(
        [two], "x"
    )
    assert not dist.is_initialized()
