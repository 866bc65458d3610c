"""The estimated per-GPU memory of a policy-training run, before anything large is loaded.

Two phases, the larger one is the peak:

- rollout: the policy's weights and optimizer state stay where they are, the frozen world
  model (and VAE) and reward model imagine, and under FSDP the whole policy is gathered in its
  compute dtype for the rollout's forward passes (`training/sharding.py`);
- update: weights, gradients, AdamW's two moments, the activations a micro-batch keeps for
  backward, and the world model unless it is offloaded during the update.

Sizes come from parameter counts (`training/param_counts.py`, built on the meta device) and
bytes per element: float32 4, bf16 2. Sharding (FSDP) divides weights, gradients and optimizer
state by the ranks; CPU offload moves all three to CPU memory. With float32 weights and bf16
compute, the float32 weights are the master copy and bf16 copies are made for the forward
(autocast caches one per trainable weight; FSDP gathers one block at a time, two in flight).

Activations (an estimate, to be checked against `benchmarks/gpu_fullsize.py`): per token and
block, what autograd keeps for backward (SDPA keeps no attention matrix). Llama (RMSNorm in
float32, SwiGLU with MLP width i): 16 h + (7 h + 4 i) x b bytes; a ViT block (LayerNorm, GELU
MLP of width m, layer scale): (11 h + 2 m) x b bytes, for compute dtype size b. With activation
checkpointing only each block's input (h x b) is kept, plus one block recomputed at a time.
Frozen vision towers (LoRA) keep nothing. A micro-batch is `algorithm.minibatch_trajectories`
x ceil(max_episode_steps / chunk) sequences of 1 + patches + 32 prompt + C x A action + 1 tokens
(every step valid: the worst case). Not counted: the imagination's own working set (the
world model's activations, measured by the benchmark), the CUDA context (~0.5 GiB) and
allocator fragmentation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from wmrl_cli.errors import ConfigError
from wmrl_cli.training.param_counts import PolicySize, Stack

GIB = 2**30
BYTES = {"float32": 4, "fp32": 4, "bf16": 2, "bfloat16": 2}
SHARD_COUNTS = (2, 4, 8, 16, 32, 64)
VAE_BATCH = 4  # the remedy's world_model.vae_batch


@dataclass(frozen=True)
class PlanSettings:
    """What the estimate depends on besides the models' sizes."""

    world_size: int = 1
    sharding: str = "none"  # none | fsdp
    param_dtype: str = "float32"  # the trained policy's weights (and gradients)
    optimizer_dtype: str = "float32"  # AdamW's moments
    compute_dtype: str = "float32"  # forward passes (bf16: training.bf16)
    activation_checkpointing: bool = False
    cpu_offload: bool = False
    sequences: int = 1  # policy forward sequences per micro-batch
    kl_reference: bool = False  # a frozen copy of the policy (algorithm.kl_coef > 0)
    world_model_dtype: str = "float32"
    offload_world_model: bool = False
    lora_rank: int | None = None
    steps_per_trajectory: int | None = None  # RL: sequences of one trajectory (chunks)
    envs: int = 0  # imagined envs on this rank
    vae_batch: int | None = None  # world_model.vae_batch

    @property
    def shards(self) -> int:
        return self.world_size if self.sharding == "fsdp" else 1


@dataclass(frozen=True)
class ImaginationCost:
    """Bytes one imagined env adds while the world model predicts a chunk: its VAE decode (8
    frames at full resolution through the decoder's widest layers) and its share of the
    denoiser's working set."""

    decode: int
    denoise: int


# Counted by benchmarks/memory_plan_check.py on fake tensors (docs/benchmarks.md) for the
# published configs at 256x256 in bf16, RLinf's settings; other resolutions scale by pixels
# (measured: 128x128 holds a quarter). Peak = the larger of the two (they do not overlap).
IMAGINATION_256 = {
    "wan": ImaginationCost(decode=int(0.665 * GIB), denoise=int(0.0496 * GIB)),
    "opensora": ImaginationCost(decode=int(0.751 * GIB), denoise=int(0.1204 * GIB)),
}


def imagination_cost(backend: str, height: int, width: int) -> ImaginationCost:
    scale = height * width / 256**2
    cost = IMAGINATION_256[backend]
    return ImaginationCost(int(cost.decode * scale), int(cost.denoise * scale))


def imagination_bytes(cost: ImaginationCost | None, envs: int, vae_batch: int | None) -> int:
    """The world model's working set for `envs` envs, `vae_batch` of them per VAE call."""
    if cost is None or envs <= 0:
        return 0
    return max(cost.decode * min(envs, vae_batch or envs), cost.denoise * envs)


