"""Full-size shapes on one GPU: imagination, the policy's GRPO micro-batch, one GRPO step.

    python benchmarks/gpu_fullsize.py --out DIR [--size full|tiny] [--pass all|first|rest]
        [--budget-s 420]

Random weights built directly on the device (no download; speed and memory do not depend on
the weights), in three sections, each guarded by what is left of `--budget-s` (a measurement
that would not finish in time is recorded as skipped, with why):

1. imagination: the Wan2.2-TI2V-5B-config world model at 256x256 with 5 sampling steps and
   the OpenSora-1.1B-config one with 10 (RLinf's settings), in bf16 (`world_model.dtype`
   auto on a GPU): frames/s at several env counts, peak memory, GPU utilization, and at the
   largest count again with `world_model.vae_batch` 4 (what bounding the decode costs); at the
   middle count, where a chunk's time goes (denoiser, VAE decode, VAE encode, the rest:
   `gpu_measure.part_times`), to set beside where its FLOPs go (benchmarks/wm_flops.py);
2. policy: the 7.5 B OpenVLA-OFT forward and backward of one GRPO micro-batch (32 sequences:
   one trajectory of 32 chunks, `algorithm.minibatch_trajectories=1`, activation
   checkpointing, bf16 autocast), with LoRA rank 32 on float32 weights, with full fine-tuning
   on float32 weights (may run out of memory on one H100: caught and recorded) and on bf16
   weights (RLinf's): time, peak memory, the memory plan's estimate beside it;
3. three whole GRPO steps (rollout, advantages, update) of `wan-spatial-grpo` with LoRA rank
   32 at a reduced `algorithm.num_envs` (one group, group filter off so that the update runs),
   through `PolicyTrainer.train_step`, the memory plan's estimate beside the largest measured
   peak (from the second step on, AdamW's moments are held throughout).

`--pass first` measures, in about 4 minutes, what the memory plan needs most (`PASSES`): the
imagination rows at the smallest env count, the policy's LoRA and bf16 micro-batches, two GRPO
steps (the second holds AdamW's moments); `--pass rest` the others (the larger counts, the
bounded decode, the time split, full fine-tuning on float32 weights); `all` (default) both;
`--pass policy` the three micro-batches alone (a recheck of the plan's policy rows).

`--size tiny` runs the same code on the tiny configs (32x32 frames, 1 sampling step), on the
CPU in the test suite (tests/benchmarks/test_gpu_fullsize_script.py; the full configs' shapes
on the meta device: tests/benchmarks/test_gpu_fullsize_shapes.py). Writes DIR/gpu_fullsize.json
and DIR/gpu_fullsize.md, again after each section (a run cut short keeps what it measured).

It first checks, in seconds, that this Python has what the sections import (wmrl from this
checkout, diffusers, transformers >= 5.24, peft, accelerate, pydantic) and stops naming what is
missing. A failed measurement never stops the run: out of memory is recorded as such (memory
freed, the next measurement goes on), any other error as its type and first line, with its
traceback on stderr; the exit status is then 1, after both files are written. Results:
docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

# Run as `python benchmarks/gpu_fullsize.py` by a Python without wmrl installed (a lent
# machine's own): the checkout's package, as if run from its root.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))  # gpu_measure, harness, when imported
import harness  # noqa: E402
from gpu_measure import (  # noqa: E402
    OOM,
    Budget,
    Utilization,
    drop_caches,
    failure,
    free,
    part_times,
    peaks,
    reset_peak,
    sync,
)

INSTRUCTION = "pick up the black bowl between the plate and the ramekin and place it on the plate"


@dataclass(frozen=True)
class Size:
    """What `--size` changes: sizes only, never the code path."""

    image: int  # frames the world models imagine and the policy sees
    wan_steps: int
    opensora_steps: int
    env_counts: tuple[int, ...]
    sequences: int  # policy sequences per micro-batch
    step_envs: int  # GRPO step: envs (one group)
    episode_steps: int  # GRPO step: env steps per episode (at most)


VAE_BATCH = 4  # the memory plan's world_model.vae_batch remedy

SIZES = {
    "full": Size(256, 5, 10, (8, 32, 64), 32, 8, 256),
    "tiny": Size(32, 1, 1, (2,), 4, 2, 16),
}
# The GRPO step's imagination rate where the Wan section measured none (WoVR: 23 frames/s for
# Wan2.2-5B on one H100): a guess on the slow side, so that the step still fits the budget.
FALLBACK_FPS = 10.0
# GRPO steps the step section runs (the three): the first step creates AdamW's moments
# in its update, so only the later ones hold them through a whole step.
GRPO_STEPS = 3
VARIANTS = {  # the policy section's variants, with the config of each for its plan
    "LoRA rank 32, float32 weights (its frozen base bf16)": {"training.lora_rank": 32},
    "full fine-tuning, float32 weights": {},
    "full fine-tuning, bf16 weights": {"training.param_dtype": "bf16"},
}


@dataclass(frozen=True)
class Pass:
    """What one run measures (`--pass`): the imagination's env counts (their first ones; the
    time split at the middle one), whether the largest again with `world_model.vae_batch`, the
    policy's variants and the GRPO steps."""

    env_counts: slice
    vae_row: bool
    split: bool
    variants: tuple[str, ...]
    grpo_steps: int
    budget_s: float  # --budget-s's default
    # Seconds the later sections are promised (guesses on the slow side): the imagination and
    # policy sections stop where going on would eat into them, so that the GRPO steps, which the
    # memory check needs, always run
    policy_reserve_s: float
    grpo_reserve_s: float
    imagine: bool = True  # the imagination section at all


