"""One update of the tiny policy through `training/sharding.py`, for tests/test_sharding.py.

    python -m tests.helpers.sharding_worker OUT VARIANT...              one process (replicated)
    python -m torch.distributed.run --nproc_per_node 2 -m tests.helpers.sharding_worker OUT ...

VARIANT: full (float32), bf16 (float32 weights, bf16 compute: autocast on one process, FSDP's
mixed precision on two) or lora (adapters over a bf16 base, bf16 compute, activation
checkpointing, float32 moments). The same seed builds the same policy; a fixed batch of 4
samples is split evenly over the ranks, each rank's loss is the mean over its samples (so the
mean over ranks is the loss of the whole batch), one AdamW step follows. Writes
OUT/result_<world>_<variant>.pt: the loss, the KL reference's log-probs against the policy's
(before the step), the clipped gradient's global norm and the whole gradients, the updated
weights (gathered), the parameters' dtypes and the actions each rank decodes afterwards, rank
0 making three policy calls and the others one (the rollout pattern: no collective may run
per call).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch


def tiny_policy(lora: bool):
    from wmrl_cli.policies.config import LoraSpec, tiny_config
    from wmrl_cli.policies.lora import apply_lora
    from wmrl_cli.policies.normalization import compute_statistics
    from wmrl_cli.policies.openvla_oft import OpenVLAOFT
    from wmrl_cli.policies.text_tokenizer import build_word_tokenizer

    torch.manual_seed(0)
    tokenizer = build_word_tokenizer(["pick the cube", "open the door"])
    config = tiny_config(
        len(tokenizer), image_size=32, vision_hidden=16, vision_layers=2, llm_hidden=32
    )
    actions = np.random.default_rng(0).uniform(-1, 1, (50, 7))
    stats = {"mw": compute_statistics(actions)}
    model = OpenVLAOFT(config, tokenizer=tokenizer, dataset_statistics=stats)
    if lora:
        apply_lora(model, LoraSpec(rank=4, alpha=4))
    return model


def batch(model) -> tuple[np.ndarray, list[str], torch.Tensor]:
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    prompts = ["pick the cube", "open the door"] * 2
    first = model.action_tokenizer.first_token_id
    tokens = torch.from_numpy(rng.integers(first, first + 256, (4, 8, 7)))
    return images, prompts, tokens


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    full = getattr(tensor, "full_tensor", None)
    return (tensor if full is None else full()).detach().float().clone()


def run(out: Path, variant: str, accelerator) -> None:
    from wmrl_cli.training.sharding import PolicySharding

    rank, world = accelerator.process_index, accelerator.num_processes
    lora = variant == "lora"
    training = SimpleNamespace(
        sharding="fsdp",
        param_dtype="float32",
        optimizer_dtype="float32" if lora else "param",
        activation_checkpointing=lora,
        cpu_offload=False,
        bf16=variant != "full",
        lora_rank=4 if lora else None,
    )
    sharding = PolicySharding(training, accelerator)
    model = sharding.prepare_model(tiny_policy(lora))
    dtypes = {n: p.dtype for n, p in model.named_parameters()}
    reference = sharding.cast_reference(tiny_policy(False).eval().requires_grad_(False))
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = sharding.optimizer([{"params": trained}], lr=1e-2, weight_decay=0.01)
    wrapped, optimizer = sharding.prepare(model, optimizer)
    images, prompts, tokens = batch(model)
    share = slice(rank * 4 // world, (rank + 1) * 4 // world)
    wrapped.train()
    out_fwd = wrapped(images[share], prompts[share], tokens[share])
    ref = sharding.reference_forward(reference, images[share], prompts[share], tokens[share])
    loss = -out_fwd.log_probs.mean()
    accelerator.backward(loss)
    norm = sharding.clip_gradients(wrapped.parameters(), 1e9)
    grads = {n: _whole(p.grad) for n, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    losses = accelerator.gather(loss.detach().reshape(1)).tolist()
    kl_gap = (out_fwd.log_probs.detach() - ref.log_probs).abs().max().reshape(1)
    wrapped.eval()
    with sharding.gathered(wrapped):
        calls = 3 if rank == 0 else 1
        for _ in range(calls):
            chunk = sharding.unwrap(wrapped).act(
                images[:2],
                prompts[:2],
                generator=torch.Generator(accelerator.device).manual_seed(0),
            )
    full = sharding.full_policy(wrapped) if sharding.fsdp else wrapped
    tokens = torch.from_numpy(chunk.tokens).to(accelerator.device)  # NCCL: on the GPU
    gathered_tokens = accelerator.gather(tokens).tolist()
    kl_gaps = accelerator.gather(kl_gap).tolist()
    if accelerator.is_main_process:
        result = {
            "losses": losses,
            "kl_gaps": kl_gaps,
            "grad_norm": float(norm),
            "norm_device": str(norm.device),
            "grads": grads,
            "weights": {k: v.detach().float().clone() for k, v in full.state_dict().items()},
            "dtypes": dtypes,
            "tokens": gathered_tokens,
        }
        torch.save(result, out / f"result_{world}_{variant}.pt")
    accelerator.wait_for_everyone()


def main(out: Path, variants: list[str]) -> None:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    for variant in variants:  # one process start for all: a start costs more than a variant
        AcceleratorState._reset_state(reset_partial_state=False)
        mixed = "no" if variant == "full" else "bf16"
        cpu = os.environ.get("WMRL_SHARDING_DEVICE") != "cuda"  # benchmarks/gpu/fsdp2_cuda.sh: NCCL
        run(out, variant, Accelerator(cpu=cpu, mixed_precision=mixed))


if __name__ == "__main__":
    # Ended as `wmrl` ends a rank (the process group closed in order): left to the interpreter's
    # exit, gloo's threads can abort a finished rank (ranks.end_ranks).
    from wmrl_cli.ranks import run_then_end_ranks

    run_then_end_ranks(lambda: sys.exit(main(Path(sys.argv[1]), sys.argv[2:] or ["full"])))
