"""Training an action-conditioned world model from episodes (`wmrl train-wm`).

Two stages, each checkpointed and resumable:

1. autoencoder (only when training from scratch): the backend's VAE learns to reconstruct
   short clips; then its latents are normalized with statistics measured on the data;
2. denoiser: windows (reference + K context + C target frames, data/windows.py) are encoded
   once and cached (training/latent_cache.py); the transformer learns the flow-matching
   velocity of the target latents (the loss and the noisy-context recipe are the backend's
   `forward`), with an EMA copy.

Validation: open-loop rollouts on held-out episodes (PSNR/SSIM per horizon, next to the
copy-last-frame baseline) with the EMA weights; videos to TensorBoard.

Data parallel (`--num-processes N`, torchrun or `accelerate launch`): every rank draws the same
global batch of `batch_size` windows (a counter-based RNG of seed and step) and trains on its
1/N share; DDP averages the denoiser's gradients, the autoencoder's are averaged by hand (it is
trained through `autoencoder_loss`, not the wrapped forward). The weights, and so the EMA, stay
identical on every rank; only the main process validates and writes. One process or several
train on the GPUs where there are some, else on the CPU.
"""

from __future__ import annotations

import json
import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.windows import build_windows
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.world_model_eval import OpenLoopReport, open_loop_eval
from wmrl_cli.files import atomic_write_text
from wmrl_cli.logging import MetricsLogger, console, progress_task
from wmrl_cli.run_dirs import write_rank_summary
from wmrl_cli.runtime import resolve_precision
from wmrl_cli.trackers import tracked
from wmrl_cli.training.checkpoints import (
    canonical_safetensors,
    latest_checkpoint,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)
from wmrl_cli.training.denoiser_sharding import (
    WholeEma,
    broadcast_from_main,
    full_state,
    shard_denoiser,
)
from wmrl_cli.training.guidance_distillation import student_and_teacher
from wmrl_cli.training.latent_cache import WindowLatents
from wmrl_cli.training.sharding import (
    SHARDED_DIR,
    WholeOptimizerState,
    adopt_staged_shards,
    gathered_units,
    global_value,
    is_sharded_checkpoint,
    load_sharded_state,
    local_tensor,
    remove_staged_shards,
    stage_sharded_state,
)
from wmrl_cli.training.world_model_batches import (
    autoencoder_clips,
    rank_share,
    split_episodes,
)
from wmrl_cli.world_models.action_conditioning import freeze_unused_null_action
from wmrl_cli.world_models.base import GuidanceTeacher
from wmrl_cli.world_models.factory import (
    MODEL_DIR,
    apply_objective,
    build_world_model,
    load_init_world_model,
    load_world_model,
)
from wmrl_cli.world_models.interface import WorldModel

RELIABILITY_FILE = "reliability.json"


def calibrate_latents(model: WorldModel, clips: torch.Tensor) -> None:
    """Normalize the freshly trained autoencoder's latents to zero mean and unit variance."""
    with torch.no_grad():
        if hasattr(model, "set_latent_statistics"):  # Wan: per channel
            raw = model.encode_frames(clips, normalize=False)
            dims = (0, 2, 3, 4)
            model.set_latent_statistics(raw.mean(dims), raw.std(dims).clamp_min(1e-4))
        else:  # OpenSora: one scale and shift, as SDXL's VAE
            model.set_latent_scaling(1.0, None)
            raw = model.encode_frames(clips)
            model.set_latent_scaling(1.0 / max(raw.std().item(), 1e-4), raw.mean().item())


def make_accelerator(cfg: RunConfig) -> Any:
    """The GPU where there is one (several processes: one GPU each, NCCL), else the CPU (gloo
    between processes). Until 2026-11-28 one process trained on the CPU even beside a GPU, so
    co-evolve's refinement of a published world model ran there. Mixed precision stays the
    model's own autocast (`precision`)."""
    import torch

    from wmrl_cli.runtime import fresh_accelerator

    return fresh_accelerator(
        cfg.training.dist_timeout_minutes, cpu=not torch.cuda.is_available(), mixed_precision="no"
    )