LORA, FULL32, BF16 = VARIANTS
PASSES = {
    "all": Pass(slice(None), True, True, (LORA, FULL32, BF16), GRPO_STEPS, 420.0, 100.0, 180.0),
    # what the memory plan needs most, first, in about 4 minutes of a 15-minute device budget:
    # the whole steps' peaks beside the plan, the micro-batches of LoRA and bf16 weights, and
    # imagination at its smallest count (the steps' rate)
    "first": Pass(slice(0, 1), False, False, (LORA, BF16), 2, 240.0, 50.0, 120.0),
    "rest": Pass(slice(1, None), True, True, (FULL32,), 0, 300.0, 40.0, 0.0),
    # the three micro-batches alone (about 2 minutes): a recheck of the plan's policy rows
    "policy": Pass(slice(0), False, False, (LORA, FULL32, BF16), 0, 180.0, 0.0, 0.0, False),
}


def errors(result: dict) -> list[str]:
    """The errors other than out of memory that the result's rows record (a failed time split
    too)."""
    rows = [*result.get("imagination", []), *result.get("policy", [])]
    rows.append(result.get("grpo_step", {}))
    found = [r.get(key) for r in rows for key in ("error", "split_error")]
    return [e for e in found if e not in (None, OOM)]


# -- 1. imagination -------------------------------------------------------------------------------


def world_model(
    backend: str,
    size: str,
    steps: int,
    device: torch.device,
    dtype: torch.dtype,
    frames: tuple[int, int] = (4, 8),
    image: int | None = None,
):
    """A random-weight world model of the backend's full (or tiny) config, built on `device`,
    for windows of `frames` (context frames, chunk: LIBERO's presets' 4 and 8) of `image` x
    `image` frames (default: the size's)."""
    if backend == "wan":
        from wmrl_cli.world_models.wan import WanWorldModel as model_cls
        from wmrl_cli.world_models.wan import WanWorldModelConfig as config_cls
    else:
        from wmrl_cli.world_models.opensora import OpenSoraWorldModel as model_cls
        from wmrl_cli.world_models.opensora import OpenSoraWorldModelConfig as config_cls
    config = config_cls.full() if size == "full" else config_cls.tiny()
    config.transformer.action_dim = 7
    config.height = config.width = image or SIZES[size].image
    config.num_inference_steps = steps
    config.num_context_frames, config.num_target_frames = frames
    with torch.device(device):
        model = model_cls(config)
    return model.place(dtype=dtype).eval()  # float32 where diffusers keeps it, as imagination loads


@torch.no_grad()
def reset_episodes(
    model, envs: int, image: int, seed: int, chunk: int = 8
) -> tuple[torch.Tensor, Any]:
    """`envs` episodes reset from random frames: (one chunk's actions, the generator)."""
    gen = torch.Generator().manual_seed(seed)
    k = model.num_context_frames
    frames = torch.randint(0, 256, (envs, k, image, image, 3), dtype=torch.uint8, generator=gen)
    model.reset_context(frames[:, 0], frames, torch.zeros(envs, k, 7))
    return torch.rand(envs, chunk, 7, generator=gen) * 2 - 1, gen


