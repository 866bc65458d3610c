"""float32 vs bf16 autocast for the world models, side by side in one run: training samples/s,
imagined frames/s, the arithmetic rate they imply, and this machine's matmul peak.

    python benchmarks/wm_train.py [--backend opensora wan] [--threads 1] [--batch 16] [--rounds 3]
        [--warmup 1] [--calls 2] [--out RESULT.json] [--markdown TABLE.md]

Each model is the configured tiny world model (64x64, Meta-World's 4-dim actions) with random
weights: speed does not depend on the weights. Training: one denoiser step (forward, backward,
AdamW) on a batch of cached-latent windows, as `wmrl train-wm` runs it. Imagination: one
8-frame chunk of `predict` for `--envs` envs at the mw-* presets' sampling steps. The two
precisions are timed in alternation over `--rounds` rounds of `--calls` calls, each after
`--warmup` untimed calls (autocast caches, oneDNN primitives); the median is reported (the
spread in the JSON), so that load from other processes falls on both alike. FLOPs per step are
counted once with torch's FlopCounterMode; the matmul peak is a 1024x1024 matmul loop in each
precision, same threads, the best of `--rounds` alternating rounds (load only ever lowers it).
Results: docs/benchmarks.md ("bf16 on the CPU").
"""

from __future__ import annotations

import time
from collections.abc import Callable

import harness
import torch
from torch.utils.flop_counter import FlopCounterMode

from wmrl_cli.config.loading import resolve_config
from wmrl_cli.world_models.factory import build_world_model
from wmrl_cli.world_models.interface import WorldModel

ACTION_DIM, K, C, SIZE = 4, 4, 8, 64
SAMPLING_STEPS = {"opensora": 2, "wan": 5}  # mw-opensora-grpo, mw-wan-grpo


def matmul_gflops(dtype: torch.dtype, seconds: float = 1.0) -> float:
    a = torch.randn(1024, 1024).to(dtype)
    b = torch.randn(1024, 1024).to(dtype)
    a @ b
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        count += 1
    return 2 * 1024**3 * count / (time.perf_counter() - start) / 1e9


def build(backend: str) -> WorldModel:
    cfg = resolve_config(None, {"world_model.backend": backend, "simulator.image_size": SIZE})
    return build_world_model(cfg, ACTION_DIM)


