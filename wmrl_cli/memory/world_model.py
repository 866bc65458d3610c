"""The per-GPU memory of a world model's fine-tuning (`train-wm`, co-evolve's world-model
stages), planned before anything loads and checked against the GPU's memory (or
`training.memory_budget_gb`): over budget, one line (exit 2) naming the changes that fit.

A training step holds the frozen parts (the autoencoder, float32), the denoiser's float32
weights S, its gradients S, AdamW's two moments 2S and the EMA copy S, each 1/N of it per rank
when `world_model.sharding: fsdp` shards it over N ranks; replicated over several ranks, DDP
adds its gradient buckets (S). Three peaks:

    forward and backward: frozen + 5S/N (+ S, DDP) + activations of the rank's windows
    AdamW's step:         frozen + 6S/N (+ S, DDP): its multi-tensor step's temporary is one
                          moment's size
    validation, sharded:  frozen + 4S/N + 1.5S + episodes: the whole EMA denoiser gathered on
                          every rank beside its shards, with autocast's bf16 copy (the
                          gradients freed; replicated, the weights are whole already and
                          validation holds less than the step)

The activations per window are counted at full size on fake tensors by
benchmarks/wm_train_memory.py (the forward-and-backward peak over the weights, gradients,
moments and EMA, at one rank; docs/benchmarks.md): what the forward and backward hold beyond the
gradients, whose filling overlaps the activations' freeing. They grow with the windows, their
latent frames and the frame's pixels, less what the gradients hide, which is the same whatever
the windows and the frame size (counted for 4 to 16 context frames, chunks of 4 to 16, 128 to
512 pixels square and 4 to 16 windows).
Sharded, the gradients are 1/N and no longer hide the activations: the backward's peak holds
them whole, the state but the gradients still to fill (4S/N), and FSDP's working set (the
gathered blocks and autocast's bf16 copies of their weights, about S/2), counted on rank 0 of
fake process groups of 2 to 16 ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from wmrl_cli.errors import ConfigError
from wmrl_cli.memory.plan import window_latent_frames

GIB = 2**30


@dataclass(frozen=True)
class StepActivations:
    """GiB a training step holds beyond the gradients: activations that grow with the rank's
    windows, their latent frames and the frame's pixels (`per_latent_frame`: one window's, at
    256 x 256), less what the gradients' filling hides of their freeing (`hidden`: the
    gradients', so one step's, whatever the windows and the frame size); never below zero."""

    per_latent_frame: float
    hidden: float

    def grown(self, windows: int, latent_frames: int, pixel_scale: float = 1.0) -> float:
        """The activations themselves; `pixel_scale`: the frame's pixels over 256 x 256's."""
        return self.per_latent_frame * latent_frames * pixel_scale * windows

    def at(self, windows: int, latent_frames: int, pixel_scale: float = 1.0) -> float:
        return max(0.0, self.grown(windows, latent_frames, pixel_scale) - self.hidden)


# By (backend, gradient checkpointing), bf16 autocast: benchmarks/wm_train_memory.py at full size,
# 4 windows, --frames 4,4 4,8 8,4 8,8 4,16 12,8 16,8, 2026-11-29 (forward-and-backward peak
# minus weights, gradients, moments and EMA: a least-squares line over the latent frames, within
# 2% of every count above 0.01 GiB; its offset over the 4 windows is `hidden`); --image 128 and
# 512 and --batch 8 and 16 check the pixels' and the windows' scaling (docs/benchmarks.md). The
# seeds' presets: 4 context frames and chunks of 8 (Wan 4 latent frames, OpenSora 12) at
# 256 x 256.
ACTIVATIONS_256 = {
    ("wan", True): StepActivations(0.0256, 0.382),
    ("wan", False): StepActivations(0.6605, 9.312),
    ("opensora", True): StepActivations(0.0718, 1.688),
    ("opensora", False): StepActivations(0.9946, 1.692),
}
# Sharded (FSDP2 over N ranks), the backward's peak holds the activations whole (the rank's
# gradients are 1/N: nothing hides them), 4/N of the state, and what FSDP works in: the blocks
# gathered and autocast's bf16 copies of their weights, a fraction of the float32 denoiser
# weights, the same from 2 to 16 ranks: wm_train_memory.py --ranks 2 4 8 16 on rank 0 of fake
# process groups, 2026-11-29 (docs/benchmarks.md).
SHARDED_WORKING = {"wan": 0.590, "opensora": 0.550}
# Without autocast (`precision: fp32`) the step holds float32 activations and no bf16 copies of
# the weights: wm_train_memory.py --precision fp32 at full size, 4+8 windows at 256 x 256, 4 and
# 16 windows, 2026-11-29 (OpenSora without checkpointing 85.2 and 299.3 GiB where autocast holds
# 63.3 and 251; the line through both counts). Wan's 4 windows hide all their activations, so
# its `hidden` is autocast's, its line through the 16 windows' count (133.8 GiB; 98.2
# checkpointed).
FLOAT32_ACTIVATIONS_256 = {
    ("wan", True): StepActivations(0.0372, 0.382),
    ("wan", False): StepActivations(0.733, 9.312),
    ("opensora", True): StepActivations(0.0896, 2.80),
    ("opensora", False): StepActivations(1.487, 3.40),
}
# Sharded validation (an open-loop rollout of up to 8 episodes at once, under no_grad) gathers
# the whole denoiser beside the rank's shards, autocast keeps a bf16 copy of every gathered
# weight for the call (half the float32 weights), and each episode adds GiB at 256 x 256: rank 0
# of 2 and 8 fake ranks, one predicted chunk of 1 and 8 episodes, 2026-11-29 (docs/benchmarks.md).
VALIDATION_PER_EPISODE = {"wan": 0.05, "opensora": 0.55}
VALIDATION_BATCH = 8  # evaluation/world_model_eval.py open_loop_eval's batch_size
SHARD_COUNTS = (2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class TrainingSettings:
    """What a world model's training step holds depends on: the backend, frame size, windows
    per step (all ranks), ranks, sharding, gradient checkpointing and the window's frames."""

    backend: str
    height: int
    width: int
    batch: int
    ranks: int = 1
    sharded: bool = False  # world_model.sharding fsdp over the ranks
    checkpointing: bool = False
    context_frames: int = 4
    chunk: int = 8  # frames predicted per window (simulator.chunk_size)
    val_episodes: int = VALIDATION_BATCH  # world_model.val_episodes
    autocast: bool = True  # bf16 autocast (`precision` auto on a GPU, bf16); False: float32