@torch.no_grad()
def predict_seconds(model, actions: torch.Tensor, gen: Any) -> float:
    sync(model.device)  # the reset's context encode (asynchronous on a GPU) is not the chunk's
    start = time.perf_counter()
    model.predict(actions, generator=gen)
    sync(model.device)
    return time.perf_counter() - start


def imagine_chunk(model, envs: int, image: int, seed: int = 0, chunk: int = 8) -> float:
    """Seconds to predict one chunk of `envs` episodes (reset first, not timed)."""
    return predict_seconds(model, *reset_episodes(model, envs, image, seed, chunk))


def time_split(model, envs: int, image: int) -> dict[str, float]:
    """Where one chunk's time goes: the fraction each part of the world model takes, and the
    rest (noise, the flow-matching updates, conversions: `other`), of a chunk timed with a
    synchronization around each part's call (the reset before it not counted)."""
    actions, gen = reset_episodes(model, envs, image, seed=2)
    with part_times(model, model.device) as split:
        seconds = predict_seconds(model, actions, gen)
    fractions = {part: t / seconds for part, t in split.items()}
    fractions["other"] = 1.0 - sum(fractions.values())
    return {"split_s": seconds, **{f"{part}_frac": f for part, f in fractions.items()}}


def imagination(
    size: str, device: torch.device, budget: Budget, dtype: torch.dtype, todo: Pass | None = None
) -> list:
    s, rows, todo = SIZES[size], [], todo or PASSES["all"]
    counts = s.env_counts[todo.env_counts] or s.env_counts[-1:]
    for backend, steps in (("wan", s.wan_steps), ("opensora", s.opensora_steps)):
        if budget.left() < 60:
            rows.append({"backend": backend, "skipped": "time budget"})
            continue
        start = time.perf_counter()
        try:
            model = world_model(backend, size, steps, device, dtype)
        except Exception as exc:  # recorded; the other backend still runs
            rows.append({"backend": backend, "steps": steps, "error": failure(exc)})
            free(device)
            continue
        built = {"params": sum(p.numel() for p in model.parameters())}
        built["build_s"] = time.perf_counter() - start
        per_frame = None
        reserve = todo.policy_reserve_s + todo.grpo_reserve_s
        # every env count with the whole batch through the VAE at once, then the largest with
        # world_model.vae_batch (the memory plan's remedy): what bounding the decode costs
        runs = [(envs, None) for envs in counts] + [(counts[-1], VAE_BATCH)] * todo.vae_row
        split_envs = counts[len(counts) // 2] if todo.split else None  # the middle count
        for envs, vae_batch in runs:
            model.vae_batch = vae_batch
            row: dict[str, Any] = {"backend": backend, "steps": steps, "envs": envs, **built}
            row["vae_batch"] = vae_batch
            # a warm-up chunk and a timed one; skipped if they would not fit what is left
            if per_frame is not None and 2.5 * per_frame * envs * 8 > budget.left() - reserve:
                rows.append({**row, "skipped": "time budget"})
                continue
            try:
                imagine_chunk(model, envs, s.image)  # warm-up (kernels, allocator)
                reset_peak(device)
                with Utilization(device) as util:
                    seconds = imagine_chunk(model, envs, s.image, seed=1)
                per_frame = seconds / (envs * 8)
                row.update(frames_per_s=envs * 8 / seconds, **peaks(device))
                row["gpu_util_pct"] = util.mean
            except Exception as exc:  # recorded; the next env count still runs
                row.update(error=failure(exc), **peaks(device))
                drop_caches(model)
            # the split at once, on the warm allocator, if it fits
            fits = per_frame is not None and 1.5 * per_frame * envs * 8 < budget.left() - reserve
            if (envs, vae_batch) == (split_envs, None) and "frames_per_s" in row and fits:
                try:
                    row.update(time_split(model, envs, s.image))
                except Exception as exc:  # recorded apart: the row's frames/s stand
                    row["split_error"] = failure(exc)
                    drop_caches(model)
            rows.append(row)
            free(device)
        del model
        free(device)
    return rows


# -- 2. the policy's micro-batch ------------------------------------------------------------------


def build_policy(size: str, device: torch.device):
    """A random-weight OpenVLA-OFT (7.5 B full config, float32 weights; or the tiny config)
    on `device`, with a word tokenizer and action statistics."""
    from wmrl_cli.policies.config import full_config, tiny_config
    from wmrl_cli.policies.normalization import compute_statistics
    from wmrl_cli.policies.openvla_oft import OpenVLAOFT
    from wmrl_cli.policies.text_tokenizer import build_word_tokenizer

    tokenizer = build_word_tokenizer([INSTRUCTION])
    if size == "full":
        config = full_config()
    else:
        config = tiny_config(len(tokenizer), image_size=SIZES[size].image, llm_hidden=64)
    config.dtype = "float32"
    stats = {"libero": compute_statistics(np.random.default_rng(0).uniform(-1, 1, (64, 7)))}
    with torch.device(device):
        return OpenVLAOFT(config, tokenizer=tokenizer, dataset_statistics=stats)


def micro_batch(model, sequences: int, image: int) -> float:
    """Seconds of one forward and backward of a GRPO-shaped micro-batch (bf16 autocast)."""
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (sequences, image, image, 3), dtype=np.uint8)
    first = model.action_tokenizer.first_token_id
    tokens = torch.from_numpy(rng.integers(first, first + 256, (sequences, 8, 7)))
    advantages = torch.from_numpy(rng.normal(size=(sequences, 1, 1))).float()
    device = model.device
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device.type == "cuda"
        else contextlib.nullcontext()  # the CPU (float32) and the meta device (shape tests)
    )
    start = time.perf_counter()
    with autocast:
        out = model(images, [INSTRUCTION] * sequences, tokens, 1.6)
    loss = -(out.log_probs * advantages.to(out.log_probs.device)).mean()
    loss.backward()
    sync(device)
    return time.perf_counter() - start


