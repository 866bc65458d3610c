"""benchmarks/wm_flops.py at tiny size: every part of an imagined frame is counted, and the
denoiser's share grows with the sampling steps (the count sees the sampling loop)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.helpers import ROOT


@pytest.fixture
def flops(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import wm_flops

    return wm_flops


@pytest.mark.parametrize("backend", [pytest.param("wan", marks=pytest.mark.slow), "opensora"])
def test_the_parts_add_up_and_the_denoiser_scales_with_its_steps(flops, monkeypatch, backend):
    one = flops.world_model_flops(backend, "tiny", 2)
    parts = ("denoiser", "decode", "encode", "other", "reset")
    assert one["gflop_per_frame"] == pytest.approx(sum(one[f"{p}_gflop"] for p in parts))
    assert one["denoiser_gflop"] > 0 and one["decode_gflop"] > 0
    tiny = flops.fullsize.SIZES["tiny"]
    more = dataclasses.replace(
        tiny, wan_steps=2 * tiny.wan_steps, opensora_steps=2 * tiny.opensora_steps
    )
    monkeypatch.setitem(flops.fullsize.SIZES, "tiny", more)
    two = flops.world_model_flops(backend, "tiny", 2)
    assert two["denoiser_gflop"] == pytest.approx(2 * one["denoiser_gflop"])
    assert two["decode_gflop"] == pytest.approx(one["decode_gflop"])
    assert one["fps_at_mfu_0.5"] == pytest.approx(one["fps_at_mfu_0.3"] * 5 / 3)
