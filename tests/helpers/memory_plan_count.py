"""The memory plan against the bytes the code allocates, at full size, on a CPU: what
tests/memory/test_memory_plan_count.py checks (`make memory-plan-check` prints the table of
docs/benchmarks.md, "The memory plan against the code's own allocations").

Every operation of the real code runs on fake tensors (benchmarks/fake_count.py: the same
modules, bf16 autocast, activation checkpointing, LoRA, AdamW), its storages counted. Two
sections, each beside `memory/plan.py`'s figures:

1. the 7.5 B policy's GRPO micro-batch (32 sequences of 256x256 frames, the seeds' micro batch)
   with wmrl's own casting, checkpointing and sharding (`PolicySharding.prepare_model`) and an
   AdamW step built by `PolicySharding.optimizer`, twice (the second micro-batch beside the
   moments, as every later one): for LoRA rank 32 on float32 weights, full fine-tuning on
   float32 weights, full fine-tuning on bf16 weights (RLinf's), full fine-tuning with bf16
   moments (wmrl's per-tensor AdamW), LoRA without checkpointing on 4 sequences (the plan's
   per-block formula), and full fine-tuning sharded by FSDP as rank 0 of 8 (a process group of
   torch's fake backend: collectives move nothing, shards and gathers keep their sizes);
2. imagination: the Wan2.2-5B and OpenSora configs at 256x256 in bf16, one chunk (reset and
   predict) at several env counts, all envs through the VAE at once and `world_model.vae_batch`
   at a time: what the world model holds beyond its weights.

What the count leaves to the GPU (`benchmarks/gpu_fullsize.py`): the CUDA caching allocator's
rounding and fragmentation, library workspaces (cuBLAS, attention), the CUDA context. Two
stand-ins: CPU autocast's op lists for CUDA's (linear, matmul and convolution run in bf16 on
both), and AdamW's multi-tensor (`foreach`) step, torch's default for CUDA parameters, asked for
explicitly since the CPU's default is the per-tensor one. Attention is SDPA's fused kernel on
both devices: no attention matrix is kept. `size="tiny"` runs the same code on the tiny
configs, and `Counted(real=True)` on real CPU tensors instead of fake ones.
"""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from tests.helpers import ROOT

# the benchmarks' builders (gpu_fullsize.py) and counting tools (fake_count.py): scripts of
# benchmarks/, not a package
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(1, str(ROOT / "benchmarks"))
import gpu_fullsize as fullsize  # noqa: E402
from fake_count import (  # noqa: E402
    CPU,
    Counted,
    StorageTracker,
    fake_ranks,
    gib,
    real_sampling_schedule,
)

# -- 1. the policy ----------------------------------------------------------------------------

# name: (config overrides, sequences (None: the size's micro batch), ranks)
POLICY_VARIANTS = {
    "LoRA rank 32, float32 weights": ({"lora_rank": 32}, None, 1),
    "full fine-tuning, float32 weights": ({}, None, 1),
    "full fine-tuning, bf16 weights": ({"param_dtype": "bf16"}, None, 1),
    "full fine-tuning, float32 weights, bf16 moments": ({"optimizer_dtype": "bf16"}, None, 1),
    "LoRA rank 32, no checkpointing": ({"lora_rank": 32, "activation_checkpointing": False}, 4, 1),
    "full fine-tuning, float32 weights, FSDP over 8 ranks": ({}, None, 8),
}


ROLLOUT_ENVS = {"full": 64, "tiny": 8}  # the presets' algorithm.num_envs, over the ranks


def policy_plan(cfg, config, sequences: int, ranks: int = 1, envs: int = 0):
    """The plan of a micro-batch of `sequences` and a rollout of `envs` on one of `ranks` GPUs,
    for `cfg.training`'s settings."""
    from wmrl_cli.memory.budget import training_settings
    from wmrl_cli.memory.param_counts import policy_size
    from wmrl_cli.memory.plan import PlanSizes, plan_memory

    settings = training_settings(cfg, ranks, sequences, envs=envs)
    return plan_memory(PlanSizes(policy_size(config, settings.lora_rank)), settings)


def policy_variant(
    size: str, counted: Counted, overrides: dict, sequences: int, ranks: int = 1
) -> dict:
    """Live GiB through one micro-batch and one AdamW step on rank 0 of `ranks`, with the
    plan's rows beside."""
    with fake_ranks(ranks):
        return _policy_variant(size, counted, overrides, sequences, ranks)


