"""What one world-model training step holds per GPU at full size, counted on a CPU.

    python benchmarks/wm_train_memory.py --out DIR [--size full|tiny] [--batch 4] [--gpu]
        [--frames 4,8 [K,C ...]] [--image 256] [--ranks 1 [N ...]] [--precision bf16|fp32]

The denoiser step of `train-wm` (and of co-evolve's refinement of a published world model) as
`WorldModelTrainer` runs it on one GPU: float32 weights, the forward under bf16 autocast (the
`precision` a GPU resolves to), the VAE frozen, the EMA copy of the denoiser, AdamW with torch's
multi-tensor step (CUDA's default), and a batch of `--batch` windows (WMPO's recipe: 4 per GPU)
whose latents come from the trainer's cache, encoded before training. Two steps (the second
beside AdamW's moments, as every later one), with and without gradient checkpointing, for the
Wan2.2-TI2V-5B and OpenSora configs at 256x256 frames, 4 context frames and chunks of 8 (the
seeds' presets; `--frames K,C ...`: windows of K context frames and chunks of C, each).
Counted on fake tensors by benchmarks/fake_count.py's `StorageTracker` (shapes and
dtypes, no memory), beside the arithmetic of weights, gradients, moments and the EMA copy.

Not counted: the latent cache and the episodes (host memory), validation (an open-loop rollout
under no_grad, on the EMA weights swapped in; the trained ones wait on the CPU), and what only a
GPU adds (allocator rounding, library workspaces, the CUDA context). Beside each count, the
memory plan of `train-wm` (memory/world_model.py) for the same step.

`--gpu`: the same steps on real tensors on the GPU (random weights built there), their peaks
read from torch's CUDA allocator (allocated and reserved): what the count leaves out, measured
(benchmarks/gpu/gpu_fullsize_device.sh runs it after gpu_fullsize.py). Writes
DIR/wm_train_memory.json and .md. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the checkout's wmrl_cli
sys.path.insert(1, str(Path(__file__).resolve().parent))  # the builders and the tracker
import fake_count as counting  # noqa: E402
import gpu_fullsize as fullsize  # noqa: E402
import harness  # noqa: E402

from wmrl_cli.errors import WmrlError  # noqa: E402
from wmrl_cli.memory.world_model import TrainingSettings, plan_training  # noqa: E402
from wmrl_cli.training.denoiser_sharding import shard_denoiser  # noqa: E402

PRESET_FRAMES, ACTION_DIM = (4, 8), 7  # LIBERO's, as the seeds' presets train


def window_batch(
    model, batch: int, image: int, gen: torch.Generator, frames: tuple[int, int] = PRESET_FRAMES
) -> dict[str, Any]:
    """A batch of training windows of `frames` (context frames, chunk) as the trainer hands it
    over: frames, actions and the window's latents (the cache's, encoded once before training,
    no gradient)."""
    (context, chunk), shape = frames, (batch, image, image, 3)
    frames = {
        "reference_frames": torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen),
        "context_frames": torch.randint(
            0, 256, (batch, context, *shape[1:]), dtype=torch.uint8, generator=gen
        ),
        "target_frames": torch.randint(
            0, 256, (batch, chunk, *shape[1:]), dtype=torch.uint8, generator=gen
        ),
        "context_actions": torch.rand(batch, context, ACTION_DIM, generator=gen) * 2 - 1,
        "target_actions": torch.rand(batch, chunk, ACTION_DIM, generator=gen) * 2 - 1,
    }
    with torch.no_grad():
        latents = model.encode_window(frames)
    out = {k: v for k, v in frames.items() if k != "target_frames"}  # as the trainer drops them
    return {**out, "latents": latents}


class CudaMeter:
    """The CUDA allocator's statistics in StorageTracker's terms (`now`, `peak`, `reset_peak`,
    bytes), for --gpu: what the GPU really holds. `reserved_peak`: the allocator's cache too."""

    def __init__(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def add(self, tensor: torch.Tensor) -> None:
        """Already counted: the allocator sees every tensor."""

    @property
    def now(self) -> int:
        return torch.cuda.memory_allocated()

    @property
    def peak(self) -> int:
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated()

    @property
    def reserved_peak(self) -> int:
        return torch.cuda.max_memory_reserved()

    def reset_peak(self) -> None:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def __enter__(self) -> CudaMeter:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class OnGpu:
    """`counting.Counted`'s part for --gpu: real tensors built on the GPU, measured by its
    allocator."""

    real = True
    build_device = torch.device("cuda")

    def place(self, module: torch.nn.Module) -> None:
        """Built there already."""

    def context(self) -> Any:
        return contextlib.nullcontext()


def train_step_peaks(
    backend: str,
    size: str,
    batch: int,
    checkpointing: bool,
    counted: Any,
    frames: tuple[int, int] = PRESET_FRAMES,
    image: int | None = None,
    ranks: int = 1,
    precision: str = "bf16",
) -> dict[str, Any]:
    """The weights (and the EMA copy) held, and the peaks of two training steps' forward and
    backward and AdamW step, as `WorldModelTrainer.train_denoiser` runs them; beside them, the
    memory plan's figures for the same step. `counted`: a `counting.Counted` (fake or real CPU
    tensors, counted by a StorageTracker) or `OnGpu`. `ranks` > 1: rank 0 of that many, the
    denoiser sharded as `world_model.sharding=fsdp` shards it (a fake process group, whose
    collectives move nothing), `batch` windows on each rank."""
    with counting.fake_ranks(ranks):
        return _train_step_peaks(
            backend, size, batch, checkpointing, counted, frames, image, ranks, precision
        )


def _train_step_peaks(
    backend: str,
    size: str,
    batch: int,
    checkpointing: bool,
    counted: Any,
    frames: tuple[int, int],
    image: int | None,
    ranks: int,
    precision: str = "bf16",
) -> dict[str, Any]:
    image = image or fullsize.SIZES[size].image
    model = fullsize.world_model(
        backend, size, 1, counted.build_device, torch.float32, frames, image
    )
    counted.place(model)
    # bf16 autocast where a GPU runs it (`--precision fp32`: none); the tiny size in float32,
    # as a CPU runs it
    autocast = size == "full" and precision == "bf16"
    model.autocast_dtype = torch.bfloat16 if autocast else None
    model.transformer.gradient_checkpointing = checkpointing
    model.vae.requires_grad_(False)
    if ranks > 1:  # outside the fake mode, as the trainer does before its optimizer and EMA
        rank = SimpleNamespace(device=torch.device("cpu"), num_processes=ranks)
        shard_denoiser(model.transformer, rank)
    gen = torch.Generator().manual_seed(0)  # on the CPU, as the trainer draws its noise
    start = time.perf_counter()
    with counted.context():
        inputs = window_batch(model, batch, image, gen, frames)
        gpu = isinstance(counted, OnGpu)
        tracker = CudaMeter() if gpu else counting.StorageTracker()
        for tensor in [*model.parameters(), *model.buffers(), inputs["latents"]]:
            tracker.add(tensor)
        weights = counting.gib(tracker.now)
        with tracker:
            ema = {n: p.detach().clone() for n, p in model.transformer.named_parameters()}
            params = [p for p in model.transformer.parameters() if p.requires_grad]
            optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=True)
            held = counting.gib(tracker.now)
            update, step = [], []
            for _ in range(2):
                tracker.reset_peak()
                model.transformer.train()
                loss = model(inputs, generator=gen)
                loss.backward()
                update.append(counting.gib(tracker.peak))
                tracker.reset_peak()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                with torch.no_grad():
                    for name, p in model.transformer.named_parameters():
                        ema[name].lerp_(p.detach(), 0.01)
                step.append(counting.gib(tracker.peak))
            validation = sharded_validation_peak(model, tracker, image) if ranks > 1 else None
    trained = sum(p.numel() for p in params)
    frozen = sum(p.numel() for p in model.parameters()) - trained
    # this rank's gradients, two moments and EMA (float32; a DTensor counts its whole shape)
    arithmetic = counting.gib(trained * 4 * 4 / ranks)
    settings = TrainingSettings(
        backend,
        image,
        image,
        batch * ranks,
        ranks=ranks,
        sharded=ranks > 1,
        checkpointing=checkpointing,
        context_frames=frames[0],
        chunk=frames[1],
        autocast=autocast,
    )
    plan = plan_training(trained, frozen, settings)
    row = {
        "backend": backend,
        "context_frames": frames[0],
        "chunk": frames[1],
        "image": image,
        "batch": batch,
        "ranks": ranks,
        "checkpointing": checkpointing,
        "precision": "bf16" if autocast else "fp32",
        "trained_params": trained,
        "weights_gib": weights,
        "with_ema_gib": held,
        "update_peak_gib": max(update),
        "step_peak_gib": max(step),
        "peak_gib": max(*update, *step),
        "arithmetic_gib": weights + arithmetic,  # everything but activations and temporaries
        "plan_gib": plan.peak,
        "validation_peak_gib": validation,  # sharded only
        "plan_validation_gib": plan.frozen + plan.state + plan.validation,
        # per window: what the forward and backward hold beyond the gradients (the plan's term)
        "activations_gib": (max(update) - weights - arithmetic) / batch,
        "plan_activations_gib": plan.activations / batch,
        "seconds": time.perf_counter() - start,
    }
    if gpu:
        row["reserved_peak_gib"] = counting.gib(tracker.reserved_peak)
    del model, ema, optimizer, params, inputs
    if gpu:
        torch.cuda.empty_cache()
    return row


