"""`precision`: bf16 autocast of the world models' forward passes, float32 everywhere else."""

from __future__ import annotations

import pytest
import torch

from wmrl_cli.runtime import bf16_supported, resolve_precision
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig


def _model() -> OpenSoraWorldModel:
    config = OpenSoraWorldModelConfig.tiny()
    config.transformer.depth, config.transformer.hidden_size = 1, 32
    config.transformer.num_heads, config.transformer.action_dim = 2, 2
    config.height = config.width = 32
    torch.manual_seed(0)
    model = OpenSoraWorldModel(config)
    torch.nn.init.normal_(model.transformer.final_layer.linear.weight, std=0.02)
    return model


def _batch() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (2, 12, 32, 32, 3), dtype=torch.uint8, generator=gen)
    return {
        "reference_frames": frames[:, 0],
        "context_frames": frames[:, :4],
        "context_actions": torch.zeros(2, 4, 2),
        "target_frames": frames[:, 4:],
        "target_actions": torch.rand(2, 8, 2, generator=gen),
    }


def test_fp32_is_no_autocast_and_auto_follows_the_device() -> None:
    assert resolve_precision("fp32") is None
    expected = torch.bfloat16 if bf16_supported("cpu") else None
    assert resolve_precision("auto") == expected


def test_unset_is_bf16_on_a_gpu_and_float32_on_any_cpu(monkeypatch) -> None:
    """World models train and imagine in bf16 on a GPU by default (the memory plans count
    autocast), and a CPU's runs stay float32, also where it has native bf16."""
    from wmrl_cli.config import resolve_config

    assert resolve_config().precision is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_precision(None, "cuda") == torch.bfloat16
    assert resolve_precision(None, "cuda:1") == torch.bfloat16
    monkeypatch.setattr("wmrl_cli.runtime.bf16_supported", lambda device="cpu": True)  # AMX
    assert resolve_precision(None, "cpu") is None
    assert resolve_precision("auto", "cpu") == torch.bfloat16  # auto: wherever it is native
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("wmrl_cli.runtime.bf16_supported", lambda device="cpu": False)
    assert resolve_precision(None, "cpu") is None and resolve_precision("fp32", "cuda") is None


def test_bf16_where_unsupported_falls_back_with_a_notice(monkeypatch, capsys) -> None:
    monkeypatch.setattr("wmrl_cli.runtime.bf16_supported", lambda device="cpu": False)
    assert resolve_precision("bf16") is None
    assert "no native bf16" in capsys.readouterr().out


def test_bf16_autocast_keeps_float32_weights_and_loss_and_stays_close() -> None:
    model = _model()
    loss32 = model(_batch(), generator=torch.Generator().manual_seed(1))
    model.autocast_dtype = torch.bfloat16
    loss16 = model(_batch(), generator=torch.Generator().manual_seed(1))
    assert loss16.dtype == torch.float32 and loss16.item() == pytest.approx(loss32.item(), rel=0.05)
    loss16.backward()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        batch = _batch()
        model.reset_context(
            batch["reference_frames"], batch["context_frames"], batch["context_actions"]
        )
        frames16 = model.predict(batch["target_actions"], torch.Generator().manual_seed(2))
        model.autocast_dtype = None
        model.reset_context(
            batch["reference_frames"], batch["context_frames"], batch["context_actions"]
        )
        frames32 = model.predict(batch["target_actions"], torch.Generator().manual_seed(2))
    assert frames16.dtype == torch.uint8
    # bf16 has 8 bits of mantissa: decoded frames differ by a few grey levels at most on average
    assert (frames16.float() - frames32.float()).abs().mean() < 4.0


@pytest.mark.slow  # inductor compiles the denoiser and decoder: a minute or two on one core
def test_compiled_world_model_predicts_what_the_eager_one_does() -> None:
    eager, compiled = _model().eval(), _model().eval()
    compiled.compile_for_imagination()  # as compile_world_model does
    names = [n for n, _ in eager.named_parameters()]
    assert [n for n, _ in compiled.named_parameters()] == names  # a checkpoint reads the same
    frames = _batch()["context_frames"]
    actions = torch.rand(2, 8, 2, generator=torch.Generator().manual_seed(1))
    out = []
    for model in (eager, compiled):
        with torch.no_grad():
            model.reset_context(frames[:, 0], frames, torch.zeros(2, 4, 2))
            out.append(model.predict(actions, generator=torch.Generator().manual_seed(2)))
    assert (out[0].int() - out[1].int()).abs().max() <= 2  # uint8 frames, rounding only
