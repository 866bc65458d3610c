"""One update of the tiny policy through `training/sharding.py`, for tests/test_sharding.py.

    python -m tests.helpers.sharding_worker OUT [lora]                 one process (replicated)
    python -m torch.distributed.run --nproc_per_node 2 -m tests.helpers.sharding_worker OUT [lora]

The same seed builds the same policy; a fixed batch of 4 samples is split evenly over the
ranks, each rank's loss is the mean over its samples (so the mean over ranks is the loss of
the whole batch), one AdamW step follows. Writes OUT/result_<world>.pt: the loss, the updated
weights (gathered) and the actions each rank decodes afterwards, rank 0 making three policy
calls and the others one (the rollout pattern: no collective may run per call).
"""

from __future__ import annotations

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


def main(out: Path, lora: bool) -> None:
    from accelerate import Accelerator

    from wmrl_cli.training.sharding import PolicySharding

    accelerator = Accelerator(cpu=True)
    rank, world = accelerator.process_index, accelerator.num_processes
    training = SimpleNamespace(
        sharding="fsdp",
        param_dtype="float32",
        optimizer_dtype="float32" if lora else "param",  # lora: MixedStateAdamW's path
        activation_checkpointing=lora,
        cpu_offload=False,
        bf16=False,
    )
    sharding = PolicySharding(training, accelerator)
    model = sharding.prepare_model(tiny_policy(lora))
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = sharding.optimizer([{"params": trained}], lr=1e-2, weight_decay=0.01)
    wrapped, optimizer = sharding.prepare(model, optimizer)
    images, prompts, tokens = batch(model)
    share = slice(rank * 4 // world, (rank + 1) * 4 // world)
    wrapped.train()
    out_fwd = wrapped(images[share], prompts[share], tokens[share])
    loss = -out_fwd.log_probs.mean()
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(wrapped.parameters(), 1e9)
    optimizer.step()
    losses = accelerator.gather(loss.detach().reshape(1)).tolist()
    wrapped.eval()
    with sharding.gathered(wrapped):
        calls = 3 if rank == 0 else 1
        for _ in range(calls):
            chunk = sharding.unwrap(wrapped).act(
                images[:2], prompts[:2], generator=torch.Generator().manual_seed(0)
            )
    full = sharding.full_policy(wrapped) if sharding.fsdp else wrapped
    gathered_tokens = accelerator.gather(torch.from_numpy(chunk.tokens)).tolist()
    if accelerator.is_main_process:
        weights = {k: v.detach().clone() for k, v in full.state_dict().items()}
        result = {"losses": losses, "weights": weights, "tokens": gathered_tokens}
        torch.save(result, out / f"result_{world}.pt")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(Path(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "lora")