def average_gradients(params: list[torch.nn.Parameter], accelerator: Any) -> None:
    """Mean of the gradients over ranks, for a module trained outside the DDP wrapper."""
    if accelerator.num_processes == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    flat = accelerator.reduce(torch.cat([g.reshape(-1) for g in grads]), "mean")
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))


class WorldModelTrainer:
    # What `time_limit_min` is measured on: wall-clock time (a benchmark on a shared machine may
    # count the process's CPU time instead).
    clock = staticmethod(time.time)

    def __init__(self, cfg: RunConfig, run_dir: Path, store: EpisodeStore, action_dim: int):
        self.cfg, self.wm, self.run_dir, self.store = cfg, cfg.world_model, run_dir, store
        train_ids, val_ids = split_episodes(store, cfg)
        chunk = cfg.simulator.chunk_size
        self.train = build_windows(
            store, train_ids, self.wm.context_frames, chunk, self.wm.window_stride
        )
        if len(self.train) == 0:
            raise WmrlError(f"{store.root}: no episode is long enough for a {chunk}-frame window")
        self.val_episodes = [store.load(i) for i in val_ids[: self.wm.val_episodes]]
        self.action_dim = action_dim
        self.logger: MetricsLogger  # opened by run(), which knows the step it resumes from
        self.accelerator: Any = None  # made by run() (several ranks: torchrun's environment)
        self.first_batch: list[int] = []  # this rank's windows in its first denoiser step
        self.sharded = False  # the denoiser sharded over the ranks (denoiser_sharding.py)

    @property
    def main(self) -> bool:
        return self.accelerator.is_main_process

    def _share(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, int]:
        """(this rank's windows of the step's global batch, a seed for its noise): with one
        process, the draws single-process training has always made."""
        acc = self.accelerator
        idx = rng.integers(0, len(self.train), batch_size)
        seed = rng.integers(2**31, size=acc.num_processes)[acc.process_index]
        return rank_share(idx, acc.process_index, acc.num_processes), int(seed)

    def _agreed(self, flag: bool) -> bool:
        """The main process's `flag` on every rank (a time limit read off each rank's clock
        must not stop one rank alone)."""
        if self.accelerator.num_processes == 1:
            return flag
        from accelerate.utils import broadcast

        return bool(broadcast(torch.tensor([float(flag)], device=self.accelerator.device)).item())

    def _open_logger(self, resume_step: int) -> MetricsLogger:
        """metrics.jsonl and TensorBoard truncated back to `resume_step`. The autoencoder's rows
        stay: its steps overlap the denoiser's, and a run resumed from a denoiser checkpoint
        does not train it again (a run that starts over, resume_step 0, drops them too)."""
        return MetricsLogger(
            self.run_dir,
            self.cfg.logging.tensorboard,
            **tracked(self.cfg),
            real_steps=self.store.real_steps(),
            resume_step=resume_step,
            keep_rows=None if resume_step == 0 else _autoencoder_row,
            enabled=self.main,
            log_every=self.cfg.logging.log_every,
            total=self.wm.steps,
        )

    # -- stage 1 ----------------------------------------------------------------------------
    def train_autoencoder(self, model: WorldModel) -> None:
        wm = self.wm
        params = list(model.vae.parameters())
        optimizer = torch.optim.AdamW(params, lr=wm.vae_lr)
        model.vae.train()
        show = self.cfg.logging.progress and self.main
        self.logger.begin_stage("autoencoder", wm.vae_steps)
        with progress_task("autoencoder", wm.vae_steps, show) as advance:
            for step in range(wm.vae_steps):
                rng = np.random.default_rng([self.cfg.simulator.seed, 1, step])
                idx, _ = self._share(rng, wm.vae_batch_size)
                clips = autoencoder_clips(model, self.train, idx, self.cfg.simulator.chunk_size)
                loss = model.autoencoder_loss(clips, motion_weight=wm.vae_motion_weight)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                average_gradients(params, self.accelerator)
                torch.nn.utils.clip_grad_norm_(params, wm.grad_clip)
                optimizer.step()
                if (step + 1) % 50 == 0 or step + 1 == wm.vae_steps:
                    loss = self.accelerator.reduce(loss.detach(), "mean")
                    self.logger.log({"train/wm/autoencoder_loss": loss}, step + 1)
                advance()
        self.logger.begin_stage("world model", wm.steps)
        model.vae.eval()
        rng = np.random.default_rng([self.cfg.simulator.seed, 2])
        idx = rng.integers(0, len(self.train), 32)
        calibrate_latents(
            model, autoencoder_clips(model, self.train, idx, self.cfg.simulator.chunk_size)
        )

    # -- stage 2 ----------------------------------------------------------------------------
    def cache_latents(self, model: WorldModel) -> WindowLatents:
        n = len(self.train)
        # Every rank encodes all windows (in memory): the same latents without a transfer.
        show = self.cfg.logging.progress and self.main
        with progress_task("encode windows", n, show) as advance:
            return WindowLatents.encode(model, self.train, advance)

    def validate(self, model: WorldModel, step: int) -> OpenLoopReport | None:
        if not self.val_episodes:
            return None
        model.eval()
        report = open_loop_eval(
            model,
            self.val_episodes,
            horizon=self.wm.val_horizon,
            seed=self.cfg.simulator.seed,
            alternatives=("other", "random"),
        )
        self.logger.log({f"eval/wm/{k}": v for k, v in report.summary().items()}, step)
        if report.videos is not None:
            self.logger.log_video("eval/wm/open_loop", report.videos, step, fps=10)
        return report

    def train_denoiser(
        self,
        model: WorldModel,
        wrapped: torch.nn.Module,
        latents: WindowLatents,
        start: int,
        optimizer: torch.optim.Optimizer,
        ema: dict[str, torch.Tensor],
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        teacher: GuidanceTeacher | None = None,
    ) -> OpenLoopReport | None:
        wm, acc = self.wm, self.accelerator
        params = [p for p in model.transformer.parameters() if p.requires_grad]
        report = None
        t0 = time.time()
        deadline = None if wm.time_limit_min is None else self.t_run + 60 * wm.time_limit_min
        show = self.cfg.logging.progress and self.main
        with progress_task("world model", wm.steps, show, completed=start) as advance:
            for step in range(start, wm.steps):
                model.transformer.train()
                rng = np.random.default_rng([self.cfg.simulator.seed, 3, step])
                idx, seed = self._share(rng, wm.batch_size)
                if step == start:
                    self.first_batch = idx.tolist()
                batch = {k: v for k, v in self.train.batch(idx).items() if k != "target_frames"}
                batch["latents"] = latents[idx]
                gen = torch.Generator().manual_seed(seed)
                loss = wrapped(batch, generator=gen, teacher=teacher)
                acc.backward(loss)
                # of the whole gradient (sharded: each rank's norm is partial until reduced)
                grad_norm = global_value(acc.clip_grad_norm_(params, wm.grad_clip))
                optimizer.step()
                # freed now rather than before the next backward: validation, checkpoints and
                # the next forward run without them (a 5 B denoiser's are 19 GiB)
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                with torch.no_grad():
                    for name, p in model.transformer.named_parameters():
                        ema[name].lerp_(p.detach(), 1.0 - wm.ema_decay)
                if (step + 1) % 20 == 0 or step + 1 == wm.steps:
                    self.logger.log(
                        {
                            "train/wm/loss": acc.reduce(loss.detach(), "mean"),
                            "train/wm/grad_norm": grad_norm,  # of the averaged gradient
                            "train/wm/lr": scheduler.get_last_lr()[0],
                            "time/elapsed_s": time.time() - t0,
                        },
                        step + 1,
                    )
                out_of_time = deadline is not None and self._agreed(self.clock() > deadline)
                last = step + 1 == wm.steps or out_of_time
                if ((step + 1) % wm.val_every == 0 or last) and (self.main or self.sharded):
                    with swapped_weights(model.transformer, ema), self._gathered(model):
                        if self.main:
                            report = self.validate(model, step + 1)
                if (step + 1) % wm.save_every == 0 or last:
                    acc.wait_for_everyone()
                    self._save_checkpoint(model, optimizer, scheduler, ema, step + 1)
                advance()
                if out_of_time:
                    if self.main:
                        console.print(f"time limit reached after {step + 1} denoiser steps")
                    break
        return report

    def run(self, resume: bool = True, init: str | Path | None = None) -> Path:
        self.t_run = self.clock()  # `time_limit_min` counts the whole run, autoencoder included
        acc = self.accelerator = self.accelerator or make_accelerator(self.cfg)
        autocast_dtype = resolve_precision(self.cfg.precision, acc.device.type)
        checkpoint = latest_checkpoint(self.run_dir) if resume else None
        if self.main:  # shards of a checkpoint a kill left unfinished (tens of GiB at full size)
            remove_staged_shards(self.run_dir)
        start, rng_state = 0, None
        if checkpoint is not None:  # the logger opens once the checkpoint's step is read
            model = load_world_model(checkpoint / "model")
        elif init is not None:
            self.logger = self._open_logger(0)  # an attempt before any checkpoint starts over
            model = self._load_init(init)
        else:
            self.logger = self._open_logger(0)
            model = build_world_model(self.cfg, self.action_dim)
            model.autocast_dtype = autocast_dtype  # the autoencoder trains in it too
            if self.wm.vae_init is not None:
                model.adopt_autoencoder(load_world_model(self.wm.vae_init))
            elif self.wm.vae_steps > 0:
                if acc.device.type != "cpu":  # where the denoiser will train (NCCL averages there)
                    model.onload(acc.device)
                self.train_autoencoder(model)
        # The training objective is the run's, also when starting from another model.
        apply_objective(model.config, self.cfg)
        teacher = None
        if self.wm.distill_guidance:  # the student, made now or resumed; its teacher is --init
            model, teacher = student_and_teacher(
                model, init, resumed=checkpoint is not None, load=self._load_init, cfg=self.cfg
            )
            teacher.model.autocast_dtype = autocast_dtype
            if acc.device.type != "cpu":
                teacher.model.onload(acc.device)
        freeze_unused_null_action(model.transformer, model.config.action_dropout)
        model.autocast_dtype = autocast_dtype
        model.transformer.gradient_checkpointing = self.wm.gradient_checkpointing
        model.vae.requires_grad_(False)
        if acc.device.type != "cpu":  # before the optimizer and the EMA copy are made
            model.onload(acc.device)
        self.sharded = self.wm.sharding == "fsdp" and acc.num_processes > 1
        if self.sharded:
            broadcast_from_main(model)  # what DDP's wrapper does on the replicated path
            shard_denoiser(model.transformer, acc)
        # under fsdp each EMA tensor is a shard, placed as its parameter
        ema = {n: p.detach().clone() for n, p in model.transformer.named_parameters()}
        optimizer = torch.optim.AdamW(
            [p for p in model.transformer.parameters() if p.requires_grad],
            lr=self.wm.lr,
            weight_decay=0.01,
        )
        wm = self.wm
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: lr_factor(s, wm.warmup_steps, wm.steps, wm.lr_schedule)
        )
        if checkpoint is not None:
            state = self._load_checkpoint(checkpoint, model, optimizer, scheduler, ema)
            start, rng_state = state["step"], state["rng"]
            self.logger = self._open_logger(start)
            if self.main:
                console.print(f"resuming world-model training from step {start}")
        latents = self.cache_latents(model)
        if rng_state is not None:  # after encoding: the RNGs as they were after step `start`
            restore_rng(rng_state)
        # One process: the model itself (no wrapper). Several: DDP, its weights broadcast from
        # the main process (the autoencoder's and statistics' too, when their buffers); or the
        # sharded model itself (FSDP's units reduce the gradients).
        if self.sharded:
            wrapped, optimizer = model, acc.prepare_optimizer(optimizer)
        else:
            wrapped, optimizer = acc.prepare(model, optimizer)
        report = None
        if start < self.wm.steps:
            report = self.train_denoiser(
                model, wrapped, latents, start, optimizer, ema, scheduler, teacher
            )
        if acc.num_processes > 1:
            self._write_rank_summary(model, ema)
        out = self.run_dir / MODEL_DIR
        acc.wait_for_everyone()
        self._save_final(model, ema, report, resumed=checkpoint is not None, start=start)
        acc.wait_for_everyone()  # the other ranks return once the model is there
        self.logger.close()
        return out

    def _load_init(self, init: str | Path) -> WorldModel:
        """The world model the run starts from (`--init`), for the episodes' frames."""
        height, width = self.train.episodes[0].frames.shape[1:3]
        model = load_init_world_model(init, height, width, self.cfg)
        if model.action_dim != self.action_dim:
            raise WmrlError(
                f"{init} takes {model.action_dim}-dimensional actions, the episodes in "
                f"{self.store.root} have {self.action_dim}"
            )
        return model

    # -- sharded or replicated ----------------------------------------------------------------
    def _gathered(self, model: WorldModel) -> Any:
        """The whole denoiser on every rank inside (sharded; nothing to do otherwise)."""
        return gathered_units(model.transformer) if self.sharded else nullcontext()

    def _model_state(self, model: WorldModel) -> dict[str, torch.Tensor] | None:
        """What the main process saves: the gathered state dict (sharded; collective), else
        None (the model's own)."""
        return full_state(model) if self.sharded else None

    def _save_checkpoint(
        self,
        model: WorldModel,
        optimizer: Any,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        ema: dict[str, torch.Tensor],
        step: int,
    ) -> None:
        """The step's checkpoint; every rank calls it. Sharded: the optimizer's and EMA's
        shards written by every rank, moved into the checkpoint with the gathered model."""
        meta, keep = {"stage": "denoiser"}, self.wm.keep_checkpoints
        if not self.sharded:
            if self.main:
                stateful = [optimizer, scheduler, TensorState(ema)]
                save_checkpoint(self.run_dir, step, model.save_pretrained, stateful, meta, keep)
            return
        acc, transformer = self.accelerator, model.transformer
        shards = stage_sharded_state(acc, transformer, optimizer, self.run_dir, step, {"ema": ema})
        state = full_state(model)
        if not self.main:
            return

        def save_model(directory: Path) -> None:
            model.save_pretrained(directory, state=state)
            adopt_staged_shards(shards, directory)

        save_checkpoint(self.run_dir, step, save_model, [scheduler], meta, keep)

    def _load_checkpoint(
        self,
        checkpoint: Path,
        model: WorldModel,
        optimizer: Any,
        scheduler: torch.optim.lr_scheduler.LRScheduler,
        ema: dict[str, torch.Tensor],
    ) -> dict[str, Any]:
        """`load_checkpoint`'s result, the optimizer, scheduler and EMA restored as
        `_save_checkpoint` saved them, whether they were saved sharded or replicated and are
        resumed so or otherwise (a co-evolve stage rerun with another `--num-processes`)."""
        if is_sharded_checkpoint(checkpoint):  # read whole on one rank, resharded on several
            state = load_checkpoint(checkpoint, [scheduler], restore_rng_state=False)
            shards = checkpoint / "training_state" / SHARDED_DIR
            load_sharded_state(model.transformer, optimizer, shards, {"ema": ema})
            return state
        if self.sharded:  # whole states, each rank keeping its shards
            stateful = [WholeOptimizerState(model.transformer, optimizer), WholeEma(ema)]
        else:
            stateful = [optimizer, TensorState(ema)]
        stateful.insert(1, scheduler)  # as saved: optimizer, scheduler, EMA
        return load_checkpoint(checkpoint, stateful, restore_rng_state=False)

    def _save_final(
        self,
        model: WorldModel,
        ema: dict[str, torch.Tensor],
        report: OpenLoopReport | None,
        resumed: bool,
        start: int,
    ) -> None:
        """The EMA model, validated, into run_dir/model on the main process; every rank calls
        it (sharded, every rank gathers)."""
        if not (self.main or self.sharded):
            return
        with swapped_weights(model.transformer, ema):
            if start >= self.wm.steps:  # decided alike on every rank (only the main has a report)
                # Nothing left to train after a resume (killed after the last checkpoint): the
                # validation of that step is in metrics.jsonl already; computed again unlogged.
                with self.logger.paused() if resumed else nullcontext(), self._gathered(model):
                    report = self.validate(model, start) if self.main else None
            state = self._model_state(model)
            if not self.main:
                return
            out = model.save_pretrained(self.run_dir / MODEL_DIR, state=state)
        canonical_safetensors(out)  # the same weights, the same bytes
        if report is not None:
            atomic_write_text(out / RELIABILITY_FILE, json.dumps(report.to_dict(), indent=1))

    def _write_rank_summary(self, model: WorldModel, ema: dict[str, torch.Tensor]) -> None:
        """Per rank: a digest of its world model (weights, buffers and EMA) and the windows of
        its first step, for checking data parallelism (ranks/rank_N.json)."""
        # sharded: this rank's shards (the weights and EMA it holds), which differ between ranks
        tensors = {**model.state_dict(), **{f"ema.{k}": v for k, v in ema.items()}}
        tensors = {k: local_tensor(v) for k, v in tensors.items()}
        rank = self.accelerator.process_index
        write_rank_summary(self.run_dir, rank, tensors, windows=self.first_batch)


