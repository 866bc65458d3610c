"""benchmarks/gpu_fullsize.py's full-size models on the meta device (nothing is allocated): the
shapes a lent GPU will push through them (256x256 frames, 32 policy sequences, LoRA rank 32),
through the script's own functions, and the published sizes' parameter counts; and the
script's way past an out-of-memory error, which only a GPU raises. What only a GPU shows (speed,
memory, kernels) is the script's to measure; --size tiny runs its code on the CPU
(test_gpu_fullsize_script.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import ROOT

META = torch.device("meta")


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_fullsize

    return gpu_fullsize


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# the denoiser's published size: Wan2.2-TI2V-5B's DiT; STDiT3-XL/2 without the text
# cross-attention the world model never runs (1.1 B with it)
@pytest.mark.parametrize(
    "backend, low, high", [("wan", 4.9e9, 5.1e9), ("opensora", 0.85e9, 0.95e9)]
)
def test_the_full_world_models_imagine_256px_chunks_on_the_meta_device(
    script, backend: str, low: float, high: float
) -> None:
    model = script.world_model(backend, "full", 1, META, torch.bfloat16)  # 1 sampling step
    assert low < _count(model.transformer) < high
    assert {p.device.type for p in model.parameters()} == {"meta"}  # built where it runs
    # bf16 but for what diffusers keeps in float32 (Wan's RoPE, time embedder, norms), as
    # imagination loads it (WorldModel.place)
    kept = sum(p.numel() for p in model.parameters() if p.dtype == torch.float32)
    assert {p.dtype for p in model.parameters()} <= {torch.bfloat16, torch.float32}
    assert kept < 0.02 * _count(model) and (kept > 0) == (backend == "wan")
    script.imagine_chunk(model, 2, 256)  # reset_context + predict, as the script times them
    frames = model.predict(torch.zeros(2, 8, 7))
    assert frames.shape == (2, 8, 256, 256, 3) and frames.dtype == torch.uint8


def test_the_full_policy_runs_a_grpo_micro_batch_with_lora_on_the_meta_device(
    script, monkeypatch
) -> None:
    from wmrl_cli.config import resolve_config
    from wmrl_cli.policies.config import LoraSpec
    from wmrl_cli.policies.lora import apply_lora
    from wmrl_cli.training.sharding import enable_activation_checkpointing

    model = script.build_policy("full", META)
    assert 7.45e9 < _count(model) < 7.55e9  # openvla-7b less the ViTs' unused last blocks
    assert {p.device.type for p in model.parameters()} == {"meta"}
    # the token check reads values, which the meta device has none of
    monkeypatch.setattr(model.action_tokenizer, "is_action_token", lambda ids: torch.tensor(True))
    model.train()
    enable_activation_checkpointing(model)
    apply_lora(model, LoraSpec(rank=32, alpha=32))
    script.micro_batch(model, 32, 256)  # forward and backward, 32 sequences of 256px frames
    trained = [p for p in model.parameters() if p.requires_grad]
    assert trained and all(p.grad is not None for p in trained)
    cfg = resolve_config("wan-spatial-grpo")
    cfg.training.lora_rank = 32
    plan = script.plan_for(cfg, model, META)
    assert 15 < plan.update < 30  # GiB: a bf16 frozen base, LoRA, 32 checkpointed sequences


def test_each_policy_variant_holds_its_weights_as_the_trainer_does(script) -> None:
    """LoRA: float32 adapters and projector over a frozen base in the compute dtype (the
    trainer's `PolicySharding.cast`; measured in float32 until 2026-11-29, 17 GiB above its plan
    on an H200); full fine-tuning: every weight trained, in float32 or bf16. The variants run on
    one model in turn, so each must undo the last."""
    from wmrl_cli.policies.lora import lora_active

    model = script.build_policy("tiny", torch.device("cpu"))
    for name in (script.LORA, script.FULL32, script.BF16, script.LORA):
        script.prepare_variant(model, name, torch.bfloat16)
        trained = {p.dtype for p in model.parameters() if p.requires_grad}
        frozen = {p.dtype for p in model.parameters() if not p.requires_grad}
        if name == script.LORA:
            assert lora_active(model)
            assert trained == {torch.float32} and frozen == {torch.bfloat16}
            assert all(not p.requires_grad for p in model.vision_towers.parameters())
        else:
            assert not lora_active(model) and not frozen
            assert trained == {torch.float32 if name == script.FULL32 else torch.bfloat16}
    script.prepare_variant(model, script.LORA, None)  # a CPU: no bf16 compute, all float32
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_out_of_memory_in_one_policy_variant_is_recorded_and_the_next_variant_runs(
    script, monkeypatch
) -> None:
    from wmrl_cli.config import resolve_config
    from wmrl_cli.policies.lora import lora_active

    measure = script.micro_batch

    def full_float32_runs_out(model, sequences: int, image: int) -> float:
        seconds = measure(model, sequences, image)  # gradients held, as when backward fails
        if not lora_active(model) and model.dtype == torch.float32:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 28.00 GiB")
        return seconds

    monkeypatch.setattr(script, "micro_batch", full_float32_runs_out)
    budget = script.Budget(1e6)
    rows = script.policy_section(
        "tiny", torch.device("cpu"), budget, resolve_config("wan-spatial-grpo")
    )
    lora, full32, bf16 = rows
    assert full32["error"] == "out of memory" and "seconds" not in full32
    assert lora["seconds"] > 0 and bf16["seconds"] > 0 and "error" not in bf16
    assert script.errors({"policy": rows}) == []  # out of memory is a result, not a failure
    assert script.errors({"policy": [{"variant": "x", "error": "ValueError: boom"}]})


def test_part_times_wraps_the_parts_only_while_inside_even_when_a_part_raises(script) -> None:
    from gpu_measure import part_times

    model = script.world_model("wan", "tiny", 1, torch.device("cpu"), torch.float32)
    with part_times(model, model.device) as seconds:
        assert "forward" in vars(model.transformer) and "decode" in vars(model.vae)
        with pytest.raises((RuntimeError, ValueError)):
            model.vae.decode(torch.zeros(1))  # a bad call: timed, raised, still unwrapped after
    assert seconds["decode"] > 0 and seconds["denoiser"] == 0
    assert not {"forward", "decode", "encode"} & (
        vars(model.transformer).keys() | vars(model.vae).keys()
    )