def plan_for(cfg, model, device: torch.device, world_model_params: int = 0):
    from wmrl_cli.memory.budget import rl_memory_plan

    cfg.training.memory_budget_gb = 1e6  # the estimate, whatever the device holds
    return rl_memory_plan(cfg, model.config, world_model_params, 0, 1, str(device)).plan


def policy_section(
    size: str, device: torch.device, budget: Budget, preset: Any, todo: Pass | None = None
) -> list:
    from wmrl_cli.training.sharding import enable_activation_checkpointing

    s, rows, todo = SIZES[size], [], todo or PASSES["all"]
    if budget.left() < 40 + todo.grpo_reserve_s:
        return [{"variant": "all", "skipped": "time budget"}]
    start = time.perf_counter()
    try:
        model = build_policy(size, device)
        model.train()
        enable_activation_checkpointing(model)
    except Exception as exc:
        free(device)
        return [{"variant": "all", "error": failure(exc)}]
    build_s = time.perf_counter() - start
    for name in todo.variants:
        overrides = VARIANTS[name]
        row: dict[str, Any] = {"variant": name, "sequences": s.sequences, "build_s": build_s}
        try:
            # bf16 compute on a GPU (the trainer's training.bf16); float32 on a CPU
            prepare_variant(model, name, torch.bfloat16 if device.type == "cuda" else None)
            cfg = preset.model_copy(deep=True)
            for key, value in overrides.items():
                section, attr = key.split(".")
                setattr(getattr(cfg, section), attr, value)
            plan = plan_for(cfg, model, device)  # the micro-batch alone: no AdamW, no world model
            row["plan_gib"] = plan.update - plan.row("AdamW")[1] - plan.row("world model")[1]
            if budget.left() < 30 + todo.grpo_reserve_s:
                rows.append({**row, "skipped": "time budget"})
                continue
            micro_batch(model, s.sequences, s.image)  # warm-up
            model.zero_grad(set_to_none=True)
            reset_peak(device)
            with Utilization(device) as util:
                row["seconds"] = micro_batch(model, s.sequences, s.image)
            row.update(gpu_util_pct=util.mean, **peaks(device))
        except Exception as exc:  # recorded (out of memory: expected of one variant); next one
            row.update(error=failure(exc), **peaks(device))
        model.zero_grad(set_to_none=True)
        free(device)
        rows.append(row)
    del model
    free(device)
    return rows