def _autoencoder_row(row: dict[str, Any]) -> bool:
    return "train/wm/autoencoder_loss" in row


def lr_factor(step: int, warmup: int, total: int, schedule: str) -> float:
    """The lr multiplier after `step` optimizer steps: a linear warmup over `warmup` steps, then
    1 (`constant`) or a cosine from 1 at the warmup's end to 0 at `total` (`cosine`)."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant" or total <= warmup:
        return 1.0
    progress = min(1.0, (step - warmup) / (total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


class TensorState:
    """A dict of tensors (the EMA weights) with the state_dict protocol of optimizers."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.tensors = tensors

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.tensors

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name, value in state.items():
            self.tensors[name].copy_(value)


class swapped_weights:
    """Temporarily load `weights` (e.g. the EMA) into `module`, restoring the originals after;
    sharded, each rank swaps its shards."""

    def __init__(self, module: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
        self.module, self.weights = module, weights

    def _pairs(self) -> list[tuple[str, torch.Tensor]]:
        return [(n, local_tensor(p.detach())) for n, p in self.module.named_parameters()]

    def __enter__(self) -> None:
        # the trained weights wait in CPU memory: on a GPU a third copy of a 5 B denoiser
        # (weights, EMA, saved) would not fit beside its gradients and AdamW moments
        self.saved = {n: p.to("cpu", copy=True) for n, p in self._pairs()}
        with torch.no_grad():
            for name, p in self._pairs():
                p.copy_(local_tensor(self.weights[name]))

    def __exit__(self, *exc: object) -> None:
        with torch.no_grad():
            for name, p in self._pairs():
                p.copy_(self.saved[name])