def _policy_variant(
    size: str, counted: Counted, overrides: dict, sequences: int, ranks: int
) -> dict:
    from wmrl_cli.config import resolve_config
    from wmrl_cli.policies.config import LoraSpec
    from wmrl_cli.policies.lora import apply_lora
    from wmrl_cli.training.sharding import PolicySharding

    cfg = resolve_config("wan-spatial-grpo")
    for key, value in overrides.items():
        setattr(cfg.training, key, value)
    model = fullsize.build_policy(size, counted.build_device)
    if cfg.training.lora_rank:
        rank = cfg.training.lora_rank
        apply_lora(model, LoraSpec(rank=rank, alpha=rank))
    model.train()
    # the token check reads values, which a fake tensor has none of
    model.action_tokenizer.is_action_token = lambda ids: np.array(True)
    counted.place(model)
    rank = SimpleNamespace(num_processes=ranks, device=CPU, is_main_process=True)
    sharding = PolicySharding(cfg.training, rank)
    # wmrl's cast, checkpointing and sharding, outside the fake mode (the device mesh is real)
    sharding.prepare_model(model)
    plan = policy_plan(cfg, model.config, sequences, ranks, ROLLOUT_ENVS[size] // ranks)
    tracker = StorageTracker()
    row: dict[str, Any] = {"sequences": sequences, "ranks": ranks}
    t = cfg.training
    with counted.context():
        for tensor in [*model.parameters(), *model.buffers()]:
            tracker.add(tensor)
        row["weights_gib"] = gib(tracker.now)
        trained = [p for p in model.parameters() if p.requires_grad]
        optimizer = sharding.optimizer(
            [{"params": trained, "lr": t.lr}],
            betas=t.adam_betas,
            eps=t.adam_eps,
            weight_decay=t.weight_decay,
            **({"foreach": True} if sharding.state_dtype == sharding.param_dtype else {}),
        )
        rng = np.random.default_rng(0)
        image = fullsize.SIZES[size].image
        images = rng.integers(0, 256, (sequences, image, image, 3), dtype=np.uint8)
        first = model.action_tokenizer.first_token_id
        tokens = torch.from_numpy(rng.integers(first, first + 256, (sequences, 8, 7)))
        advantages = torch.from_numpy(rng.normal(size=(sequences, 1, 1))).float()
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=t.bf16)
        with tracker:
            # twice: the second micro-batch runs beside the moments the first step made (the
            # steady state of every later update)
            for _ in range(2):
                optimizer.zero_grad(set_to_none=True)
                tracker.reset_peak()
                before = tracker.now
                with autocast:
                    out = model(images, [fullsize.INSTRUCTION] * sequences, tokens, 1.6)
                row["kept_for_backward_gib"] = gib(tracker.now - before)
                loss = -(out.log_probs * advantages).mean()
                del out
                loss.backward()
                del loss
                row["micro_batch_peak_gib"] = gib(tracker.peak)
                row["gradients_gib"] = gib(tracker.now - before)
                tracker.reset_peak()
                optimizer.step()
                row["optimizer_step_peak_gib"] = gib(tracker.peak)
            row["moments_gib"] = gib(tracker.now) - row["weights_gib"] - row["gradients_gib"]
            # a rollout: the next chunk's forward for this rank's envs, the policy gathered
            optimizer.zero_grad(set_to_none=True)
            tracker.reset_peak()
            envs = ROLLOUT_ENVS[size] // ranks
            with sharding.gathered(model), torch.no_grad(), autocast:
                model(
                    images[:1].repeat(envs, 0),
                    [fullsize.INSTRUCTION] * envs,
                    tokens[:1].repeat(envs, 1, 1),
                    1.6,
                )
            row.update(rollout_envs=envs, rollout_peak_gib=gib(tracker.peak))
    phases = ("micro_batch_peak_gib", "optimizer_step_peak_gib", "rollout_peak_gib")
    row["peak_gib"] = max(row[phase] for phase in phases)
    row["plan"] = {label: phases for label, *phases in plan.rows if any(phases)}
    row.update(plan_update_gib=plan.update, plan_step_gib=plan.step)
    row["plan_rollout_gib"] = plan.rollout
    row["plan_gib"] = plan.peak
    row["ratio"] = row["peak_gib"] / row["plan_gib"]
    return row


def policy_section(size: str, counted: Counted) -> list[dict]:
    rows = []
    micro_batch = fullsize.SIZES[size].sequences
    for name, (overrides, sequences, ranks) in POLICY_VARIANTS.items():
        start = time.perf_counter()
        row = policy_variant(size, counted, overrides, sequences or micro_batch, ranks)
        rows.append({"variant": name, **row, "seconds": time.perf_counter() - start})
        print(f"{name}: peak {row['peak_gib']:.2f} GiB, plan {row['plan_gib']:.2f}", flush=True)
    return rows


# -- 2. imagination ---------------------------------------------------------------------------

# (envs, world_model.vae_batch) of each measured chunk of the presets' windows (4 context
# frames, chunks of 8); the plan's per-env figures are read off (1, all) and (64, 4): the
# other rows test it
IMAGINE_RUNS = {
    "full": ((1, None), (8, None), (64, None), (64, 4), (64, 16)),
    "tiny": ((1, None), (2, 1)),
}
# other windows (context frames, chunk) and frame sizes, at the decode's row and the denoiser's
OTHER_FRAMES = {
    "full": ((4, 4), (8, 4), (4, 16), (8, 8), (12, 8), (16, 8)),
    "tiny": ((8, 4),),
}
OTHER_IMAGES = {"full": (128, 512), "tiny": (16,)}
OTHER_RUNS = {"full": ((1, None), (64, 4)), "tiny": ((1, None), (2, 1))}


