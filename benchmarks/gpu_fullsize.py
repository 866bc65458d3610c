"""Full-size shapes on one GPU: imagination, the policy's GRPO micro-batch, one GRPO step.

    python benchmarks/gpu_fullsize.py --out DIR [--size full|tiny] [--budget-s 390]

Random weights built directly on the device (no download; speed and memory do not depend on
the weights), in three sections, each guarded by what is left of `--budget-s` (a measurement
that would not finish in time is recorded as skipped, with why):

1. imagination: the Wan2.2-TI2V-5B-config world model at 256x256 with 5 sampling steps and
   the OpenSora-1.1B-config one with 10 (RLinf's settings), in bf16 (`world_model.dtype`
   auto on a GPU): frames/s at several env counts, peak memory, GPU utilization;
2. policy: the 7.5 B OpenVLA-OFT forward and backward of one GRPO micro-batch (32 sequences:
   one trajectory of 32 chunks, `algorithm.minibatch_trajectories=1`, activation
   checkpointing, bf16 autocast), with LoRA rank 32 on float32 weights, with full fine-tuning
   on float32 weights (may run out of memory on one H100: caught and recorded) and on bf16
   weights (RLinf's): time, peak memory, the memory plan's estimate beside it;
3. one whole GRPO step (rollout, advantages, update) of `wan-spatial-grpo` with LoRA rank 32
   at a reduced `algorithm.num_envs` (one group, group filter off so that the update runs),
   through `PolicyTrainer.train_step`, the memory plan's estimate beside the measured peak.

`--size tiny` runs the same code on the tiny configs (32x32 frames, 1 sampling step), on the
CPU in the test suite (tests/benchmarks/test_gpu_fullsize_script.py). Writes
DIR/gpu_fullsize.json and DIR/gpu_fullsize.md. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

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


SIZES = {
    "full": Size(256, 5, 10, (8, 32, 64), 32, 8, 256),
    "tiny": Size(32, 1, 1, (2,), 4, 2, 16),
}


@dataclass
class Budget:
    total: float
    start: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.total - (time.monotonic() - self.start)


class Utilization:
    """GPU utilization (%) sampled every 0.2 s while inside (torch.cuda.utilization, else
    nvidia-smi); None off a GPU or where neither answers."""

    def __init__(self, device: torch.device) -> None:
        self.on = device.type == "cuda"
        self.samples: list[float] = []
        self._stop = threading.Event()

    @staticmethod
    def read() -> float | None:
        try:
            return float(torch.cuda.utilization())
        except Exception:  # no pynvml: ask nvidia-smi
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                return float(out.split()[0])
            except Exception:
                return None

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            value = self.read()
            if value is None:
                return
            self.samples.append(value)

    def __enter__(self) -> Utilization:
        if self.on:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.on:
            self._stop.set()
            self._thread.join()

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: torch.device) -> float | None:
    """GiB the tensors took at most since `reset_peak` (the allocator reserves somewhat more:
    `peaks`)."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def peaks(device: torch.device) -> dict[str, float | None]:
    reserved = torch.cuda.max_memory_reserved(device) / 2**30 if device.type == "cuda" else None
    return {"peak_gib": peak_gib(device), "peak_reserved_gib": reserved}


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc)


# -- 1. imagination -------------------------------------------------------------------------------


def world_model(backend: str, size: str, steps: int, device: torch.device, dtype: torch.dtype):
    """A random-weight world model of the backend's full (or tiny) config, built on `device`."""
    if backend == "wan":
        from wmrl_cli.world_models.wan import WanWorldModel as model_cls
        from wmrl_cli.world_models.wan import WanWorldModelConfig as config_cls
    else:
        from wmrl_cli.world_models.opensora import OpenSoraWorldModel as model_cls
        from wmrl_cli.world_models.opensora import OpenSoraWorldModelConfig as config_cls
    config = config_cls.full() if size == "full" else config_cls.tiny()
    config.transformer.action_dim = 7
    config.height = config.width = SIZES[size].image
    config.num_inference_steps = steps
    with torch.device(device):
        model = model_cls(config)
    return model.to(dtype).eval()


@torch.no_grad()
def imagine_chunk(model, envs: int, image: int, seed: int = 0) -> float:
    """Seconds to reset `envs` episodes and predict one 8-frame chunk."""
    gen = torch.Generator().manual_seed(seed)
    k = model.num_context_frames
    frames = torch.randint(0, 256, (envs, k, image, image, 3), dtype=torch.uint8, generator=gen)
    model.reset_context(frames[:, 0], frames, torch.zeros(envs, k, 7))
    actions = torch.rand(envs, 8, 7, generator=gen) * 2 - 1
    start = time.perf_counter()
    model.predict(actions, generator=gen)
    sync(model.device)
    return time.perf_counter() - start


