"""Action guidance distilled into one pass (base.GuidanceTeacher,
training/guidance_distillation.py): the loss's target is the teacher's guided velocity in the
model's own parametrisation, training on it moves the student there, and the student samples
with one denoiser pass per step."""

from __future__ import annotations

import copy

import pytest
import torch

from wmrl_cli.errors import ConfigError
from wmrl_cli.training.guidance_distillation import distilled_student, frozen_teacher
from wmrl_cli.world_models.action_conditioning import freeze_unused_null_action, sampler_guidance
from wmrl_cli.world_models.base import FlowWorldModel, GuidanceTeacher
from wmrl_cli.world_models.opensora import OpenSoraWorldModel, OpenSoraWorldModelConfig
from wmrl_cli.world_models.wan import WanWorldModel, WanWorldModelConfig

B, SIZE = 2, 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models (conftest.py)


def _model(backend: str, **options) -> FlowWorldModel:
    """A tiny guided world model (null action, guidance 2, 2 sampling steps), its output live."""
    if backend == "opensora":
        config = OpenSoraWorldModelConfig.tiny()
        config.transformer.depth, config.transformer.hidden_size = 1, 32
        config.transformer.num_heads, config.transformer.action_dim = 2, 2
        model_cls = OpenSoraWorldModel
    else:
        config = WanWorldModelConfig.tiny(action_dim=2)
        config.transformer.num_layers, config.transformer.ffn_dim = 1, 64
        model_cls = WanWorldModel
    config.height = config.width = SIZE
    config.transformer.null_action = True
    config.action_guidance, config.num_inference_steps = 2.0, 2
    for key, value in options.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = model_cls(config)
    head = (
        model.transformer.final_layer.linear
        if backend == "opensora"
        else model.transformer.proj_out
    )
    with torch.no_grad():
        torch.nn.init.normal_(head.weight, std=0.05)
        for name, p in model.named_parameters():
            if "null_action" in name:
                p.normal_()  # a null action unlike every real one: guidance changes the velocity
    return model


def _batch(model: FlowWorldModel) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)

    def frames(*lead: int) -> torch.Tensor:
        return torch.randint(0, 255, (*lead, SIZE, SIZE, 3), dtype=torch.uint8, generator=g)

    k, c = model.num_context_frames, model.config.num_target_frames
    return {
        "reference_frames": frames(B),
        "context_frames": frames(B, k),
        "context_actions": torch.rand(B, k, 2, generator=g) * 2 - 1,
        "target_frames": frames(B, c),
        "target_actions": torch.rand(B, c, 2, generator=g) * 2 - 1,
    }


@pytest.mark.parametrize(
    ("backend", "delta"), [("opensora", True), ("opensora", False), ("wan", False)]
)
def test_the_target_is_the_teachers_velocity_in_the_students_parametrisation(backend, delta):
    """Unguided (scale 1), a teacher's copy is already its own student: the loss is zero in
    either parametrisation (x0 offsets, Open-Sora's negated velocity); guided it is not."""
    teacher = _model(backend, delta_prediction=delta).eval()
    student = copy.deepcopy(teacher)
    batch = _batch(teacher)
    with torch.no_grad():
        same = student(batch, torch.Generator().manual_seed(0), GuidanceTeacher(teacher, 1.0))
        guided = student(batch, torch.Generator().manual_seed(0), GuidanceTeacher(teacher, 2.0))
    assert same.item() == pytest.approx(0.0, abs=1e-9)
    assert guided.item() > 1e-4


def _denoiser_passes(model: FlowWorldModel, monkeypatch) -> int:
    calls = []
    inner = type(model)._denoiser_output

    def counted(self, *args):
        calls.append(1)
        return inner(self, *args)

    monkeypatch.setattr(type(model), "_denoiser_output", counted)
    frames = torch.randint(0, 255, (B, 4, SIZE, SIZE, 3), dtype=torch.uint8)
    model.eval().reset_context(frames[:, 0], frames, torch.zeros(B, 4, 2))
    model.predict(torch.zeros(B, model.config.num_target_frames, 2), torch.Generator())
    monkeypatch.undo()
    return len(calls)


def test_training_moves_the_student_to_the_guided_velocity_in_one_pass(monkeypatch) -> None:
    source = _model("opensora")
    student = distilled_student(source)
    teacher = frozen_teacher(source)
    assert (student.config.action_guidance, student.config.guidance_distilled) == (1.0, 2.0)
    assert not any(p.requires_grad for p in teacher.model.transformer.parameters())
    assert student.vae is teacher.model.vae  # one frozen autoencoder, not two
    assert student.transformer is not teacher.model.transformer
    batch = _batch(source)
    student.train()
    params = [p for p in student.transformer.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=3e-3)
    losses = []
    for _ in range(40):
        loss = student(batch, torch.Generator().manual_seed(0), teacher)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses
    # a guided step runs the denoiser twice; the student once: 2 sampling steps, 2 and 4 passes
    assert _denoiser_passes(student, monkeypatch) == 2
    assert _denoiser_passes(teacher.model, monkeypatch) == 4


def test_a_teacher_without_guidance_is_refused() -> None:
    with pytest.raises(ConfigError, match="without guidance"):
        frozen_teacher(_model("opensora", action_guidance=1.0))


def test_a_distilled_model_samples_its_own_scale_in_one_pass_and_no_other() -> None:
    assert sampler_guidance(2.0, 2.0) == 1.0  # the stage's guidance: one pass gives it
    assert sampler_guidance(None, 2.0) is None  # the model's own: 1.0, saved so
    assert sampler_guidance(3.0, None) == 3.0  # not distilled: as asked
    with pytest.raises(ConfigError, match="distilled to give guidance 2"):
        sampler_guidance(3.0, 2.0)


@pytest.mark.parametrize("backend", ["opensora", "wan"])
@pytest.mark.parametrize("distilled", [True, False])
def test_every_trainable_parameter_gets_a_gradient(backend, distilled) -> None:
    """DDP needs a gradient for every trainable parameter on every rank: a null action that
    no window draws (a student's one pass, or training without action dropout) is frozen, as
    the trainer does; two ranks stopped on it at the second step before."""
    source = _model(backend)
    model = distilled_student(source) if distilled else copy.deepcopy(source)
    model.config.action_dropout = 0.0
    teacher = frozen_teacher(source) if distilled else None
    freeze_unused_null_action(model.transformer, model.config.action_dropout)
    model.train()
    model(_batch(model), torch.Generator().manual_seed(0), teacher).backward()
    unused = [
        n for n, p in model.transformer.named_parameters() if p.requires_grad and p.grad is None
    ]
    assert unused == []
    assert any("null_action" in n for n, _ in model.transformer.named_parameters())