@dataclass(frozen=True)
class PlanSizes:
    """Parameter counts (the policy at the run's LoRA rank), the reward model's bytes and
    what imagination adds per env."""

    policy: PolicySize
    world_model: int = 0
    reward_model_bytes: int = 0
    imagination: ImaginationCost | None = None


@dataclass(frozen=True)
class MemoryPlan:
    """Rows of (what, GiB during the rollout, during the update's forward and backward, during
    AdamW's step), per GPU."""

    rows: tuple[tuple[str, float, float, float], ...]
    settings: PlanSettings

    @property
    def rollout(self) -> float:
        return sum(row[1] for row in self.rows)

    @property
    def update(self) -> float:
        return sum(row[2] for row in self.rows)

    @property
    def step(self) -> float:
        return sum(row[3] for row in self.rows)

    @property
    def peak(self) -> float:
        return max(self.rollout, self.update, self.step)

    def row(self, name: str) -> tuple[float, float, float]:
        """(rollout, update, step) GiB of the row whose label starts with `name`."""
        for label, *phases in self.rows:
            if label.startswith(name):
                return tuple(phases)
        raise KeyError(name)

    def table(self, budget: float | None = None):
        from rich.table import Table

        s = self.settings
        fsdp = f"fsdp over {s.world_size} rank(s)" if s.sharding == "fsdp" else "no sharding"
        title = (
            f"memory plan per GPU (estimate; {fsdp}, weights {s.param_dtype}, "
            f"compute {s.compute_dtype}"
            + (f", LoRA rank {s.lora_rank}" if s.lora_rank else ", full fine-tuning")
            + ")"
        )
        table = Table(title=title, title_justify="left")
        table.add_column("what")
        for phase in ("rollout GiB", "update GiB", "AdamW step GiB"):
            table.add_column(phase, justify="right")
        for label, *phases in self.rows:
            if any(phases):
                table.add_row(label, *(f"{x:.2f}" for x in phases))
        tail = "" if budget is None else f" of {budget:.1f}"
        table.add_row("peak", "", "", f"{self.peak:.2f}{tail}", style="bold")
        return table


def _gib(n: float) -> float:
    return n / GIB


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M"


def block_bytes_per_token(stack: Stack, b: int) -> int:
    """What one block keeps for backward per token (see the module doc)."""
    h, m = stack.hidden, stack.mlp
    if stack.kind == "llama":
        return 16 * h + (7 * h + 4 * m) * b
    return (11 * h + 2 * m) * b


def activation_bytes(
    policy: PolicySize, sequences: int, b: int, residual: int, checkpointing: bool
) -> int:
    """What a micro-batch of `sequences` keeps for backward: each kept stack's blocks (with
    checkpointing only their inputs, in the residual stream's dtype of `residual` bytes, and one
    block recomputed at a time) and the projector's linears and GELUs."""
    total = sequences * policy.projector_kept * b
    for stack, trained in zip(policy.stacks, policy.trainable_stacks):
        if not trained:
            continue
        tokens = sequences * stack.tokens
        per_block = tokens * block_bytes_per_token(stack, b)
        if checkpointing:  # the stack's input and every block's output, one block's working set
            total += tokens * stack.hidden * residual * (stack.layers + 1) + per_block
        else:
            total += per_block * stack.layers
    return total