def sharded_validation_peak(model, tracker: Any, image: int) -> float:
    """The peak of the trainer's sharded validation after the steps (the gradients freed, the
    EMA weights swapped in place): the whole denoiser gathered on the rank (`gathered_units`)
    and one chunk of an open-loop rollout's batch of episodes, under no_grad."""
    from wmrl_cli.memory.world_model import VALIDATION_BATCH
    from wmrl_cli.training.sharding import gathered_units

    model.eval()
    tracker.reset_peak()
    sampling = counting.real_sampling_schedule()
    with tracker, torch.no_grad(), sampling, gathered_units(model.transformer):
        fullsize.imagine_chunk(model, VALIDATION_BATCH, image)
    return counting.gib(tracker.peak)


def markdown(rows: list[dict], where: str) -> str:
    lines = [
        f"measured on {where}",
        "",
        "| world model | window | frames | batch | ranks | checkpointing | weights | + EMA "
        "| forward+backward peak | AdamW step peak | peak | reserved peak "
        "| weights, gradients, moments, EMA | plan | activations per window (plan) | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    gib = ("weights_gib", "with_ema_gib", "update_peak_gib", "step_peak_gib", "peak_gib")
    for r in rows:
        window, image = f"{r['context_frames']}+{r['chunk']}", f"{r['image']}x{r['image']}"
        cells = [r["backend"], window, image, r["batch"], r.get("ranks", 1)]
        cells.append("yes" if r["checkpointing"] else "no")
        if "error" in r:
            cells += ["-"] * 9 + [r["error"]]
        else:
            cells += [f"{r[key]:.1f}" for key in gib]
            cells.append(f"{r['reserved_peak_gib']:.1f}" if "reserved_peak_gib" in r else "-")
            cells += [f"{r['arithmetic_gib']:.1f}", f"{r['plan_gib']:.1f}"]
            note = ""
            if r.get("validation_peak_gib") is not None:  # sharded
                note = f"validation {r['validation_peak_gib']:.1f} ({r['plan_validation_gib']:.1f})"
            cells += [f"{r['activations_gib']:.3f} ({r['plan_activations_gib']:.3f})", note]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = harness.parser(__doc__, out=True)
    parser.add_argument("--size", default="full", choices=sorted(fullsize.SIZES))
    parser.add_argument(
        "--batch", type=harness.positive, default=4, help="windows per GPU (WMPO: 4)"
    )
    parser.add_argument("--real", action="store_true", help="real CPU tensors (tiny size)")
    parser.add_argument("--gpu", action="store_true", help="real tensors on the GPU, measured")
    parser.add_argument(
        "--frames",
        type=window_frames,
        nargs="+",
        default=[PRESET_FRAMES],
        help="windows K,C: K context frames, chunks of C (a multiple of 4); default 4,8",
    )
    parser.add_argument(
        "--image", type=harness.positive, default=None, help="frame size (default: 256, tiny 32)"
    )
    parser.add_argument(
        "--ranks",
        type=harness.positive,
        nargs="+",
        default=[1],
        help="rank 0 of N, the denoiser sharded (world_model.sharding=fsdp), --batch windows each",
    )
    parser.add_argument(
        "--precision",
        choices=["bf16", "fp32"],
        default="bf16",
        help="the forward under bf16 autocast (`precision` auto on a GPU) or in float32",
    )
    args = parser.parse_args()
    if args.gpu and args.ranks != [1]:
        raise harness.BenchmarkError("--gpu counts one GPU; --ranks needs the fake process group")
    if args.real and args.size == "full":
        raise harness.BenchmarkError("--real at full size needs over 100 GB of memory")
    if args.gpu and not torch.cuda.is_available():
        raise harness.BenchmarkError("--gpu needs a CUDA GPU")
    counted = OnGpu() if args.gpu else counting.Counted(args.real)
    where = torch.cuda.get_device_name() if args.gpu else "fake tensors (counted)"
    rows = []
    # OpenSora first: the smaller model measures even where time runs out on Wan
    for backend in ("opensora", "wan"):
        for frames in args.frames:
            for ranks in args.ranks:
                for checkpointing in (True, False):
                    row = measured_row(backend, frames, checkpointing, args, counted, ranks)
                    rows.append(row)
                    peak = "out of memory" if "error" in row else f"peak {row['peak_gib']:.2f} GiB"
                    window = f"{frames[0]}+{frames[1]}, {ranks} rank(s)"
                    print(f"{backend} {window} checkpointing={checkpointing}: {peak}", flush=True)
                    # after each row, so that a run cut short keeps what it measured
                    table = markdown(rows, where)
                    harness.write(args, "wm_train_memory", rows, table)


def measured_row(
    backend: str,
    frames: tuple[int, int],
    checkpointing: bool,
    args: Any,
    counted: Any,
    ranks: int = 1,
) -> dict[str, Any]:
    try:
        return train_step_peaks(
            backend,
            args.size,
            args.batch,
            checkpointing,
            counted,
            frames,
            args.image,
            ranks,
            args.precision,
        )
    except (torch.OutOfMemoryError, WmrlError) as exc:  # a row of its own; the others go on
        return {
            "backend": backend,
            "context_frames": frames[0],
            "chunk": frames[1],
            "image": args.image or fullsize.SIZES[args.size].image,
            "batch": args.batch,
            "ranks": ranks,
            "checkpointing": checkpointing,
            "error": "out of memory" if isinstance(exc, torch.OutOfMemoryError) else str(exc),
        }
    finally:
        if args.gpu:  # a failed row's tensors (held by its traceback until here) freed
            gc.collect()
            torch.cuda.empty_cache()


def window_frames(text: str) -> tuple[int, int]:
    """An argparse type: K,C (context frames, chunk; both multiples of 4, as the Wan VAE needs:
    both backends are counted)."""
    parts = text.split(",")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected K,C (two positive numbers), got {text!r}")
    context, chunk = map(int, parts)
    if context % 4 or chunk % 4:
        raise argparse.ArgumentTypeError(f"K and C must be multiples of 4, got {text!r}")
    return context, chunk


if __name__ == "__main__":
    harness.main(main)