def imagination_section(size: str, counted: Counted) -> list[dict]:
    """Per backend, window, frame size and env count: the weights, and the peak of one reset
    and predicted chunk beyond them (in bf16 with `--size full` as on a GPU; the tiny size in
    float32, as a CPU runs it)."""
    s, rows = fullsize.SIZES[size], []
    dtype = torch.bfloat16 if size == "full" else torch.float32
    variants = [((4, 8), s.image, IMAGINE_RUNS[size])]
    variants += [(frames, s.image, OTHER_RUNS[size]) for frames in OTHER_FRAMES[size]]
    variants += [((4, 8), image, OTHER_RUNS[size]) for image in OTHER_IMAGES[size]]
    for backend, steps in (("wan", s.wan_steps), ("opensora", s.opensora_steps)):
        for frames, image, window_runs in variants:
            build = counted.build_device
            model = fullsize.world_model(backend, size, steps, build, dtype, frames, image)
            counted.place(model)
            for envs, vae_batch in window_runs:
                row = imagined_chunk_row(model, counted, backend, frames, envs, vae_batch)
                rows.append({"steps": steps, **row})
            del model
    return rows


def imagined_chunk_row(
    model, counted: Counted, backend: str, frames: tuple[int, int], envs: int, vae_batch
) -> dict:
    """The weights and one chunk's working set beyond them, beside the plan's."""
    from wmrl_cli.memory.plan import imagination_bytes, imagination_cost

    image, (context, chunk) = model.height, frames
    model.vae_batch = vae_batch
    start = time.perf_counter()
    with counted.context(), real_sampling_schedule():
        tracker = StorageTracker()
        for tensor in [*model.parameters(), *model.buffers()]:
            tracker.add(tensor)
        weights = gib(tracker.now)
        tracker.reset_peak()
        with tracker:
            fullsize.imagine_chunk(model, envs, image, chunk=chunk)
    working = gib(tracker.peak) - weights
    cost = imagination_cost(backend, image, image, context, chunk)
    print(
        f"{backend} {context}+{chunk} at {image}: x{envs} ({vae_batch}): {weights:.2f} + "
        f"{working:.2f} GiB"
    )
    return {
        "backend": backend,
        "image": image,
        "context_frames": context,
        "chunk": chunk,
        "envs": envs,
        "vae_batch": vae_batch,
        "weights_gib": weights,
        "working_set_gib": working,
        "per_env_gib": working / envs,
        "plan_gib": gib(imagination_bytes(cost, envs, vae_batch)),
        "seconds": time.perf_counter() - start,
    }


# -- output -----------------------------------------------------------------------------------


def markdown(result: dict) -> str:
    lines = [
        f"# The memory plan against the count ({result['size']}, "
        f"{'real' if result['real'] else 'fake'} tensors), torch {result['torch']}",
        "",
        "| policy variant | sequences | weights | kept for backward | micro-batch peak (plan) "
        "| AdamW step peak (plan) | rollout peak (plan) | peak / plan |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["policy"]:
        lines.append(
            f"| {r['variant']} | {r['sequences']} | {r['weights_gib']:.2f} | "
            f"{r['kept_for_backward_gib']:.2f} | {r['micro_batch_peak_gib']:.2f} "
            f"({r['plan_update_gib']:.2f}) | {r['optimizer_step_peak_gib']:.2f} "
            f"({r['plan_step_gib']:.2f}) | {r['rollout_peak_gib']:.2f} "
            f"({r['plan_rollout_gib']:.2f}) | {r['ratio']:.2f} |"
        )
    lines += [
        "",
        "| world model | steps | window | frames | envs | VAE batch | weights GiB "
        "| working set GiB (plan) | per env GiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["imagination"]:
        window, image = f"{r['context_frames']}+{r['chunk']}", f"{r['image']}x{r['image']}"
        lines.append(
            f"| {r['backend']} | {r['steps']} | {window} | {image} | {r['envs']} | "
            f"{r['vae_batch'] or 'all'} | "
            f"{r['weights_gib']:.2f} | "
            f"{r['working_set_gib']:.2f} ({r['plan_gib']:.2f}) | {r['per_env_gib']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def run(size: str, real: bool) -> dict:
    """Both sections: the rows of the table that `markdown` writes."""
    counted = Counted(real)
    result: dict[str, Any] = {"size": size, "real": real, "torch": torch.__version__}
    result["policy"] = policy_section(size, counted)
    result["imagination"] = imagination_section(size, counted)
    return result