def imagination(size: str, device: torch.device, budget: Budget, dtype: torch.dtype) -> list:
    s, rows = SIZES[size], []
    for backend, steps in (("wan", s.wan_steps), ("opensora", s.opensora_steps)):
        if budget.left() < 60:
            rows.append({"backend": backend, "skipped": "time budget"})
            continue
        model = world_model(backend, size, steps, device, dtype)
        params = sum(p.numel() for p in model.parameters())
        per_frame = None
        for envs in s.env_counts:
            row: dict[str, Any] = {"backend": backend, "steps": steps, "envs": envs}
            row["params"] = params
            # a warm-up chunk and a timed one; skipped if they would not fit what is left
            if per_frame is not None and 2.5 * per_frame * envs * 8 > budget.left() - 200:
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
            except RuntimeError as exc:
                if not is_oom(exc):
                    raise
                row["error"] = "out of memory"
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
    start = time.perf_counter()
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        out = model(images, [INSTRUCTION] * sequences, tokens, 1.6)
    loss = -(out.log_probs * advantages.to(out.log_probs.device)).mean()
    loss.backward()
    sync(device)
    return time.perf_counter() - start


def plan_for(cfg, model, device: torch.device, world_model_params: int = 0):
    from wmrl_cli.training.memory_plan import rl_memory_plan

    cfg.training.memory_budget_gb = 1e6  # the estimate, whatever the device holds
    return rl_memory_plan(cfg, model.config, world_model_params, 0, 1, str(device)).plan


def policy_section(size: str, device: torch.device, budget: Budget, preset: Any) -> list:
    from wmrl_cli.policies.config import LoraSpec
    from wmrl_cli.policies.lora import apply_lora
    from wmrl_cli.training.sharding import enable_activation_checkpointing

    s, rows = SIZES[size], []
    if budget.left() < 150:
        return [{"variant": "all", "skipped": "time budget"}]
    model = build_policy(size, device)
    model.train()
    enable_activation_checkpointing(model)
    variants = {  # the config of each variant, for its plan
        "LoRA rank 32, float32 weights": {"training.lora_rank": 32},
        "full fine-tuning, float32 weights": {},
        "full fine-tuning, bf16 weights": {"training.param_dtype": "bf16"},
    }
    for name, overrides in variants.items():
        row: dict[str, Any] = {"variant": name, "sequences": s.sequences}
        if "LoRA" in name:
            apply_lora(model, LoraSpec(rank=32, alpha=32))
        elif "bf16" in name:
            _to_bf16(model)
        else:
            _unload_lora(model)
        cfg = preset.model_copy(deep=True)
        for key, value in overrides.items():
            section, attr = key.split(".")
            setattr(getattr(cfg, section), attr, value)
        plan = plan_for(cfg, model, device)  # the micro-batch alone: no optimizer, no world model
        row["plan_gib"] = plan.update - plan.row("AdamW")[1] - plan.row("world model")[1]
        if budget.left() < 90:
            rows.append({**row, "skipped": "time budget"})
            continue
        try:
            micro_batch(model, s.sequences, s.image)  # warm-up
            model.zero_grad(set_to_none=True)
            reset_peak(device)
            with Utilization(device) as util:
                row["seconds"] = micro_batch(model, s.sequences, s.image)
            row.update(gpu_util_pct=util.mean, **peaks(device))
        except RuntimeError as exc:
            if not is_oom(exc):
                raise
            row["error"] = "out of memory"
        model.zero_grad(set_to_none=True)
        free(device)
        rows.append(row)
    del model
    free(device)
    return rows


def _unload_lora(model) -> None:
    from wmrl_cli.policies.lora import lora_active

    if lora_active(model):
        model.language_model = model.language_model.unload()
        model.config.lora = None
    model.requires_grad_(True)


def _to_bf16(model) -> None:
    for param in model.parameters():
        param.data = param.data.to(torch.bfloat16)


# -- 3. one GRPO step -------------------------------------------------------------------------


