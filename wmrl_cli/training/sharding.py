"""How a policy trains on its ranks: replicated (`training.sharding: none`, data parallel
through Accelerate, as before) or sharded (`fsdp`: torch's FSDP2, `fully_shard`), with the
parameter and optimizer-state dtypes, activation checkpointing and CPU offload of
`cfg.training`. Used by `train-policy` (rl/trainer.py), `sft` (jobs/sft.py) and
co-evolve's RL stages (through the same trainer).

Sharding is torch's `fully_shard` applied here, on GPUs and CPUs alike, not Accelerate's FSDP
plugin: Accelerate 1.15 ignores that plugin on a CPU (a MULTI_CPU run gets DDP), so the CPU
tests could not run the code the GPUs run. Accelerate keeps the process group, the device,
`backward`, gradient clipping and the prepared optimizer; the model is not passed to
`accelerator.prepare` when sharded (it would wrap the sharded module in DDP).

Under FSDP each Llama decoder layer and each vision-tower block is one unit, the rest (the
embeddings, LM head, projector, value head) the root's. The update gathers one unit at a time;
a rollout or an evaluation gathers every unit once (`gathered`), so that ranks stepping
different numbers of policy calls (their envs end at different chunks) run no collective in
between. Checkpoints: the consolidated policy (`save_pretrained`, written by rank 0 from a
gathered full state dict) and the optimizer state as each rank's shard
(`training_state/sharded/`, torch.distributed.checkpoint), which resumes exactly, on the same
or another number of ranks.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from wmrl_cli.logging import console

SHARDED_DIR = "sharded"  # in a checkpoint's training_state/
DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16}


class MixedStateAdamW(torch.optim.AdamW):
    """torch's AdamW (decoupled weight decay, bias correction, no amsgrad) with its two
    moments kept in `state_dtype` whatever the weights' dtype; each step computes in float32.
    Used only where `training.optimizer_dtype` differs from the weights' dtype."""

    def __init__(self, params: Any, state_dtype: torch.dtype, **kwargs: Any) -> None:
        super().__init__(params, foreach=False, **kwargs)
        self.state_dtype = state_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None if closure is None else closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=self.state_dtype)
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=self.state_dtype)
                state["step"] += 1
                step = float(state["step"])
                grad, m, v = p.grad.float(), state["exp_avg"].float(), state["exp_avg_sq"].float()
                m.lerp_(grad, 1 - b1)
                v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                weight = p.float().mul_(1 - lr * wd)
                denom = (v.sqrt() / math.sqrt(1 - b2**step)).add_(eps)
                weight.addcdiv_(m, denom, value=-lr / (1 - b1**step))
                p.copy_(weight)
                state["exp_avg"].copy_(m)
                state["exp_avg_sq"].copy_(v)
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's load, with the saved moments put back in `state_dtype`: torch casts them to
        their weights' dtype (after a resume bf16 weights would keep bf16 moments, float32
        ones rounded through bf16)."""
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for index, value in saved.items():
            state = self.state[params[int(index)]]
            for key in ("exp_avg", "exp_avg_sq"):
                if key in value:
                    state[key] = value[key].to(state[key].device, self.state_dtype)


def policy_blocks(model: nn.Module) -> list[nn.Module]:
    """The policy's transformer blocks: the Llama's decoder layers, then each vision tower's."""
    blocks = list(model.llm().model.layers)
    for tower in model.vision_towers:
        encoder = tower.model.encoder
        blocks += list(getattr(encoder, "layer", None) or encoder.layers)
    return blocks


def enable_activation_checkpointing(model: nn.Module) -> None:
    """Recompute the Llama's and the vision towers' blocks in backward (transformers' own
    activation checkpointing, non-reentrant: it composes with FSDP2 and needs no input
    gradients)."""
    for module in (model.llm(), *(tower.model for tower in model.vision_towers)):
        module.activation_checkpointing_enable({"use_reentrant": False})


@contextlib.contextmanager
def gathered_units(model: nn.Module) -> Iterator[None]:
    """Inside, every FSDP unit of `model` holds its whole parameters on this rank (one
    all-gather each, on entering; collective) and keeps them after each forward: forward passes
    run no collective, so ranks may make different numbers of them (one rank validating
    alone)."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.unshard()
        unit.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True, recurse=False)


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a sharded tensor (a DTensor's local shard); any other as it is."""
    to_local = getattr(tensor, "to_local", None)
    return tensor if to_local is None else to_local()