def plan_memory(sizes: PlanSizes, s: PlanSettings) -> MemoryPlan:
    """The per-GPU estimate for `sizes` under `s` (see the module doc)."""
    p = sizes.policy
    wb, ob, cb = BYTES[s.param_dtype], BYTES[s.optimizer_dtype], BYTES[s.compute_dtype]
    on_gpu = 0 if s.cpu_offload and s.sharding == "fsdp" else 1
    shards = s.shards
    weights = _gib(p.params * wb / shards) * on_gpu
    grads = _gib(p.trainable * wb / shards) * on_gpu
    moments = _gib(2 * p.trainable * ob / shards) * on_gpu
    # torch's multi-tensor AdamW (the default on GPUs) makes one moment-sized temporary;
    # MixedStateAdamW (moments in another dtype than the weights) steps one tensor at a time
    step_temporary = _gib(p.trainable * ob / shards) * on_gpu if ob == wb else 0.0
    if s.sharding == "fsdp":
        copies = ("gathered for the rollout / two blocks in flight", _gib(p.params * cb))
        copies_update = _gib(2 * p.largest_unit * cb)
        residual = cb  # the gathered weights are in the compute dtype
    elif cb < wb:  # the bf16 copies of float32 weights that autograd keeps for backward
        copies = ("bf16 weight copies kept for backward (autocast)", 0.0)
        blocks = p.largest_kept_block if s.activation_checkpointing else p.kept_block_params
        copies_update = _gib((blocks + p.projector_params) * cb)
        residual = wb  # float32 embeddings: the residual stream stays float32
    else:
        copies, copies_update, residual = ("", 0.0), 0.0, wb
    acts = _gib(activation_bytes(p, s.sequences, cb, residual, s.activation_checkpointing))
    wm = _gib(sizes.world_model * BYTES[s.world_model_dtype])
    rm = _gib(sizes.reward_model_bytes)
    kept = 0.0 if s.offload_world_model else 1.0
    weight_label = "float32 master" if wb == 4 and cb == 2 else s.param_dtype
    if p.trainable < 0.99 * p.params:  # LoRA
        weight_label += f", {p.trainable / 1e6:.0f} M trained"
    rows = [
        (f"policy weights ({_params(p.params)}, {weight_label})", weights, weights, weights),
        (f"policy {copies[0]}", copies[1], copies_update, 0.0),
        (f"gradients ({s.param_dtype})", 0.0, grads, grads),
        (f"AdamW moments ({s.optimizer_dtype})", moments, moments, moments),
        ("AdamW step temporary (multi-tensor)", 0.0, 0.0, step_temporary),
        (
            f"activations ({s.sequences} sequences"
            + (", checkpointed)" if s.activation_checkpointing else ")"),
            0.0,
            acts,
            0.0,
        ),
        (
            "KL reference policy (frozen)",
            *(3 * [_gib(p.params * wb)] if s.kl_reference else [0, 0, 0]),
        ),
        (
            f"world model + VAE ({_params(sizes.world_model)}, {s.world_model_dtype}"
            + (", offloaded in the update)" if s.offload_world_model else ")"),
            wm,
            wm * kept,
            wm * kept,
        ),
        (
            f"imagination working set ({s.envs} envs"
            + (f", VAE {s.vae_batch} at a time)" if s.vae_batch else ")"),
            _gib(imagination_bytes(sizes.imagination, s.envs, s.vae_batch)),
            0.0,
            0.0,
        ),
        ("reward model", rm, rm * kept, rm * kept),
    ]
    return MemoryPlan(tuple((label, *map(float, phases)) for label, *phases in rows), s)


# -- over budget: what to change ----------------------------------------------------------------


@dataclass(frozen=True)
class Remedy:
    """One change a user can make: the option that makes it and the settings it gives."""

    option: str
    settings: PlanSettings
    lora: bool = False  # the plan needs the LoRA-sized policy
    sharding: bool = False


def remedies(s: PlanSettings, has_world_model: bool, lora: bool = True) -> list[Remedy]:
    """The single changes worth trying, in the order they are suggested (`lora`: whether the
    command trains LoRA adapters; sft does not)."""
    out = []
    if lora and not s.lora_rank:
        out.append(Remedy("--set training.lora_rank=32", replace(s, lora_rank=32), lora=True))
    ranks = [n for n in SHARD_COUNTS if n > s.world_size or (n == s.world_size and s.shards == 1)]
    if s.shards == 1 and s.world_size > 1 and s.world_size not in ranks:
        ranks.insert(0, s.world_size)
    for n in ranks:
        more = "" if n == s.world_size else f" --num-processes {n}"
        sharded = replace(s, sharding="fsdp", world_size=n)
        out.append(Remedy(f"--set training.sharding=fsdp{more}", sharded, sharding=True))
    if not s.activation_checkpointing:
        checkpointed = replace(s, activation_checkpointing=True)
        out.append(Remedy("--set training.activation_checkpointing=true", checkpointed))
    if s.steps_per_trajectory and s.sequences > s.steps_per_trajectory:
        fewer = replace(s, sequences=s.steps_per_trajectory)
        out.append(Remedy("--set algorithm.minibatch_trajectories=1", fewer))
    if s.param_dtype != "bf16":
        bf16 = replace(s, param_dtype="bf16", optimizer_dtype="bf16", compute_dtype="bf16")
        out.append(Remedy("--set training.param_dtype=bf16", bf16))
    if s.sharding == "fsdp" and not s.cpu_offload:
        out.append(Remedy("--set training.cpu_offload=true", replace(s, cpu_offload=True)))
    if has_world_model and not s.offload_world_model:
        offloaded = replace(s, offload_world_model=True)
        out.append(Remedy("--set world_model.offload_during_update=true", offloaded))
    if has_world_model and s.envs > VAE_BATCH and (s.vae_batch or s.envs) > VAE_BATCH:
        batched = replace(s, vae_batch=VAE_BATCH)
        out.append(Remedy(f"--set world_model.vae_batch={VAE_BATCH}", batched))
    return out


