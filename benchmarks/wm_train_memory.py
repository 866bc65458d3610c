"""What one world-model training step holds per GPU at full size, counted on a CPU.

    python benchmarks/wm_train_memory.py --out DIR [--size full|tiny] [--batch 4]

The denoiser step of `train-wm` (and of co-evolve's refinement of a published world model) as
`WorldModelTrainer` runs it on one GPU: float32 weights, the forward under bf16 autocast (the
`precision` a GPU resolves to), the VAE frozen, the EMA copy of the denoiser, AdamW with torch's
multi-tensor step (CUDA's default), and a batch of `--batch` windows (WMPO's recipe: 4 per GPU)
whose latents come from the trainer's cache, encoded before training. Two steps (the second
beside AdamW's moments, as every later one), with and without gradient checkpointing, for the
Wan2.2-TI2V-5B and OpenSora configs at 256x256 frames, 4 context frames and chunks of 8.
Counted on fake tensors by benchmarks/memory_plan_check.py's `StorageTracker` (shapes and
dtypes, no memory), beside the arithmetic of weights, gradients, moments and the EMA copy.

Not counted: the latent cache and the episodes (host memory), validation (an open-loop rollout
under no_grad, on the EMA weights swapped in; the trained ones wait on the CPU), and what only a
GPU adds (allocator rounding, library workspaces, the CUDA context). Writes
DIR/wm_train_memory.json and .md. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the checkout's wmrl_cli
sys.path.insert(1, str(Path(__file__).resolve().parent))  # the builders and the tracker
import gpu_fullsize as fullsize  # noqa: E402
import memory_plan_check as counting  # noqa: E402

CONTEXT, CHUNK, ACTION_DIM = 4, 8, 7  # LIBERO's, as the seeds' presets train


def window_batch(model, batch: int, image: int, gen: torch.Generator) -> dict[str, Any]:
    """A batch of training windows as the trainer hands it over: frames, actions and the
    window's latents (the cache's, encoded once before training, no gradient)."""
    shape = (batch, image, image, 3)
    frames = {
        "reference_frames": torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen),
        "context_frames": torch.randint(
            0, 256, (batch, CONTEXT, *shape[1:]), dtype=torch.uint8, generator=gen
        ),
        "target_frames": torch.randint(
            0, 256, (batch, CHUNK, *shape[1:]), dtype=torch.uint8, generator=gen
        ),
        "context_actions": torch.rand(batch, CONTEXT, ACTION_DIM, generator=gen) * 2 - 1,
        "target_actions": torch.rand(batch, CHUNK, ACTION_DIM, generator=gen) * 2 - 1,
    }
    with torch.no_grad():
        latents = model.encode_window(frames)
    out = {k: v for k, v in frames.items() if k != "target_frames"}  # as the trainer drops them
    return {**out, "latents": latents}


def train_step_peaks(
    backend: str, size: str, batch: int, checkpointing: bool, counted: counting.Counted
) -> dict[str, Any]:
    """The weights (and the EMA copy) held, and the peaks of two training steps' forward and
    backward and AdamW step, as `WorldModelTrainer.train_denoiser` runs them."""
    s = fullsize.SIZES[size]
    model = fullsize.world_model(backend, size, 1, counted.build_device, torch.float32)
    counted.place(model)
    # bf16 autocast where a GPU runs it; the tiny size in float32, as a CPU runs it
    model.autocast_dtype = torch.bfloat16 if size == "full" else None
    model.transformer.gradient_checkpointing = checkpointing
    model.vae.requires_grad_(False)
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    with counted.context():
        inputs = window_batch(model, batch, s.image, gen)
        tracker = counting.StorageTracker()
        for tensor in [*model.parameters(), *model.buffers(), inputs["latents"]]:
            tracker.add(tensor)
        weights = counting._gib(tracker.now)
        with tracker:
            ema = {n: p.detach().clone() for n, p in model.transformer.named_parameters()}
            params = [p for p in model.transformer.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=True)
            held = counting._gib(tracker.now)
            update, step = [], []
            for _ in range(2):
                tracker.reset_peak()
                model.transformer.train()
                loss = model(inputs, generator=gen)
                loss.backward()
                update.append(counting._gib(tracker.peak))
                tracker.reset_peak()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                with torch.no_grad():
                    for name, p in model.transformer.named_parameters():
                        ema[name].lerp_(p.detach(), 0.01)
                step.append(counting._gib(tracker.peak))
    trained = sum(p.numel() for p in params)
    arithmetic = counting._gib(trained * 4 * 4)  # gradients, two moments, EMA (float32)
    return {
        "backend": backend,
        "batch": batch,
        "checkpointing": checkpointing,
        "trained_params": trained,
        "weights_gib": weights,
        "with_ema_gib": held,
        "update_peak_gib": max(update),
        "step_peak_gib": max(step),
        "peak_gib": max(*update, *step),
        "arithmetic_gib": weights + arithmetic,  # everything but activations and temporaries
        "seconds": time.perf_counter() - start,
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| world model | batch | checkpointing | weights | + EMA | forward+backward peak "
        "| AdamW step peak | peak | weights, gradients, moments, EMA |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    gib = ("weights_gib", "with_ema_gib", "update_peak_gib", "step_peak_gib", "peak_gib")
    for r in rows:
        cells = [r["backend"], r["batch"], "yes" if r["checkpointing"] else "no"]
        cells += [f"{r[key]:.1f}" for key in gib] + [f"{r['arithmetic_gib']:.1f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = counting.size_parser(__doc__)
    parser.add_argument(
        "--batch", type=counting.positive, default=4, help="windows per GPU (WMPO: 4)"
    )
    parser.add_argument("--real", action="store_true", help="real CPU tensors (tiny size)")
    args = parser.parse_args()
    if args.real and args.size == "full":
        sys.exit("wm_train_memory: --real at full size needs over 100 GB of memory")
    counted = counting.Counted(args.real)
    rows = []
    for backend in ("wan", "opensora"):
        for checkpointing in (True, False):
            rows.append(train_step_peaks(backend, args.size, args.batch, checkpointing, counted))
            r = rows[-1]
            print(f"{backend} checkpointing={checkpointing}: peak {r['peak_gib']:.2f} GiB")
    counting.write_results(args.out, "wm_train_memory", rows, markdown(rows))


if __name__ == "__main__":
    main()
