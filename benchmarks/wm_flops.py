"""Where an imagined frame's compute goes, at full size, counted on a CPU.

    python benchmarks/wm_flops.py --out DIR [--size full|tiny] [--envs 64]

FLOPs of the Wan2.2-TI2V-5B and OpenSora configs at 256x256 in bf16, with RLinf's sampling steps (5
and 10), counted by torch's FlopCounterMode on fake tensors (shapes, no memory; the builders of
benchmarks/gpu_fullsize.py, the sampling schedule of benchmarks/fake_count.py). One chunk of 8
frames for `--envs` envs, split into the denoiser (all its sampling steps), the VAE decode and the
VAE encode of the window, and the reset's encode of the context, once per episode. Each per frame,
with the frames/s that a GPU's dense bf16 peak would allow at a given utilization (model FLOPs
utilization, MFU): fps = MFU x peak / FLOPs per frame. Only matmuls, convolutions and attention are
counted (elementwise work, normalization and memory traffic are not), so the bound is optimistic.
The measured frames/s are benchmarks/gpu_fullsize.py's (docs/benchmarks.md).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # the checkout's wmrl_cli
sys.path.insert(1, str(Path(__file__).resolve().parent))  # the builders
import fake_count as counting  # noqa: E402
import gpu_fullsize as fullsize  # noqa: E402
import harness  # noqa: E402

H100_BF16_PEAK = 989e12  # dense bf16 FLOP/s of an H100 SXM (NVIDIA's datasheet); H200: the same
EPISODE_CHUNKS = 32  # LIBERO's 256 steps (RLinf's max_episode_steps) in chunks of 8


def _attention(query_shape, key_shape, value_shape, *args: Any, **kwargs: Any) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


# the CPU's fused attention, which fake tensors run: the FLOPs of CUDA's
CPU_ATTENTION = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _attention}


def _counted(call) -> tuple[int, dict[str, int]]:
    """(FLOPs of `call()`, FLOPs per top-level module called: the world model's parts are
    called directly, so each is named by its class)."""
    counter = FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION)
    with counter:
        call()
    per_module = {
        name: sum(ops.values())
        for name, ops in counter.get_flop_counts().items()
        if name != "Global" and "." not in name
    }
    return counter.get_total_flops(), per_module


def world_model_flops(backend: str, size: str, envs: int) -> dict[str, Any]:
    """GFLOPs per imagined frame of one backend: the denoiser, the VAE decode, the VAE encode
    of each chunk's window (Wan encodes its reference frame with every window) and the reset's,
    amortized over an episode of `EPISODE_CHUNKS` chunks."""
    s = fullsize.SIZES[size]
    steps = s.wan_steps if backend == "wan" else s.opensora_steps
    counted = counting.Counted(real=False)
    model = fullsize.world_model(backend, size, steps, counted.build_device, torch.bfloat16)
    counted.place(model)
    parts = {
        "denoiser": type(model.transformer).__name__,
        "decode": type(model.vae.decoder).__name__,
        "encode": type(model.vae.encoder).__name__,
    }
    gen = torch.Generator().manual_seed(0)
    k, image = model.num_context_frames, s.image
    with counted.context(), counting.real_sampling_schedule(), torch.no_grad():
        frames = torch.randint(0, 256, (envs, k, image, image, 3), dtype=torch.uint8)
        reset, _ = _counted(
            lambda: model.reset_context(frames[:, 0], frames, torch.zeros(envs, k, 7))
        )
        actions = torch.rand(envs, 8, 7, generator=gen) * 2 - 1
        chunk, modules = _counted(lambda: model.predict(actions, generator=gen))
    per_frame = envs * 8
    row: dict[str, Any] = {"backend": backend, "steps": steps, "envs": envs}
    for part, name in parts.items():
        row[f"{part}_gflop"] = modules.pop(name, 0) / per_frame / 1e9
    row["other_gflop"] = sum(modules.values()) / per_frame / 1e9
    row["reset_gflop"] = reset / (per_frame * EPISODE_CHUNKS) / 1e9
    total = chunk / per_frame + reset / (per_frame * EPISODE_CHUNKS)
    row["gflop_per_frame"] = total / 1e9
    for mfu in (0.3, 0.5):
        row[f"fps_at_mfu_{mfu}"] = mfu * H100_BF16_PEAK / total
    row["mfu_of_23_fps"] = 23 * total / H100_BF16_PEAK  # WoVR's Wan2.2-5B on one H100
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "| world model | steps | envs | GFLOP per frame: denoiser | VAE decode | VAE encode "
        "| other | reset | total | H100 fps at 30% MFU | at 50% | MFU of 23 fps |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['steps']} | {r['envs']} | {r['denoiser_gflop']:.0f} | "
            f"{r['decode_gflop']:.0f} | {r['encode_gflop']:.0f} | {r['other_gflop']:.1f} | "
            f"{r['reset_gflop']:.1f} | {r['gflop_per_frame']:.0f} | {r['fps_at_mfu_0.3']:.0f} | "
            f"{r['fps_at_mfu_0.5']:.0f} | {r['mfu_of_23_fps']:.1%} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = harness.parser(__doc__, out=True)
    parser.add_argument("--size", default="full", choices=sorted(fullsize.SIZES))
    parser.add_argument(
        "--envs", type=harness.positive, default=8, help="envs of the counted chunk"
    )
    args = parser.parse_args()
    rows = [world_model_flops(backend, args.size, args.envs) for backend in ("wan", "opensora")]
    harness.write(args, "wm_flops", rows, markdown(rows))


if __name__ == "__main__":
    harness.main(main)