def global_value(tensor: torch.Tensor) -> torch.Tensor:
    """A value reduced over ranks as a DTensor (a gradient norm under FSDP: partial on each
    rank, its local part not the whole gradient's norm) made whole; any other tensor as it is."""
    full = getattr(tensor, "full_tensor", None)
    return tensor if full is None else full()


def _sharded(grad: torch.Tensor) -> bool:
    """Whether a gradient is split over the ranks (FSDP's Shard placement): each rank holds a
    disjoint part, and the parts' squares add up over ranks."""
    from torch.distributed.tensor import DTensor, Shard

    return isinstance(grad, DTensor) and any(isinstance(p, Shard) for p in grad.placements)


def global_grad_norm(grads: list[torch.Tensor], device: torch.device | str) -> torch.Tensor:
    """The L2 norm of all `grads` together, a float32 scalar on `device` (the compute device),
    equal on every rank. Each local part's sum of squares moves to `device` before any
    collective: under FSDP2's CPU offload the gradient shards sit in CPU memory, and an
    all-reduce of a CPU tensor on an NCCL group fails (pytorch#148532, the fault of torch's
    `clip_grad_norm_` there). Sharded gradients are summed over ranks; whole ones (replicated
    data parallel: already averaged) count once."""
    import torch.distributed as dist

    parts = {True: torch.zeros((), device=device), False: torch.zeros((), device=device)}
    group = None
    for grad in grads:
        sharded = _sharded(grad)
        square = torch.linalg.vector_norm(local_tensor(grad), dtype=torch.float32).square()
        parts[sharded] += square.to(device)
        group = grad.device_mesh.get_group() if sharded else group
    if group is not None:
        dist.all_reduce(parts[True], group=group)
    return (parts[True] + parts[False]).sqrt()