def _merge(a: PlanSettings, b: PlanSettings) -> PlanSettings:
    """`a` with the cheaper of each setting `a` and `b` differ in (sharding aside)."""

    def bf16(x: str, y: str) -> str:
        return "bf16" if "bf16" in (x, y) else x

    return replace(
        a,
        lora_rank=a.lora_rank or b.lora_rank,
        activation_checkpointing=a.activation_checkpointing or b.activation_checkpointing,
        sequences=min(a.sequences, b.sequences),
        param_dtype=bf16(a.param_dtype, b.param_dtype),
        optimizer_dtype=bf16(a.optimizer_dtype, b.optimizer_dtype),
        compute_dtype=bf16(a.compute_dtype, b.compute_dtype),
        cpu_offload=a.cpu_offload or b.cpu_offload,
        offload_world_model=a.offload_world_model or b.offload_world_model,
        vae_batch=min(x for x in (a.vae_batch, b.vae_batch, a.envs or 1) if x),
    )


Replan = Callable[[PlanSettings, bool], MemoryPlan]


def over_budget_message(
    plan: MemoryPlan,
    budget: float,
    where: str,
    replan: Replan,
    has_world_model: bool,
    lora: bool = True,
) -> str:
    """One line: the plan's peak against the budget, and the changes that bring it under
    (each alone; else all but sharding together; else more GPUs)."""
    head = (
        f"the memory plan needs {plan.peak:.1f} GiB per GPU, more than the {budget:.1f} GiB "
        f"of {where}"
    )
    options = remedies(plan.settings, has_world_model, lora)
    fits: list[Remedy] = []
    for remedy in options:
        if remedy.sharding and any(f.sharding for f in fits):
            continue  # the fewest ranks that fit
        if replan(remedy.settings, remedy.lora).peak <= budget:
            fits.append(remedy)
    if fits:
        return f"{head}; each of these fits: " + "; ".join(r.option for r in fits)
    rest = [r for r in options if not r.sharding]
    together = plan.settings
    for remedy in rest:
        together = _merge(together, remedy.settings)
    if rest and replan(together, any(r.lora for r in rest)).peak <= budget:
        return f"{head}; it fits with these together: " + "; ".join(r.option for r in rest)
    return f"{head}, even with {'; '.join(r.option for r in rest) or 'every saving'}: use more GPUs"


def check_budget(
    plan: MemoryPlan,
    budget: float | None,
    where: str,
    replan: Replan,
    has_world_model: bool,
    lora: bool = True,
) -> None:
    """A ConfigError (exit 2) naming what to change when the plan exceeds `budget` GiB."""
    if budget is not None and plan.peak > budget:
        message = over_budget_message(plan, budget, where, replan, has_world_model, lora)
        raise ConfigError(message)


# -- from a run's config --------------------------------------------------------------------------


def device_budget(cfg, device: str) -> tuple[float | None, str]:
    """(GiB the plan must fit in, what holds them): `training.memory_budget_gb`, else the
    CUDA device's total memory; None on a CPU (nothing is checked there)."""
    if cfg.training.memory_budget_gb is not None:
        return cfg.training.memory_budget_gb, "training.memory_budget_gb"
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.mem_get_info(device)[1] / GIB, str(device)
    return None, str(device)


def training_settings(cfg, world_size: int, sequences: int, **extra) -> PlanSettings:
    """The plan's settings from `cfg.training` (and `extra`: world-model and RL settings)."""
    t = cfg.training
    param = "bf16" if t.param_dtype == "bf16" else "float32"
    optimizer = param if t.optimizer_dtype == "param" else t.optimizer_dtype
    return PlanSettings(
        world_size=world_size,
        sharding=t.sharding if world_size > 1 else "none",  # one rank shards nothing
        param_dtype=param,
        optimizer_dtype="bf16" if optimizer == "bf16" else "float32",
        compute_dtype="bf16" if t.bf16 or param == "bf16" else "float32",
        activation_checkpointing=t.activation_checkpointing,
        cpu_offload=t.cpu_offload,
        sequences=sequences,
        lora_rank=t.lora_rank,
        **extra,
    )