def training_step(model: WorldModel, batch: int) -> Callable[[], None]:
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (batch, K + C, SIZE, SIZE, 3), dtype=torch.uint8, generator=gen)
    window = {
        "reference_frames": frames[:, 0],
        "context_frames": frames[:, :K],
        "context_actions": torch.zeros(batch, K, ACTION_DIM),
        "target_frames": frames[:, K:],
        "target_actions": torch.rand(batch, C, ACTION_DIM, generator=gen) * 2 - 1,
    }
    window["latents"] = model.encode_window(window)
    del window["target_frames"]
    params = [p for p in model.transformer.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4)

    def step() -> None:
        loss = model(window, generator=torch.Generator().manual_seed(1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def imagination_chunk(model: WorldModel, envs: int) -> Callable[[], None]:
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (envs, K, SIZE, SIZE, 3), dtype=torch.uint8, generator=gen)
    actions = torch.rand(envs, C, ACTION_DIM, generator=gen) * 2 - 1

    @torch.no_grad()
    def chunk() -> None:
        model.reset_context(frames[:, 0], frames, torch.zeros(envs, K, ACTION_DIM))
        model.predict(actions, generator=torch.Generator().manual_seed(2))

    return chunk


def flops(fn: Callable[[], None]) -> float:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return float(counter.get_total_flops())


def main() -> None:
    parser = harness.parser(__doc__, rounds=3, warmup=1)
    parser.add_argument("--backend", nargs="+", default=["opensora", "wan"])
    parser.add_argument("--threads", type=harness.positive, default=1)
    parser.add_argument(
        "--batch", type=harness.positive, default=16, help="training windows per step"
    )
    parser.add_argument("--envs", type=harness.positive, default=16, help="imagined envs a chunk")
    parser.add_argument("--calls", type=harness.positive, default=2, help="timed calls a round")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also time bf16 with the denoiser under torch.compile (a copy of the same model; "
        "compilation takes a minute or two per backend and work, not timed)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    # alternating rounds, best of each: load from other processes only ever lowers a figure
    peak = {"fp32": 0.0, "bf16": 0.0}
    for _ in range(args.rounds):
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            peak[name] = max(peak[name], matmul_gflops(dtype))
    lines = [
        f"matmul 1024^2, {args.threads} thread(s): fp32 {peak['fp32']:.0f} GFLOP/s, "
        f"bf16 {peak['bf16']:.0f} GFLOP/s ({peak['bf16'] / peak['fp32']:.2f}x)",
        "| backend | work | fp32 /s | bf16 /s | bf16 / fp32 | GFLOP/s fp32 | GFLOP/s bf16 |"
        + (" bf16 compiled /s | compiled / fp32 |" if args.compile else ""),
        "|---|---|---|---|---|---|---|" + "---|---|" * args.compile,
    ]
    print("\n".join(lines), flush=True)
    result: dict = {"matmul_gflops": peak, "threads": args.threads, "rows": []}
    for backend in args.backend:
        model = build(backend)
        model.config.num_inference_steps = SAMPLING_STEPS[backend]
        compiled = None
        if args.compile:  # the same weights; bf16 throughout (a dtype switch would recompile)
            compiled = build(backend)
            compiled.load_state_dict(model.state_dict())
            compiled.config.num_inference_steps = SAMPLING_STEPS[backend]
            compiled.autocast_dtype = torch.bfloat16
            compiled.transformer = torch.compile(compiled.transformer)
        work = {
            f"training samples (batch {args.batch})": (training_step, args.batch),
            f"imagined frames ({args.envs} envs)": (imagination_chunk, args.envs * C),
        }
        for name, (make, items) in work.items():
            size = args.batch if make is training_step else args.envs
            fn = make(model, size)
            model.autocast_dtype = None
            count = flops(fn)
            runs = {"fp32": (fn, None), "bf16": (fn, torch.bfloat16)}
            if compiled is not None:
                runs["compiled"] = (make(compiled, size), torch.bfloat16)
                runs["compiled"][0]()  # compilation, not timed
            times: dict[str, list[float]] = {p: [] for p in runs}
            for _ in range(args.rounds):
                for precision, (run, dtype) in runs.items():
                    if precision != "compiled":
                        model.autocast_dtype = dtype
                    one = harness.timed(run, 1, args.warmup, args.calls)
                    times[precision].append(one.median)
            spreads = {p: harness.Spread.of(t) for p, t in times.items()}
            rate = {p: items / spread.median for p, spread in spreads.items()}
            gflops = {p: count / spread.median / 1e9 for p, spread in spreads.items()}
            more = ""
            if compiled is not None:
                more = f" {rate['compiled']:.1f} | {rate['compiled'] / rate['fp32']:.2f}x |"
            row = (
                f"| {backend} | {name} | {rate['fp32']:.1f} | {rate['bf16']:.1f} | "
                f"{rate['bf16'] / rate['fp32']:.2f}x | {gflops['fp32']:.0f} | "
                f"{gflops['bf16']:.0f} |" + more
            )
            print(row, flush=True)
            lines.append(row)
            result["rows"].append(
                {
                    "backend": backend,
                    "work": name,
                    "items": items,
                    "flops": count,
                    "per_s": rate,
                    "seconds": {p: spread.as_dict() for p, spread in spreads.items()},
                }
            )
            harness.write(args, "wm_train", result, "\n".join(lines) + "\n", echo=False)


if __name__ == "__main__":
    harness.main(main)