@torch.no_grad()
def clip_gradients(parameters: Any, max_norm: float, device: torch.device | str) -> torch.Tensor:
    """`parameters`' gradients scaled in place to a global norm of at most `max_norm` (each
    rank scales its own part, where it lives); returns the norm before clipping, on `device`
    (`global_grad_norm`)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = global_grad_norm(grads, device)
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for grad in grads:
        local_tensor(grad).mul_(scale.to(grad.device))
    return norm


# -- sharded checkpoints (the policy's, a world model's denoiser's) ------------------------------


def staged_shards(run_dir: Path, step: int) -> Path:
    """Where the ranks write a step's shards before the main process moves them into the
    checkpoint (a kill in between leaves them: the world-model trainer's next start removes
    them, the policy's next save of that step)."""
    return Path(run_dir) / "checkpoints" / f".{SHARDED_DIR}-step_{step:06d}"


def remove_staged_shards(run_dir: Path) -> None:
    """Every step's staged shards a kill left in `run_dir` (main process)."""
    for staged in staged_shards(run_dir, 0).parent.glob(f".{SHARDED_DIR}-step_*"):
        shutil.rmtree(staged, ignore_errors=True)


def stage_sharded_state(
    accelerator: Any,
    model: nn.Module,
    optimizer: Any,
    run_dir: Path,
    step: int,
    extra: dict[str, Any] | None = None,
) -> Path:
    """The step's shards (`save_sharded_state`) written by every rank into a fresh staging
    folder, returned; collective. `adopt_staged_shards` moves them into the checkpoint."""
    shards = staged_shards(run_dir, step)
    if accelerator.is_main_process:
        shutil.rmtree(shards, ignore_errors=True)
    accelerator.wait_for_everyone()
    save_sharded_state(model, optimizer, shards, extra)
    return shards


def adopt_staged_shards(shards: Path, model_dir: Path) -> None:
    """Staged shards moved beside the checkpoint's model folder (`training_state/sharded/`),
    while `save_checkpoint` writes it."""
    shutil.move(str(shards), str(model_dir.parent / "training_state" / SHARDED_DIR))


def is_sharded_checkpoint(checkpoint: Path) -> bool:
    """Whether a checkpoint holds sharded optimizer states (`save_sharded_state`)."""
    return (checkpoint / "training_state" / SHARDED_DIR / ".metadata").is_file()


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    return getattr(optimizer, "optimizer", optimizer)  # Accelerate's wrapper


def save_sharded_state(
    model: nn.Module, optimizer: Any, directory: Path, extra: dict[str, Any] | None = None
) -> None:
    """Every rank's shards of the optimizer state (and of `extra`'s tensors: an EMA copy) into
    `directory` (torch.distributed.checkpoint); collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = {"optimizer": get_optimizer_state_dict(model, _inner(optimizer)), **(extra or {})}
    dcp.save(state, checkpoint_id=directory)


def load_sharded_state(
    model: nn.Module, optimizer: Any, directory: Path, extra: dict[str, Any] | None = None
) -> None:
    """`save_sharded_state`'s state back into the optimizer and, in place, `extra`'s tensors,
    whatever the ranks now: sharded over as many or another number, or replicated (each rank
    reads whole tensors; one process without a process group too)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    inner = _inner(optimizer)
    state = {"optimizer": get_optimizer_state_dict(model, inner), **(extra or {})}
    with warnings.catch_warnings():  # one process reading shards whole is what is meant here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")
        dcp.load(state, checkpoint_id=directory)
    set_optimizer_state_dict(model, inner, state["optimizer"])


class WholeOptimizerState:
    """A replicated checkpoint's optimizer state (torch's `state_dict()`, keyed by position
    among the optimized parameters) loaded into a sharded model's optimizer: `load_state_dict`
    takes the whole state and keeps this rank's shards. Collective."""

    def __init__(self, model: nn.Module, optimizer: Any) -> None:
        self.model, self.optimizer = model, _inner(optimizer)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        names = {id(p): n for n, p in self.model.named_parameters()}
        by_position = [names[id(p)] for g in self.optimizer.param_groups for p in g["params"]]
        named = {
            "state": {by_position[i]: value for i, value in state["state"].items()},
            "param_groups": [
                {**group, "params": [by_position[i] for i in group["params"]]}
                for group in state["param_groups"]
            ],
        }
        options = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(self.model, self.optimizer, named, options=options)


def shard_like(whole: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """This rank's part of `whole`, placed as the sharded `like` (collective: scattered from
    the main rank)."""
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(whole.to(like.device), like.device_mesh, like.placements).to_local()


class PolicySharding:
    """`cfg.training`'s memory settings applied to one policy on this process's rank."""

    def __init__(self, training: Any, accelerator: Any) -> None:
        self.training = training
        self.accelerator = accelerator
        # one rank shards nothing: FSDP over a single rank is the replicated path
        self.fsdp = training.sharding == "fsdp" and accelerator.num_processes > 1
        self.param_dtype = DTYPES[training.param_dtype]
        state = training.optimizer_dtype
        self.state_dtype = self.param_dtype if state == "param" else DTYPES[state]

    # -- the model ---------------------------------------------------------------------------
    @property
    def load_device(self) -> str:
        """Where a policy loads before `prepare_model`: its training device when replicated;
        CPU memory under fsdp, where `fully_shard` then moves one unit at a time to the device
        as it shards it, so that no rank's GPU ever holds the whole policy (a 7.5 B policy
        loaded whole in float32 is 28 GiB on every GPU, beside the world model)."""
        return "cpu" if self.fsdp else str(self.accelerator.device)

    @property
    def load_dtype(self) -> str:
        """The weights' dtype as a policy config names it (`training.param_dtype`): a published
        bf16 checkpoint loads in it, not in float32 to be cast afterwards."""
        return "bfloat16" if self.param_dtype == torch.bfloat16 else "float32"

    @property
    def frozen_dtype(self) -> torch.dtype:
        """The dtype of weights that do not train (LoRA's base, frozen vision towers): the
        compute dtype, bf16 with `training.bf16` (they need no float32 master copy; RLinf and
        OpenVLA-OFT's LoRA recipe keep the base in bf16), else the weights' dtype."""
        return torch.bfloat16 if self.training.bf16 else self.param_dtype

    @property
    def reference_dtype(self) -> torch.dtype:
        """The KL reference's weights, in the dtype the trained policy computes with them: bf16
        under fsdp with bf16 compute (FSDP's mixed precision gathers every weight in bf16) and
        under LoRA (its frozen base; the trained projector's bf16 autocast copy rounds alike),
        else the weights' dtype (autocast casts per op, as for the policy)."""
        if self.fsdp and self.training.bf16:
            return torch.bfloat16
        return self.frozen_dtype if self.training.lora_rank else self.param_dtype

    def cast(self, model: nn.Module) -> nn.Module:
        """The trained policy with its trained parameters in the weights' dtype and its frozen
        ones in `frozen_dtype`; buffers keep theirs (the rotary frequencies and pixel
        statistics stay float32)."""
        for param in model.parameters():
            dtype = self.param_dtype if param.requires_grad else self.frozen_dtype
            param.data = param.data.to(dtype)
        model.config.dtype = self.load_dtype
        return model

    def cast_reference(self, model: nn.Module) -> nn.Module:
        """A frozen copy of the policy (the KL reference) in `reference_dtype`: at
        initialisation it computes exactly what the policy does (`reference_forward`)."""
        for param in model.parameters():
            param.data = param.data.to(self.reference_dtype)
        return model

    def reference_forward(self, reference: nn.Module, *args: Any) -> Any:
        """The KL reference's forward as the policy's runs: under the bf16 autocast Accelerate
        wraps a replicated policy in (`training.bf16`); under fsdp without it, FSDP's mixed
        precision having cast the weights (`reference_dtype`). The KL is zero at
        initialisation."""
        autocast = contextlib.nullcontext() if self.fsdp else self.accelerator.autocast()
        with torch.no_grad(), autocast:
            return reference(*args)

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """Cast, checkpointing and (fsdp) `fully_shard`, in place; before the optimizer is
        built (sharding replaces the parameters)."""
        self.cast(model)
        if self.training.activation_checkpointing:
            enable_activation_checkpointing(model)
        if not self.fsdp:
            return model
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import (
            CPUOffloadPolicy,
            MixedPrecisionPolicy,
            fully_shard,
            register_fsdp_forward_method,
        )

        device = self.accelerator.device
        model.compute_device = device  # the shards may stay in CPU memory (cpu_offload)
        mesh = init_device_mesh(device.type, (self.accelerator.num_processes,))
        compute = torch.bfloat16 if self.training.bf16 else None
        kwargs: dict[str, Any] = dict(
            mesh=mesh,
            mp_policy=MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32),
            reshard_after_forward=True,
        )
        if self.training.cpu_offload:
            if device.type == "cuda":
                kwargs["offload_policy"] = CPUOffloadPolicy()
            elif self.accelerator.is_main_process:
                console.print("notice: training.cpu_offload: on a CPU the shards are there already")
        for block in policy_blocks(model):
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        # Rollouts and evaluations call `act`, not the module: through the root's hooks too, so
        # that the root initializes first whichever runs first
        register_fsdp_forward_method(model, "act")
        # The policy returns views (logits reshaped per action); the trainer never writes into
        # them in place, which is what FSDP2 warns about.
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")
        return model

    def optimizer(self, groups: list[dict[str, Any]], **kwargs: Any) -> torch.optim.Optimizer:
        """AdamW over `groups` (of the prepared model's parameters), moments in the configured
        dtype."""
        if self.state_dtype == self.param_dtype:
            return torch.optim.AdamW(groups, **kwargs)
        return MixedStateAdamW(groups, self.state_dtype, **kwargs)

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[Any, Any]:
        """(what to call for training forwards, the optimizer) through Accelerate."""
        if not self.fsdp:
            return self.accelerator.prepare(model, optimizer)
        return model, self.accelerator.prepare_optimizer(optimizer)

    def clip_gradients(self, parameters: Any, max_norm: float) -> torch.Tensor:
        """The whole gradient's norm before clipping it to `max_norm`, on the compute device
        (`clip_gradients`: sharded and CPU-offloaded gradients alike)."""
        self.accelerator.unscale_gradients()  # fp16's loss scale (nothing under bf16)
        return clip_gradients(parameters, max_norm, self.accelerator.device)

    def unwrap(self, wrapped: nn.Module) -> nn.Module:
        return wrapped if self.fsdp else self.accelerator.unwrap_model(wrapped)

    @contextlib.contextmanager
    def gathered(self, model: nn.Module) -> Iterator[None]:
        """Every rank holds the whole policy inside (fsdp; nothing to do otherwise): its
        forward passes run no collective, so ranks may make different numbers of them."""
        with gathered_units(model) if self.fsdp else contextlib.nullcontext():
            yield

    def local_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """This rank's tensors (its shards under fsdp), for the rank summary."""
        return {k: local_tensor(v) for k, v in model.state_dict().items()}

    # -- saving and resuming -------------------------------------------------------------------
    def full_policy(self, model: nn.Module) -> nn.Module | None:
        """An unsharded copy of the policy on the main process (None elsewhere); collective.
        Built on the meta device and filled with the gathered weights, so only they take
        memory (CPU)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        from wmrl_cli.policies.lora import apply_lora, lora_active
        from wmrl_cli.policies.openvla_oft import OpenVLAOFT

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full = get_model_state_dict(model, options=options)
        if not self.accelerator.is_main_process:
            return None
        config = model.config.model_copy(deep=True)
        lora = config.lora if lora_active(model) else None
        config.lora = None
        config.value_head = model.value_head is not None
        with torch.device("meta"):
            copy = OpenVLAOFT(config, model.tokenizer, None)
            if lora is not None:
                apply_lora(copy, lora, freeze_vision=False)
        copy.load_state_dict(full, strict=True, assign=True)
        copy.norm_stats = model.norm_stats
        return copy

    def save_policy(self, model: nn.Module, directory: Path) -> None:
        """The consolidated policy (`save_pretrained`'s folder) written by the main process;
        every rank calls it."""
        from wmrl_cli.policies.checkpoint import save_pretrained

        full = self.full_policy(model) if self.fsdp else self.unwrap(model)
        if self.accelerator.is_main_process:
            save_pretrained(full, directory)

    def checkpoint_parts(
        self, model: nn.Module, optimizer: Any, run_dir: Path, step: int, others: tuple = ()
    ) -> tuple[Callable[[Path], Any], list[Any]]:
        """(save_model, stateful) for `save_checkpoint` on the main process; every rank calls
        it. `others`: further objects with a state dict (a scheduler). Replicated: the policy
        and the optimizer as they are. fsdp: the optimizer's shards written now by every rank
        (torch.distributed.checkpoint) and moved into the checkpoint by save_model, which
        writes the gathered policy."""
        from wmrl_cli.policies.checkpoint import save_pretrained

        if not self.fsdp:
            unwrapped = self.unwrap(model)
            return (lambda directory: save_pretrained(unwrapped, directory)), [optimizer, *others]
        shards = stage_sharded_state(self.accelerator, model, optimizer, run_dir, step)
        full = self.full_policy(model)

        def save_model(directory: Path) -> None:
            save_pretrained(full, directory)
            adopt_staged_shards(shards, directory)

        return save_model, list(others)

    def load_checkpoint(
        self,
        checkpoint: Path,
        model: nn.Module,
        optimizer: Any,
        others: tuple = (),
        restore_rng_state: bool = True,
    ) -> dict:
        """`load_checkpoint`'s result, the optimizer state restored (its shard on each rank
        under fsdp) and `others`' (as `checkpoint_parts` saved them); after `prepare_model`
        and `optimizer`. A checkpoint resumes whether it was saved sharded or replicated (a run
        continued on another number of ranks, or a co-evolve stage rerun with another
        `--num-processes`)."""
        from wmrl_cli.training.checkpoints import load_checkpoint

        if is_sharded_checkpoint(checkpoint):  # read whole on one rank, resharded on several
            info = load_checkpoint(checkpoint, list(others), restore_rng_state)
            shards = checkpoint / "training_state" / SHARDED_DIR
            load_sharded_state(self.unwrap(model), optimizer, shards)
            return info
        if self.fsdp:  # a whole state, each rank keeping its shards
            optimizer = WholeOptimizerState(model, optimizer)
        return load_checkpoint(checkpoint, [optimizer, *others], restore_rng_state)


# -- the frozen models of an imagined env -------------------------------------------------------


def frozen_models(env: Any) -> tuple[list[nn.Module], list[nn.Module]]:
    """(world models, reward models) an RL env imagines and judges with (none in the real
    simulator; the simulator-judged env wraps an imagined one)."""
    env = getattr(env, "imagined", env)
    worlds = [getattr(env, "world_model", None), *getattr(env, "confirm_models", [])]
    rewards = [getattr(env, "reward_model", None)]
    keep = [m for m in worlds if isinstance(m, nn.Module)]
    return keep, [m for m in rewards if isinstance(m, nn.Module)]


@contextlib.contextmanager
def offloaded(models: list[nn.Module], device: Any, on: bool) -> Iterator[None]:
    """Inside, `models` are in CPU memory (`on`; nothing moves otherwise); back on `device`
    after. A world model moves with the context it holds."""
    if not on:
        yield
        return
    for model in models:
        (model.offload if hasattr(model, "offload") else model.cpu)()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        yield
    finally:
        for model in models:
            if hasattr(model, "onload"):
                model.onload(device)
            else:
                model.to(device)
