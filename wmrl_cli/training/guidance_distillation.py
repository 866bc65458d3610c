"""Action guidance distilled into one pass (`train-wm --init TEACHER --set
world_model.distill_guidance=true`): the checks before a run starts, the frozen teacher and the
student's config. The loss is the world model's own (base.FlowWorldModel.forward with a
`GuidanceTeacher`): on the training windows, noised as in training, the student's conditioned
pass learns the teacher's v_null + w (v_actions - v_null), so that it samples guided at w with
half the denoiser passes (Meng et al., "On Distillation of Guided Diffusion Models", CVPR 2023,
the guidance stage, at one fixed w)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from wmrl_cli.config import RunConfig
from wmrl_cli.errors import ConfigError
from wmrl_cli.world_models.base import FlowWorldModel, GuidanceTeacher
from wmrl_cli.world_models.factory import apply_objective


def check_distillation(cfg: RunConfig, init: object | None, num_processes: int) -> None:
    """Before anything runs: distillation needs a teacher (--init), and keeps a whole copy of
    its denoiser beside the student on every rank, so the denoiser is not sharded."""
    wm = cfg.world_model
    if not wm.distill_guidance:
        return
    if init is None:
        raise ConfigError(
            "world_model.distill_guidance needs --init: the guided world model to distil"
        )
    if wm.sharding == "fsdp" and num_processes > 1:
        raise ConfigError(
            "world_model.distill_guidance keeps a whole teacher on each rank: use "
            "world_model.sharding=none (or one process)"
        )


def student_and_teacher(
    model: FlowWorldModel,
    init: str | Path | None,
    resumed: bool,
    load: Callable[[str | Path], FlowWorldModel],
    cfg: RunConfig,
) -> tuple[FlowWorldModel, GuidanceTeacher]:
    """(the student, its frozen teacher) of a distillation run: `model` is the run's model as
    loaded, --init's (the teacher, copied into the student) or, `resumed`, the student's
    checkpoint, whose teacher is loaded from --init again (`load`) with the run's objective."""
    if init is None:  # the command checks first (`check_distillation`)
        raise ConfigError("world_model.distill_guidance needs --init: the guided world model")
    if not resumed:  # the student copied from the teacher before it is frozen
        source, model = model, distilled_student(model)
        return model, frozen_teacher(source)
    source = load(init)
    apply_objective(source.config, cfg)
    source.vae = model.vae  # the same frozen autoencoder: one copy (`distilled_student`)
    teacher = frozen_teacher(source)
    mark_student(model, teacher.scale)  # the checkpoint's config took the run's objective
    return model, teacher


def frozen_teacher(model: FlowWorldModel) -> GuidanceTeacher:
    """`model` (its config's guidance as the run set it: `factory.apply_objective`) frozen, in
    eval mode, as the teacher; a ConfigError where it has no guidance to distil."""
    scale = model.config.action_guidance
    if scale == 1.0:
        raise ConfigError(
            "world_model.distill_guidance: the teacher samples without guidance "
            "(action_guidance 1); set world_model.action_guidance to the scale to distil"
        )
    model.eval().requires_grad_(False)
    return GuidanceTeacher(model, scale)


def distilled_student(teacher_source: FlowWorldModel) -> FlowWorldModel:
    """The student: a copy of the teacher's model (before it is frozen), marked as distilled at
    the teacher's scale (`mark_student`). The autoencoder is shared, not copied: it stays frozen
    in training, and the teacher only runs its denoiser."""
    shared = {id(teacher_source.vae): teacher_source.vae}
    student = copy.deepcopy(teacher_source, memo=shared)
    mark_student(student, teacher_source.config.action_guidance)
    return student


def mark_student(student: FlowWorldModel, scale: float) -> None:
    """The student's config: one pass (action_guidance 1) that gives guidance `scale`
    (guidance_distilled), and no action dropout (only the conditioned pass is trained)."""
    student.config.action_guidance = 1.0
    student.config.guidance_distilled = scale
    student.config.action_dropout = 0.0
