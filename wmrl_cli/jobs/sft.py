"""Behaviour cloning of an OpenVLA-OFT policy from demonstrations (`wmrl sft`).

Samples are (frame t, instruction, the C actions from t on: `data/bc.py`). Batches are drawn
by a counter-based RNG (seed, step, rank), so a resumed run sees exactly the batches an
uninterrupted one would.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.config import RunConfig
from wmrl_cli.data.bc import build_bc_dataset
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.logging import MetricsLogger, console, progress_task
from wmrl_cli.memory.budget import sft_memory_plan, sft_policy_config
from wmrl_cli.runtime import fresh_accelerator, seed_stage
from wmrl_cli.trackers import tracked
from wmrl_cli.training.checkpoints import latest_checkpoint, restore_rng, save_checkpoint
from wmrl_cli.training.sharding import PolicySharding

POLICY_DIR = "policy"


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator) -> torch.Tensor:
    """DrQ-style augmentation: replicate-pad by `pad` pixels, crop back at a random offset."""
    if pad == 0:
        return images
    b, h, w, _ = images.shape
    padded = torch.nn.functional.pad(
        images.permute(0, 3, 1, 2).float(), (pad,) * 4, mode="replicate"
    )
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator)
    out = torch.stack([padded[i, :, y : y + h, x : x + w] for i, (y, x) in enumerate(offsets)])
    return out.permute(0, 2, 3, 1).round().to(torch.uint8)


def build_policy_model(cfg: RunConfig, instructions: list[str], action_dim: int, stats: dict):
    from wmrl_cli.policies.openvla_oft import OpenVLAOFT
    from wmrl_cli.policies.text_tokenizer import build_word_tokenizer

    s = cfg.sft
    if s.size == "full":
        raise WmrlError(
            "sft.size=full is reached through published checkpoints "
            "(wmrl download openvla-oft-...), not trained from scratch"
        )
    tokenizer = build_word_tokenizer(instructions)
    model_cfg = sft_policy_config(cfg, len(tokenizer), action_dim)
    return OpenVLAOFT(model_cfg, tokenizer=tokenizer, dataset_statistics=stats)


def collect_demos(cfg: RunConfig, run_dir: Path) -> EpisodeStore:
    """Scripted-expert demonstrations, cached in run_dir/demos (collected into a temp dir
    and renamed, so an interrupted collection is redone, never half-used)."""
    import shutil

    from wmrl_cli.jobs.collect_rollouts import collect_rollouts

    final = run_dir / "demos"
    if (final / "index.json").is_file():
        return EpisodeStore.open(final)
    tmp = run_dir / ".demos-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    demo_cfg = cfg.model_copy(deep=True)
    demo_cfg.policy.name = "expert"
    demo_cfg.policy.noise_std = cfg.sft.demo_noise_std
    demo_cfg.simulator.seed = cfg.simulator.seed + cfg.sft.demo_seed_offset
    demo_cfg.rollout.episodes_per_task = cfg.sft.demos_per_task
    demo_cfg.rollout.kir.enabled = False
    demo_cfg.rollout.perturbation.kind = "none"  # demonstrations to clone: the expert's own
    demo_cfg.rollout.perturbation.random_chunk_prob = 0.0
    demo_cfg.output_dir = tmp
    collect_rollouts(demo_cfg)
    tmp.rename(final)
    return EpisodeStore.open(final)


def train_bc(cfg: RunConfig, run_dir: Path, store: EpisodeStore, resume: bool = True) -> Path:
    """Clone the demonstrations in `store`; returns the saved policy directory."""

    from wmrl_cli.policies.checkpoint import from_pretrained
    from wmrl_cli.policies.normalization import compute_statistics

    s = cfg.sft
    accelerator = fresh_accelerator(
        cfg.training.dist_timeout_minutes,
        cpu=not torch.cuda.is_available(),
        mixed_precision="bf16" if cfg.training.bf16 else "no",
    )
    data = build_bc_dataset(store, cfg.simulator.chunk_size)
    # the source dataset's statistics where the store carries them (a LeRobot dataset's)
    own = store.action_statistics()
    stats = {
        cfg.simulator.suite: own
        or compute_statistics(data.chunks[:, 0], num_trajectories=len(store))
    }
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if checkpoint is not None:
        model = from_pretrained(checkpoint / "model")
    else:
        # Seeded here, not by the caller: demonstrations collected now or found in the run's
        # cache leave the RNGs in different states, and the weights must not depend on it.
        seed_stage(cfg.simulator.seed, "sft")
        model = build_policy_model(cfg, data.instructions, data.chunks.shape[-1], stats)
    world, device = accelerator.num_processes, str(accelerator.device)
    memory = sft_memory_plan(cfg, model.config, world, device)  # exit 2 where it cannot fit
    sharding = PolicySharding(cfg.training, accelerator)
    model = sharding.prepare_model(model)  # dtype, checkpointing, sharding (training.*)
    optimizer = sharding.optimizer(
        [{"params": list(model.parameters())}], lr=s.lr, weight_decay=s.weight_decay
    )

    def schedule(step: int) -> float:  # linear warm-up, then cosine to 10%
        if step < s.warmup_steps:
            return (step + 1) / s.warmup_steps
        progress = (step - s.warmup_steps) / max(1, s.steps - s.warmup_steps)
        return float(0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(progress, 1.0))))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    start, rng_state = 0, None
    if checkpoint is not None:
        state = sharding.load_checkpoint(
            checkpoint, model, optimizer, (scheduler,), restore_rng_state=False
        )
        start, rng_state = state["step"], state["rng"]
        if accelerator.is_main_process:  # once, whatever the number of ranks
            console.print(f"resuming behaviour cloning from step {start} ({checkpoint.name})")
    if accelerator.is_main_process:  # printed once a resume's state has loaded: a damaged one
        memory.print()  # stops the command with its one line alone
    wrapped, optimizer = sharding.prepare(model, optimizer)
    unwrapped = sharding.unwrap(wrapped)
    rank = accelerator.process_index
    per_rank = max(1, s.batch_size // world)
    instructions = np.array(data.instructions, dtype=object)

    logger = MetricsLogger(
        run_dir,
        cfg.logging.tensorboard,
        **tracked(cfg),
        enabled=accelerator.is_main_process,
        real_steps=store.real_steps(),
        resume_step=start,
        log_every=cfg.logging.log_every,
        total=s.steps,
    )
    wrapped.train()
    if rng_state is not None:  # the RNGs as they were after step `start`, for dropout etc.
        restore_rng(rng_state)
    t0 = time.time()
    with progress_task(
        "behaviour cloning",
        s.steps,
        cfg.logging.progress and accelerator.is_main_process,
        completed=start,
    ) as advance:
        for step in range(start, s.steps):
            rng = np.random.default_rng([cfg.simulator.seed, step, rank])
            idx = rng.integers(0, len(data), per_rank)
            gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
            images = random_shift(torch.from_numpy(data.frames[idx]), s.augment_shift, gen)
            prompts = list(instructions[data.prompt_ids[idx]])
            out = unwrapped.bc_loss(
                images.to(accelerator.device),
                prompts,
                torch.from_numpy(data.chunks[idx]),
                model=wrapped,
            )
            accelerator.backward(out.loss)
            grad_norm = sharding.clip_gradients(wrapped.parameters(), s.grad_clip)  # global
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            if (step + 1) % s.log_every == 0 or step + 1 == s.steps:
                metrics = {
                    "train/sft/loss": out.loss.detach(),
                    "train/sft/token_accuracy": out.token_accuracy.detach(),
                    "train/sft/l1": out.l1.detach(),
                    "train/sft/grad_norm": grad_norm,  # the whole gradient's, on every rank
                }
                reduced = {
                    k: accelerator.reduce(
                        torch.as_tensor(v, dtype=torch.float32, device=accelerator.device), "mean"
                    ).item()
                    for k, v in metrics.items()
                }
                reduced["train/sft/lr"] = scheduler.get_last_lr()[0]
                reduced["time/elapsed_s"] = time.time() - t0
                logger.log(reduced, step + 1)
            if (step + 1) % s.save_every == 0 or step + 1 == s.steps:
                accelerator.wait_for_everyone()
                save_model, stateful = sharding.checkpoint_parts(
                    wrapped, optimizer, run_dir, step + 1, (scheduler,)
                )
                if accelerator.is_main_process:
                    save_checkpoint(
                        run_dir, step + 1, save_model, stateful, keep=s.keep_checkpoints
                    )
            advance()
    logger.close()
    out_dir = run_dir / POLICY_DIR
    accelerator.wait_for_everyone()
    sharding.save_policy(wrapped, out_dir)  # consolidated, by the main process
    return out_dir
