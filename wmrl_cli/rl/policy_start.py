"""Which policy an RL run trains, and its KL anchor, loaded where the run's sharding wants them
(`training/sharding.py`: `PolicySharding.load_device` and `load_dtype`).

A fresh run trains the base policy; a resumed run trains its checkpoint's policy (LoRA adapters
and value head included) and never loads the base beside it, which would hold a second whole
policy in memory for the whole run. The KL anchor (`algorithm.kl_coef > 0`) is a frozen copy of
the base as given, taken before any checkpoint or LoRA adapter replaces it, so that a resumed
run keeps the same anchor; whole on every rank's device, as the memory plan counts it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

LoadBase = Callable[[str, str], Any]  # (device, dtype) -> the base policy


def starting_policies(
    load_base: LoadBase, sharding: Any, checkpoint: Path | None, kl: bool
) -> tuple[Any, Any | None]:
    """(the policy to train, the KL anchor or None), before `sharding.prepare_model`."""
    device, dtype = sharding.load_device, sharding.load_dtype
    training_device = str(sharding.accelerator.device)

    def frozen(policy: Any) -> Any:
        policy = sharding.cast_reference(policy.eval().requires_grad_(False))
        return policy.to(training_device)

    # Resumed, or under fsdp, the anchor loads by itself onto the device, before the base: under
    # fsdp the base waits in CPU memory, and a copy of it there would be a second whole policy
    # on every rank.
    reference = None
    if kl and (checkpoint is not None or sharding.fsdp):
        bf16 = sharding.reference_dtype == torch.bfloat16  # loaded in it, not cast after
        reference = frozen(load_base(training_device, "bfloat16" if bf16 else dtype))
    if checkpoint is None:
        model = load_base(device, dtype)
        if kl and reference is None:
            reference = frozen(copy.deepcopy(model))
        return model, reference
    from wmrl_cli.policies.checkpoint import from_pretrained
    from wmrl_cli.policies.lora import lora_active

    model = from_pretrained(checkpoint / "model", device=device)
    if lora_active(model):  # as apply_lora left it: LoRA trains, the vision towers do not
        model.vision_towers.requires_grad_(False)
    return model, reference