def prepare_variant(model, name: str, frozen: torch.dtype | None) -> None:
    """The policy's weights as the trainer holds them in the variant `name`: LoRA's adapters
    (and the trained projector) in float32 over a frozen base in the compute dtype `frozen`
    (`PolicySharding.cast`: under bf16 compute the base needs no float32 master; None: float32),
    or every weight trained, in float32 or in bf16. Until 2026-11-29 the LoRA variant kept its
    frozen base in float32, which the trainer never does: its H200 peak (37.8 GiB) stood 17 GiB
    above a plan of the trainer's layout."""
    from wmrl_cli.policies.config import LoraSpec
    from wmrl_cli.policies.lora import apply_lora, lora_active

    if lora_active(model):
        model.language_model = model.language_model.unload()
        model.config.lora = None
    model.requires_grad_(True)
    if name == LORA:
        apply_lora(model, LoraSpec(rank=32, alpha=32))
    for param in model.parameters():
        if name == BF16:
            dtype = torch.bfloat16
        else:
            dtype = torch.float32 if param.requires_grad else frozen or torch.float32
        param.data = param.data.to(dtype)


# -- 3. one GRPO step -------------------------------------------------------------------------


def grpo_step(
    size: str,
    device: torch.device,
    budget: Budget,
    out: Path,
    fps: float | None,
    grpo_steps: int = GRPO_STEPS,
) -> dict:
    """`grpo_steps` `PolicyTrainer.train_step`s of wan-spatial-grpo with LoRA in a random-weight
    imagined env; episodes shortened where imagination at `fps` would not fit the budget."""
    s = SIZES[size]
    left = budget.left() - 60 - 20 * grpo_steps  # building the models; the updates
    # imagined frames the steps need, at the measured rate (a slow guess where none was)
    frames_per_step = int(left * (fps or FALLBACK_FPS) / (s.step_envs * grpo_steps))
    steps = min(s.episode_steps, max(8, frames_per_step // 8 * 8))
    if left < 30:
        return {"skipped": "time budget"}
    row: dict[str, Any] = {"envs": s.step_envs, "episode_steps": steps, "lora_rank": 32}
    try:
        _grpo_steps(size, device, out, steps, row, budget, grpo_steps)
    except Exception as exc:  # out of memory or not: recorded, the files still written
        row["error"] = failure(exc)
        for key, value in peaks(device).items():  # the failing step's, or the larger before it
            if value is not None:
                row[key] = max(value, row.get(key) or 0.0)
    return row


def _grpo_steps(
    size: str,
    device: torch.device,
    out: Path,
    steps: int,
    row: dict,
    budget: Budget,
    grpo_steps: int = GRPO_STEPS,
) -> None:
    """`grpo_step`'s models, env, trainer and `grpo_steps` steps of episodes of at most `steps`
    env steps, filling `row` as it goes: each step's seconds, phases and peak in
    `row["steps"]`; the row's peak is the largest."""
    from accelerate import Accelerator

    from wmrl_cli.config import resolve_config
    from wmrl_cli.data.reset_set import ResetEntry
    from wmrl_cli.envs.imagined import ImaginedEnv
    from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
    from wmrl_cli.rl.trainer import PolicyTrainer

    s = SIZES[size]
    cfg = resolve_config(
        "wan-spatial-grpo",
        overrides=[
            "training.lora_rank=32",
            f"algorithm.num_envs={s.step_envs}",
            f"algorithm.group_size={s.step_envs}",
            f"algorithm.max_episode_steps={steps}",
            "algorithm.rollout_epochs=1",
            "algorithm.optimizer_steps=1",
            "algorithm.filter_groups=false",
            "algorithm.eval_trials=0",
            f"world_model.num_inference_steps={s.wan_steps}",
            "logging.tensorboard=false",
            "logging.progress=false",
            "training.memory_budget_gb=100000",  # measured, whatever the plan says
        ],
    )
    start = time.perf_counter()
    wm_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    wm = world_model("wan", size, s.wan_steps, device, wm_dtype)
    reward = build_resnet_reward_model(ResnetRewConfig(width=64 if size == "full" else 4))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (5, s.image, s.image, 3), dtype=np.uint8)
    entry = ResetEntry(frames[0], frames[1:], np.zeros((4, 7), np.float32), INSTRUCTION, 0)
    env = ImaginedEnv(
        wm, reward.to(device).eval(), [entry], ["task0"], s.step_envs, steps, 0.9,
        use_rel_reward=True, round_scores=True, zero_first_baseline=True, noise_seed=0,
    )  # fmt: skip
    policy = build_policy(size, device)
    accelerator = Accelerator(cpu=device.type != "cuda", mixed_precision="bf16")
    with tempfile.TemporaryDirectory(dir=out) as run_dir:
        trainer = PolicyTrainer(cfg, Path(run_dir), lambda *_: policy, env, accelerator)
        row["build_s"] = time.perf_counter() - start  # both models, LoRA, the plan
        plan = trainer.memory.plan
        row.update(plan_gib=plan.peak, plan_rollout_gib=plan.rollout)
        row["plan_update_gib"] = plan.update
        row["steps"] = []
        try:
            while len(row["steps"]) < grpo_steps:
                done = row["steps"]
                if done and budget.left() < 1.2 * done[-1]["seconds"]:
                    row["skipped"] = f"time budget after {len(done)} step(s)"
                    break
                reset_peak(device)
                start = time.perf_counter()
                with Utilization(device) as util:
                    metrics = trainer.train_step().metrics
                trainer.step += 1
                step = {"seconds": time.perf_counter() - start, **peaks(device)}
                step["gpu_util_pct"] = util.mean
                for key in ("time/rollout", "time/world_model", "time/update"):
                    step[key.split("/")[1] + "_s"] = metrics.get(key)
                done.append(step)
                row.update(_summary(done))  # so far: a failed step keeps the ones before it
        finally:
            trainer.logger.close()


def _summary(steps: list[dict]) -> dict:
    """The GRPO row's figures from its steps: the last step's times (compiled kernels and the
    optimizer's state in place), the largest peak."""
    last = steps[-1]
    row = {k: last[k] for k in ("seconds", "rollout_s", "world_model_s", "update_s")}
    row["gpu_util_pct"] = last["gpu_util_pct"]
    for key in ("peak_gib", "peak_reserved_gib"):
        values = [s[key] for s in steps if s[key] is not None]
        row[key] = max(values) if values else None
    return row


# -- output -----------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.0f}%"


def markdown(result: dict) -> str:
    lines = [
        f"# gpu_fullsize ({result['size']}) on {result['device']}",
        "",
        f"torch {result['torch']}; {result['wall_s']:.0f} s in all"
        + ("" if result.get("done") else " (cut short: the sections not written did not run)"),
        "",
        "| world model | steps | envs | VAE batch | frames/s | peak GiB | GPU util % | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result.get("imagination", []):
        lines.append(
            f"| {r['backend']} | {r.get('steps', '-')} | {r.get('envs', '-')} | "
            f"{r.get('vae_batch') or 'all'} | "
            f"{_fmt(r.get('frames_per_s'))} | {_fmt(r.get('peak_gib'))} | "
            f"{_fmt(r.get('gpu_util_pct'), 0)} | {r.get('skipped') or r.get('error') or ''} |"
        )
    split = [r for r in result.get("imagination", []) if "split_s" in r or "split_error" in r]
    if split:
        lines += [
            "",
            "| where a chunk's time goes | envs | s | denoiser | VAE decode | VAE encode | other "
            "| note |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for r in split:
        shares = [_pct(r.get(f"{part}_frac")) for part in ("denoiser", "decode", "encode", "other")]
        lines.append(
            f"| {r['backend']} | {r['envs']} | {_fmt(r.get('split_s'), 2)} | "
            + " | ".join(shares)
            + f" | {r.get('split_error', '')} |"
        )
    lines += [
        "",
        "| policy micro-batch | sequences | s | peak GiB | plan GiB | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.get("policy", []):
        lines.append(
            f"| {r['variant']} | {r.get('sequences', '-')} | {_fmt(r.get('seconds'), 2)} | "
            f"{_fmt(r.get('peak_gib'))} | {_fmt(r.get('plan_gib'))} | "
            f"{r.get('skipped') or r.get('error') or ''} |"
        )
    g = result.get("grpo_step", {})
    lines += [
        "",
        "| GRPO steps, the last one's times | steps | envs | episode steps | s | rollout s "
        "| update s | peak GiB | plan GiB | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| wan-spatial-grpo, LoRA 32 | {len(g.get('steps', []))} | {g.get('envs', '-')} | "
        f"{g.get('episode_steps', '-')} | "
        f"{_fmt(g.get('seconds'))} | {_fmt(g.get('rollout_s'))} | {_fmt(g.get('update_s'))} | "
        f"{_fmt(g.get('peak_gib'))} | {_fmt(g.get('plan_gib'))} | "
        f"{g.get('skipped') or g.get('error') or ''} |",
    ]
    return "\n".join(lines) + "\n"


def run(size: str, out: Path, budget_s: float, todo: Pass = PASSES["all"]) -> dict:
    from wmrl_cli.config import resolve_config

    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    budget = Budget(budget_s)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # world_model.dtype auto
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result: dict[str, Any] = {"size": size, "device": name, "torch": torch.__version__}
    if device.type == "cuda":
        result["device_gib"] = torch.cuda.mem_get_info(device)[1] / 2**30

    def section(name: str, measure: Callable[[], Any], failed: Any) -> None:
        """Run one section (an error that escapes it becomes `failed`'s row), then write both
        files with what there is so far."""
        try:
            result[name] = measure()
        except Exception as exc:
            result[name] = failed(failure(exc))
        free(device)
        result["wall_s"] = time.monotonic() - budget.start
        (out / "gpu_fullsize.json").write_text(json.dumps(result, indent=1))
        (out / "gpu_fullsize.md").write_text(markdown(result))

    section(
        "imagination",
        lambda: imagination(size, device, budget, dtype, todo) if todo.imagine else [],
        lambda error: [{"backend": "all", "error": error}],
    )
    preset = resolve_config("wan-spatial-grpo")
    section(
        "policy",
        lambda: policy_section(size, device, budget, preset, todo),
        lambda error: [{"variant": "all", "error": error}],
    )
    wan = [r for r in result["imagination"] if r["backend"] == "wan" and "frames_per_s" in r]
    fps = min((r["frames_per_s"] for r in wan), default=None)
    result["done"] = True  # set before the last write
    section(
        "grpo_step",
        lambda: (
            grpo_step(size, device, budget, out, fps, todo.grpo_steps)
            if todo.grpo_steps
            else {"skipped": "not in this pass"}
        ),
        lambda error: {"error": error},
    )
    return result


# What the sections import, beyond torch and numpy: checked before any model is built.
NEEDED = (
    "pydantic",
    "diffusers",
    "transformers",
    "peft",
    "accelerate",
    "wmrl_cli.config",
    "wmrl_cli.world_models.wan",
    "wmrl_cli.world_models.opensora",
    "wmrl_cli.policies.lora",
    "wmrl_cli.rl.trainer",
)


def preflight() -> list[str]:
    """What this Python lacks of what the sections need, found in seconds rather than after
    minutes of measuring: a missing package, or a transformers older than the project's 5.24
    (no `activation_checkpointing_enable`, which the policy's checkpointing calls)."""
    problems = []
    for name in NEEDED:
        try:
            importlib.import_module(name)
        except Exception as exc:
            problems.append(f"import {name}: {type(exc).__name__}: {exc}")
    try:
        import transformers

        if not hasattr(transformers.PreTrainedModel, "activation_checkpointing_enable"):
            problems.append(f"transformers {transformers.__version__} is older than 5.24")
    except ImportError:
        pass  # named above
    return problems


def main() -> None:
    parser = harness.parser(__doc__, out=True)
    parser.add_argument("--size", default="full", choices=sorted(SIZES))
    parser.add_argument(
        "--pass",
        dest="todo",
        default="all",
        choices=sorted(PASSES),
        help="first: what the memory plan needs most (about 4 minutes); rest: the other rows; "
        "policy: the three micro-batches alone",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds the sections may take (default: all 420, first 240, rest 300)",
    )
    args = parser.parse_args()
    todo = PASSES[args.todo]
    missing = preflight()
    if missing:
        sys.exit("gpu_fullsize: this Python cannot run the sections:\n  " + "\n  ".join(missing))
    result = run(args.size, args.out, args.budget_s or todo.budget_s, todo)
    harness.write(args, "gpu_fullsize", result, markdown(result))  # the files run() wrote, again
    failed = errors(result)
    if failed:  # both files are written: what did run is kept
        sys.exit(f"{len(failed)} measurement(s) failed: " + "; ".join(failed))


if __name__ == "__main__":
    harness.main(main)