@dataclass(frozen=True)
class CheckedPlan:
    """A plan with what it was checked against; `offload_world_model` and `vae_batch` are the
    resolved `world_model.offload_during_update` and `world_model.vae_batch`."""

    plan: MemoryPlan
    budget: float | None
    where: str

    @property
    def offload_world_model(self) -> bool:
        return self.plan.settings.offload_world_model

    @property
    def vae_batch(self) -> int | None:
        return self.plan.settings.vae_batch

    def print(self) -> None:
        from wmrl_cli.logging import console

        console.print(self.plan.table(self.budget))


def rl_memory_plan(
    cfg,
    policy_config,
    world_model_params: int,
    reward_model_bytes: int,
    world_size: int,
    device: str,
    imagination: ImaginationCost | None = None,
) -> CheckedPlan:
    """The plan of `train-policy` (and co-evolve's RL stages), checked against the device:
    a ConfigError naming what to change when it does not fit. `world_model.offload_during_update`
    unset (None) turns offloading on where the plan needs it, and `world_model.vae_batch` unset
    decodes `VAE_BATCH` envs at a time where that is what the plan needs. `imagination`: what
    one env adds while the world model imagines (`imagination_cost`)."""
    from wmrl_cli.training.param_counts import policy_size
    from wmrl_cli.world_models.factory import world_model_dtype_name

    alg, wm = cfg.algorithm, cfg.world_model
    per_trajectory = -(-alg.max_episode_steps // policy_config.chunk_len)
    value_head = alg.name == "ppo" or policy_config.value_head
    settings = training_settings(
        cfg,
        world_size,
        alg.minibatch_trajectories * per_trajectory,
        steps_per_trajectory=per_trajectory,
        kl_reference=alg.kl_coef > 0,
        world_model_dtype=world_model_dtype_name(wm.dtype, device),
        offload_world_model=bool(wm.offload_during_update) and world_model_params > 0,
        envs=alg.num_envs // world_size if world_model_params else 0,
        vae_batch=wm.vae_batch,
    )

    def replan(s: PlanSettings, lora: bool = False) -> MemoryPlan:
        rank = s.lora_rank if (lora or s.lora_rank) else None
        policy = policy_size(policy_config, rank, value_head)
        sizes = PlanSizes(policy, world_model_params, reward_model_bytes, imagination)
        return plan_memory(sizes, s)

    budget, where = device_budget(cfg, device)
    plan = replan(settings)
    auto = world_model_params and budget is not None
    if auto and wm.offload_during_update is None and plan.peak > budget:
        plan = replan(replace(plan.settings, offload_world_model=True))
    if auto and wm.vae_batch is None and plan.peak > budget and settings.envs > VAE_BATCH:
        plan = replan(replace(plan.settings, vae_batch=VAE_BATCH))
    check_budget(plan, budget, where, replan, world_model_params > 0)
    return CheckedPlan(plan, budget, where)


def sft_memory_plan(cfg, policy_config, world_size: int, device: str) -> CheckedPlan:
    """The plan of `sft`: the policy alone, `sft.batch_size / ranks` sequences per step."""
    from wmrl_cli.training.param_counts import policy_size

    settings = training_settings(cfg, world_size, max(1, cfg.sft.batch_size // world_size))
    settings = replace(settings, lora_rank=None)  # sft trains every weight

    def replan(s: PlanSettings, lora: bool = False) -> MemoryPlan:
        return plan_memory(PlanSizes(policy_size(policy_config, s.lora_rank)), s)

    budget, where = device_budget(cfg, device)
    plan = replan(settings)
    check_budget(plan, budget, where, replan, False, lora=False)
    return CheckedPlan(plan, budget, where)


def check_rl_memory(cfg, inputs, world_size: int, device: str | None = None) -> CheckedPlan:
    """The RL plan from the inputs' files (`rl.setup.Inputs`), before any of them loads:
    `train-policy` checks it before starting its ranks, `rl.train_policy` before loading the
    policy. A ConfigError (exit 2) naming what to change where it does not fit."""
    from wmrl_cli.training.param_counts import (
        policy_config_of,
        weight_file_bytes,
        world_model_params,
        world_model_resolution,
    )

    if device is None:
        import torch

        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    backend = cfg.world_model.backend
    worlds = [inputs.world_model, *inputs.confirm_world_models] if inputs.world_model else []
    params = sum(world_model_params(path, backend) for path in worlds)
    reward = weight_file_bytes(inputs.reward_model)
    policy = policy_config_of(inputs.policy)
    cost = None
    if inputs.world_model:
        height, width = world_model_resolution(inputs.world_model)
        cost = imagination_cost(backend, height, width)
    return rl_memory_plan(cfg, policy, params, reward, world_size, device, cost)