def grpo_step(
    size: str, device: torch.device, budget: Budget, out: Path, fps: float | None
) -> dict:
    """One `PolicyTrainer.train_step` of wan-spatial-grpo with LoRA in a random-weight
    imagined env; episodes shortened where imagination at `fps` would not fit the budget."""
    from accelerate import Accelerator

    from wmrl_cli.config import resolve_config
    from wmrl_cli.data.reset_set import ResetEntry
    from wmrl_cli.envs.imagined import ImaginedEnv
    from wmrl_cli.rewards.resnet import ResnetRewConfig, build_resnet_reward_model
    from wmrl_cli.rl.trainer import PolicyTrainer

    s = SIZES[size]
    left = budget.left() - 90  # building the models, the update
    steps = s.episode_steps
    if fps:  # imagined frames this step needs, at the measured rate
        steps = min(steps, max(8, int(left * fps / s.step_envs) // 8 * 8))
    if left < 30:
        return {"skipped": "time budget"}
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
    row: dict[str, Any] = {"envs": s.step_envs, "episode_steps": steps, "lora_rank": 32}
    try:
        with tempfile.TemporaryDirectory(dir=out) as run_dir:
            trainer = PolicyTrainer(cfg, Path(run_dir), policy, env, accelerator)
            plan = trainer.memory.plan
            row.update(plan_gib=plan.peak, plan_rollout_gib=plan.rollout)
            row["plan_update_gib"] = plan.update
            reset_peak(device)
            start = time.perf_counter()
            with Utilization(device) as util:
                metrics = trainer.train_step().metrics
            row.update(seconds=time.perf_counter() - start, **peaks(device))
            row["gpu_util_pct"] = util.mean
            for key in ("time/rollout", "time/world_model", "time/update"):
                row[key.split("/")[1] + "_s"] = metrics.get(key)
            trainer.logger.close()
    except RuntimeError as exc:
        if not is_oom(exc):
            raise
        row["error"] = "out of memory"
    return row


# -- output -----------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown(result: dict) -> str:
    lines = [
        f"# gpu_fullsize ({result['size']}) on {result['device']}",
        "",
        f"torch {result['torch']}; {result['wall_s']:.0f} s in all",
        "",
        "| world model | steps | envs | frames/s | peak GiB | GPU util % | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["imagination"]:
        lines.append(
            f"| {r['backend']} | {r.get('steps', '-')} | {r.get('envs', '-')} | "
            f"{_fmt(r.get('frames_per_s'))} | {_fmt(r.get('peak_gib'))} | "
            f"{_fmt(r.get('gpu_util_pct'), 0)} | {r.get('skipped') or r.get('error') or ''} |"
        )
    lines += [
        "",
        "| policy micro-batch | sequences | s | peak GiB | plan GiB | note |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["policy"]:
        lines.append(
            f"| {r['variant']} | {r.get('sequences', '-')} | {_fmt(r.get('seconds'), 2)} | "
            f"{_fmt(r.get('peak_gib'))} | {_fmt(r.get('plan_gib'))} | "
            f"{r.get('skipped') or r.get('error') or ''} |"
        )
    g = result["grpo_step"]
    lines += [
        "",
        "| GRPO step | envs | episode steps | s | rollout s | update s | peak GiB | plan GiB "
        "| note |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| wan-spatial-grpo, LoRA 32 | {g.get('envs', '-')} | {g.get('episode_steps', '-')} | "
        f"{_fmt(g.get('seconds'))} | {_fmt(g.get('rollout_s'))} | {_fmt(g.get('update_s'))} | "
        f"{_fmt(g.get('peak_gib'))} | {_fmt(g.get('plan_gib'))} | "
        f"{g.get('skipped') or g.get('error') or ''} |",
    ]
    return "\n".join(lines) + "\n"


def run(size: str, out: Path, budget_s: float) -> dict:
    from wmrl_cli.config import resolve_config

    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    budget = Budget(budget_s)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # world_model.dtype auto
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    result: dict[str, Any] = {"size": size, "device": name, "torch": torch.__version__}
    if device.type == "cuda":
        result["device_gib"] = torch.cuda.mem_get_info(device)[1] / 2**30
    result["imagination"] = imagination(size, device, budget, dtype)
    preset = resolve_config("wan-spatial-grpo")
    result["policy"] = policy_section(size, device, budget, preset)
    wan = [r for r in result["imagination"] if r["backend"] == "wan" and "frames_per_s" in r]
    fps = min((r["frames_per_s"] for r in wan), default=None)
    result["grpo_step"] = grpo_step(size, device, budget, out, fps)
    result["wall_s"] = time.monotonic() - budget.start
    (out / "gpu_fullsize.json").write_text(json.dumps(result, indent=1))
    (out / "gpu_fullsize.md").write_text(markdown(result))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--size", default="full", choices=sorted(SIZES))
    parser.add_argument(
        "--budget-s",
        type=float,
        default=390.0,
        help="seconds the sections may take (default 390: with start-up, under 8 minutes)",
    )
    args = parser.parse_args()
    result = run(args.size, args.out, args.budget_s)
    print(markdown(result))


if __name__ == "__main__":
    main()