@dataclass(frozen=True)
class TrainingPlan:
    """GiB per GPU of one training step, by part."""

    settings: TrainingSettings
    frozen: float
    state: float  # weights, gradients, moments, EMA (this rank's share; DDP's buckets)
    activations: float  # this rank's windows
    step_temporary: float  # AdamW's multi-tensor step
    validation: float  # sharded: the whole denoiser gathered, in place of this rank's gradients

    @property
    def peak(self) -> float:
        step = self.frozen + self.state + max(self.activations, self.step_temporary)
        return max(step, self.frozen + self.state + self.validation)

    def line(self) -> str:
        s = self.settings
        how = f"{s.ranks} rank(s)" + (", sharded" if s.sharded and s.ranks > 1 else "")
        gathered = ""
        if self.validation:
            gathered = f", validation's gathered denoiser and its bf16 copy {self.validation:.1f}"
        return (
            f"world-model training memory plan: {self.peak:.1f} GiB per GPU on {how} (frozen "
            f"{self.frozen:.1f}, weights + gradients + moments + EMA {self.state:.1f}, "
            f"activations {self.activations:.1f}, AdamW step {self.step_temporary:.1f}"
            f"{gathered})"
        )


def plan_training(denoiser_params: int, frozen_params: int, s: TrainingSettings) -> TrainingPlan:
    """The plan of `s` for a world model of `denoiser_params` trained and `frozen_params`
    frozen parameters (float32)."""
    weights = 4 * denoiser_params
    shards = s.ranks if s.sharded else 1
    state = 5 * weights / shards + (weights if s.ranks > 1 and not s.sharded else 0)
    windows = -(-s.batch // s.ranks)  # this rank's share
    pixels = s.height * s.width / (256 * 256)
    latent_frames = sum(window_latent_frames(s.backend, s.context_frames, s.chunk))
    laws = ACTIVATIONS_256 if s.autocast else FLOAT32_ACTIVATIONS_256
    law = laws[(s.backend, s.checkpointing)]
    activations, validation = law.at(windows, latent_frames, pixels) * GIB, 0.0
    if shards > 1:
        # the state's 1/N of gradients still to fill counts as FSDP's working set
        fsdp = SHARDED_WORKING[s.backend] * weights - weights / shards
        activations = law.grown(windows, latent_frames, pixels) * GIB + fsdp
        # validation: the rank's gradients freed, the whole denoiser gathered beside its shard
        # with its bf16 copy, and the episodes' working set
        episodes = min(s.val_episodes, VALIDATION_BATCH)
        rollout = VALIDATION_PER_EPISODE[s.backend] * episodes * pixels * GIB
        copy = 0.5 * weights if s.autocast else 0.0  # autocast's bf16 copy of the gathered
        validation = weights + copy - weights / shards + rollout
    return TrainingPlan(
        settings=s,
        frozen=4 * frozen_params / GIB,
        state=state / GIB,
        activations=activations / GIB,
        step_temporary=weights / shards / GIB,
        validation=validation / GIB,
    )


def remedies(s: TrainingSettings) -> list[tuple[str, TrainingSettings]]:
    """The single changes worth trying, in the order they are suggested: checkpointing,
    sharding over the ranks there are, more sharded ranks (the batch rounded up to a multiple of
    them where it does not split), then more sharded ranks with checkpointing."""
    out = []
    if not s.checkpointing:
        checkpointed = replace(s, checkpointing=True)
        out.append(("--set world_model.gradient_checkpointing=true", checkpointed))
    if s.ranks > 1 and not s.sharded:
        out.append(("--set world_model.sharding=fsdp", replace(s, sharded=True)))
    for checkpointing in sorted({s.checkpointing, True}):
        for n in SHARD_COUNTS:
            if n <= s.ranks:
                continue
            batch = -(-s.batch // n) * n
            option = f"--set world_model.sharding=fsdp --num-processes {n}"
            if batch != s.batch:
                option += f" --set world_model.batch_size={batch}"
            if checkpointing and not s.checkpointing:
                option += " --set world_model.gradient_checkpointing=true"
            more = replace(s, ranks=n, sharded=True, batch=batch, checkpointing=checkpointing)
            out.append((option, more))
    return out


def check_training_memory(
    denoiser_params: int,
    frozen_params: int,
    s: TrainingSettings,
    budget: float | None,
    where: str,
) -> TrainingPlan:
    """The plan; a ConfigError (exit 2) naming the changes that fit where it exceeds `budget`
    GiB (None: nothing to check, on a CPU)."""
    plan = plan_training(denoiser_params, frozen_params, s)
    if budget is None or plan.peak <= budget:
        return plan
    head = (
        f"the world model's training needs {plan.peak:.1f} GiB per GPU, more than the "
        f"{budget:.1f} GiB of {where}"
    )
    fits, fewest = [], 10**9  # the fewest sharded ranks that fit so far
    for option, settings in remedies(s):
        if plan_training(denoiser_params, frozen_params, settings).peak > budget:
            continue
        if "--num-processes" in option:
            # the fewest ranks that fit without checkpointing; with it, only where fewer still
            if settings.ranks >= fewest:
                continue
            fewest = settings.ranks
        fits.append(option)
    if fits:
        raise ConfigError(f"{head}; each of these fits: " + "; ".join(fits))
    raise ConfigError(
        f"{head}, even sharded over {SHARD_COUNTS[-1]} ranks with gradient checkpointing: a GPU "
        "with more memory"
    )


# -- from a run's config --------------------------------------------------------------------------


def check_world_model_training(
    cfg,
    init: Path | None,
    frames: tuple[int, int],
    ranks: int,
    action_dim: int = 7,
    device: str | None = None,
) -> TrainingPlan | None:
    """The plan of `cfg.world_model`'s training from `init` (a wmrl or published world model;
    None: a new one of `cfg.world_model.size` for `action_dim` actions) on the episodes'
    `frames` (height, width) over `ranks`, checked against the GPU's memory or
    `training.memory_budget_gb`; None where there is nothing to check against (a CPU without a
    budget). One line (exit 2) where it does not fit."""
    import torch

    from wmrl_cli.memory.budget import device_budget
    from wmrl_cli.memory.param_counts import (
        count,
        world_model_geometry,
        world_model_param_split,
    )

    if device is None:
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    budget, where = device_budget(cfg, device)
    if budget is None:
        return None
    wm = cfg.world_model
    backend, height, width = wm.backend, *frames
    if init is not None:
        backend, height, width = world_model_geometry(init, frames)
        denoiser, frozen = world_model_param_split(init, backend)
    else:
        from wmrl_cli.world_models.factory import build_world_model

        with torch.device("meta"):
            model = build_world_model(cfg, action_dim)
        denoiser = count(model.transformer)
        frozen = count(model) - denoiser
    if wm.distill_guidance:  # the teacher's denoiser, frozen beside the student (float32);
        frozen += denoiser  # the autoencoder is shared (training/guidance_distillation.py)
    settings = TrainingSettings(
        backend=backend,
        height=height,
        width=width,
        batch=wm.batch_size,
        ranks=ranks,
        sharded=wm.sharding == "fsdp",
        checkpointing=wm.gradient_checkpointing,
        context_frames=wm.context_frames,
        chunk=cfg.simulator.chunk_size,
        val_episodes=wm.val_episodes,
        # the precision a GPU runs (a CPU checks only with a budget: it plans for a GPU)
        autocast=cfg.precision != "fp32",
    )
    return check_training_memory(denoiser, frozen, settings, budget, where)
