"""Whether a run's memory plan (`memory/plan.py`) fits its GPU, and what to change
where it does not: the plan of `train-policy`, `sft` and co-evolve's RL stages built from the
run's config, checked against the device's memory (or `training.memory_budget_gb`) before
anything large loads; over budget, one line (a ConfigError, exit 2) naming the single changes
that fit, else the ones that fit together, else more GPUs. Unset,
`world_model.offload_during_update` and `world_model.vae_batch` turn on where the plan needs
them.

A GPU's budget is its memory (read without a CUDA context: `runtime.gpu_memory_gib`) or
`training.memory_budget_gb`, less a reserve the plan cannot see: the CUDA context (about
0.5 GiB), NCCL's buffers, the caching allocator's rounding and fragmentation
(`training.memory_reserve_gb`; default `GPU_RESERVE_GIB` + `GPU_RESERVE_FRACTION` of the GPU).
A run on a CPU is checked against the host memory available, shared by its ranks: more ranks
do not help there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from wmrl_cli.errors import ConfigError
from wmrl_cli.memory.plan import (
    IMAGINATION_256,
    PHASES,
    ImaginationCost,
    MemoryPlan,
    PlanSettings,
    PlanSizes,
    imagination_cost,
    plan_memory,
)

SHARD_COUNTS = (2, 4, 8, 16, 32, 64)
VAE_BATCH = 4  # the remedy's world_model.vae_batch
GPU_RESERVE_GIB = 1.0  # the CUDA context (about 0.5 GiB) and NCCL's buffers
GPU_RESERVE_FRACTION = 0.05  # the caching allocator's rounding and fragmentation
HOST = "host memory"  # the start of a CPU budget's `where`
PLANNED_VOCABULARY = 1000  # words of sft's instructions, planned before they are read


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
        # each of the n ranks imagines its share of the envs
        sharded = replace(s, sharding="fsdp", world_size=n, envs=s.envs * s.world_size // n)
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
    extra: tuple[Remedy, ...] = (),
) -> str:
    """One line: the plan's peak against the budget, and the changes that bring it under
    (each alone, `extra` first; else all but sharding together; else more GPUs). On the host
    (`where` starts with HOST) ranks share one memory: no sharding, no more GPUs."""
    host = where.startswith(HOST)
    per = ("per rank" if "ranks" in where else "") if host else "per GPU"
    head = (
        f"the memory plan needs {plan.peak:.1f} GiB{' ' if per else ''}{per}, more than the "
        f"{budget:.1f} GiB of {where}"
    )
    options = [*extra, *remedies(plan.settings, has_world_model, lora)]
    if host:
        options = [r for r in options if not r.sharding and "cpu_offload" not in r.option]
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
    lora_needed = any(r.lora for r in rest)
    floor = replan(together, lora_needed)
    if rest and floor.peak <= budget:
        return f"{head}; it fits with these together: " + "; ".join(r.option for r in rest)
    tried = [r.option for r in rest]
    for sharded in (r for r in options if r.sharding):  # the fewest ranks first
        offload = [] if OFFLOAD in tried else [OFFLOAD]
        floor = replan(replace(_merge(sharded.settings, together), cpu_offload=True), lora_needed)
        with_ranks = [r.option for r in rest] + offload + [sharded.option]
        if floor.peak <= budget:
            return f"{head}; it fits with these together: " + "; ".join(with_ranks)
        tried = with_ranks
    return f"{head}; no setting fits: {no_fit(floor, tried, host)}"


OFFLOAD = "--set training.cpu_offload=true"


def no_fit(floor: MemoryPlan, tried: list[str], host: bool) -> str:
    """Why the cheapest plan (`floor`, with every change in `tried`) does not fit: the phase
    that holds its peak and what holds most of it, which more ranks do not divide (the policy
    gathered for the rollout, the world model); and what is left to change."""
    column = 1 + floor.peak_phase
    largest = sorted(floor.rows, key=lambda row: row[column], reverse=True)[:2]
    held = " and ".join(f"{row[0].split(' (')[0]} {row[column]:.1f}" for row in largest)
    smaller = ""
    if floor.peak_phase == 0:  # the rollout: its working set grows with the envs and frames
        smaller = (
            ", or fewer envs per rank (algorithm.num_envs) or frames per window "
            "(world_model.context_frames, simulator.chunk_size)"
        )
    return (
        f"with {'; '.join(tried) or 'every saving'} it still needs {floor.peak:.1f} GiB, "
        f"its {PHASES[floor.peak_phase]} holding {held} GiB; a "
        f"{'machine' if host else 'GPU'} with more memory{smaller}"
    )


class OverBudget(ConfigError):
    """A plan that exceeds its budget (exit 2): the message names what to change; `plan` is the
    plan as configured (with what the launch would turn on by itself), for its table."""

    def __init__(self, message: str, plan: MemoryPlan) -> None:
        super().__init__(message)
        self.plan = plan


def check_budget(
    plan: MemoryPlan,
    budget: float | None,
    where: str,
    replan: Replan,
    has_world_model: bool,
    lora: bool = True,
    extra: tuple[Remedy, ...] = (),
) -> None:
    """OverBudget (a ConfigError, exit 2) naming what to change when the plan exceeds `budget`
    GiB."""
    if budget is not None and plan.peak > budget:
        message = over_budget_message(plan, budget, where, replan, has_world_model, lora, extra)
        raise OverBudget(message, plan)


# -- from a run's config --------------------------------------------------------------------------


def gpu_reserve(total: float, setting: float | None) -> float:
    """GiB of a GPU of `total` GiB the plan leaves free: `training.memory_reserve_gb`, else
    GPU_RESERVE_GIB and GPU_RESERVE_FRACTION of the GPU (5.0 of an 80 GB H100's 79.6)."""
    return setting if setting is not None else GPU_RESERVE_GIB + GPU_RESERVE_FRACTION * total


def device_budget(cfg, device: str, ranks: int = 1, host: bool = False) -> tuple[float | None, str]:
    """(GiB the plan must fit in, what holds them): `training.memory_budget_gb`, else the
    CUDA device's total memory, each less the reserve (`gpu_reserve`); on a CPU, with `host`
    (a run about to start there), the host memory available shared by `ranks`, else None
    (nothing is checked: `--plan` on a machine without a GPU)."""
    t = cfg.training
    if t.memory_budget_gb is not None:
        total = t.memory_budget_gb
        where = f"training.memory_budget_gb={total:g}"
    elif str(device).startswith("cuda"):
        from wmrl_cli.runtime import gpu_memory_gib

        total = gpu_memory_gib(int(str(device).partition(":")[2] or 0))
        where = f"{device}'s {total:.1f} GiB"
    elif host:
        from wmrl_cli.runtime import host_memory_available_gib

        available = host_memory_available_gib()
        if available is None:
            return None, str(device)
        shared = f" to each of {ranks} ranks ({available:.1f} GiB in all)" if ranks > 1 else ""
        return available / ranks, f"{HOST} available{shared}"
    else:
        return None, str(device)
    reserve = gpu_reserve(total, t.memory_reserve_gb)
    return max(total - reserve, 0.0), f"{where} less a {reserve:.1f} GiB reserve"


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
    def shown(self) -> bool:
        """Whether `print` shows the table: a GPU's plan (or one for `training.memory_budget_gb`),
        never the per-GPU phases of a run on a CPU, which would read as zeros."""
        return self.budget is not None and not self.where.startswith(HOST)

    @property
    def offload_world_model(self) -> bool:
        return self.plan.settings.offload_world_model

    @property
    def vae_batch(self) -> int | None:
        return self.plan.settings.vae_batch

    def print(self) -> None:
        from wmrl_cli.logging import console

        if self.shown:
            console.print(self.plan.table(self.budget))


def rl_memory_plan(
    cfg,
    policy_config,
    world_model_params: int,
    reward_model_bytes: int,
    world_size: int,
    device: str,
    imagination: ImaginationCost | None = None,
    host: bool = False,
) -> CheckedPlan:
    """The plan of `train-policy` (and co-evolve's RL stages), checked against the device
    (`host`: a CPU's available memory, `device_budget`): a ConfigError naming what to change
    when it does not fit. `world_model.offload_during_update`
    unset (None) turns offloading on where the plan needs it, and `world_model.vae_batch` unset
    decodes `VAE_BATCH` envs at a time where that is what the plan needs. `imagination`: what
    one env adds while the world model imagines (`imagination_cost`). The update's activations
    are the larger of a minibatch's and, with `algorithm.bc_coef`, the anchor's batch on a
    rank (`rl/bc_anchor.py`: its backward runs after the minibatch's has freed them)."""
    from wmrl_cli.memory.param_counts import policy_size
    from wmrl_cli.world_models.factory import world_model_dtype_name

    alg, wm = cfg.algorithm, cfg.world_model
    per_trajectory = -(-alg.max_episode_steps // policy_config.chunk_len)
    value_head = alg.name == "ppo" or policy_config.value_head
    sequences = alg.minibatch_trajectories * per_trajectory
    if alg.bc_coef > 0:  # the anchor's batch goes forward and back after the minibatch's
        sequences = max(sequences, max(1, alg.bc_batch_size // world_size))
    settings = training_settings(
        cfg,
        world_size,
        sequences,
        steps_per_trajectory=per_trajectory,
        kl_reference=alg.kl_coef > 0,
        world_model_dtype=world_model_dtype_name(wm.dtype, device),
        offload_world_model=bool(wm.offload_during_update) and world_model_params > 0,
        envs=alg.num_envs // world_size,
        vae_batch=wm.vae_batch,
    )

    def replan(s: PlanSettings, lora: bool = False) -> MemoryPlan:
        rank = s.lora_rank if (lora or s.lora_rank) else None
        policy = policy_size(policy_config, rank, value_head)
        sizes = PlanSizes(policy, world_model_params, reward_model_bytes, imagination)
        return plan_memory(sizes, s)

    budget, where = device_budget(cfg, device, world_size, host)
    plan = replan(settings)
    auto = world_model_params and budget is not None and not where.startswith(HOST)
    # each where its own phase is over: batching the decode lowers the rollout, offloading the
    # world model the update and the step
    if auto and wm.vae_batch is None and plan.rollout > budget and settings.envs > VAE_BATCH:
        plan = replan(replace(plan.settings, vae_batch=VAE_BATCH))
    over = auto and max(plan.update, plan.step) > budget
    if over and wm.offload_during_update is None:
        plan = replan(replace(plan.settings, offload_world_model=True))
    check_budget(plan, budget, where, replan, world_model_params > 0)
    return CheckedPlan(plan, budget, where)


def env_memory_plan(cfg, policy_config, env, world_size: int, device: str) -> CheckedPlan:
    """The trainer's plan, from the models its env holds (the world models, the reward model,
    the imagining model's backend and frame size), with `world_model.vae_batch` as the plan
    resolved it set on every world model that imagines (the confirming ones too)."""
    from wmrl_cli.training.sharding import frozen_models

    worlds, rewards = frozen_models(env)
    imagining = getattr(getattr(env, "imagined", env), "world_model", None)
    backend = getattr(imagining, "backend", None)
    cost = None
    pixels = getattr(imagining, "height", None), getattr(imagining, "width", None)
    if backend in IMAGINATION_256 and None not in pixels:
        context = getattr(imagining, "num_context_frames", cfg.world_model.context_frames)
        cost = imagination_cost(backend, *pixels, context, cfg.simulator.chunk_size)
    checked = rl_memory_plan(
        cfg,
        policy_config,
        sum(p.numel() for m in worlds for p in m.parameters()),
        sum(p.numel() * p.element_size() for m in rewards for p in m.parameters()),
        world_size,
        device,
        cost,
    )
    for world in worlds:
        world.vae_batch = checked.vae_batch
    return checked


def sft_memory_plan(
    cfg, policy_config, world_size: int, device: str, host: bool = False
) -> CheckedPlan:
    """The plan of `sft`: the policy alone, `sft.batch_size / ranks` sequences per step; over
    budget, the largest `--batch-size` that fits is one of the changes named."""
    from wmrl_cli.memory.param_counts import policy_size

    settings = training_settings(cfg, world_size, max(1, cfg.sft.batch_size // world_size))
    settings = replace(settings, lora_rank=None)  # sft trains every weight

    def replan(s: PlanSettings, lora: bool = False) -> MemoryPlan:
        return plan_memory(PlanSizes(policy_size(policy_config, s.lora_rank)), s)

    budget, where = device_budget(cfg, device, world_size, host)
    plan = replan(settings)
    extra: tuple[Remedy, ...] = ()
    if budget is not None and plan.peak > budget:
        fits = largest_fitting(lambda n: replan(replace(settings, sequences=n)).peak <= budget)
        if fits and fits < settings.sequences:
            smaller = replace(settings, sequences=fits)
            extra = (Remedy(f"--batch-size {fits * world_size}", smaller),)
    check_budget(plan, budget, where, replan, False, lora=False, extra=extra)
    return CheckedPlan(plan, budget, where)


def largest_fitting(fits: Callable[[int], bool], limit: int = 2**40) -> int:
    """The largest n in [1, limit] with fits(n) (fits falls from true to false as n grows); 0
    where not even 1 fits."""
    if not fits(1):
        return 0
    low, high = 1, 2
    while high < limit and fits(high):
        low, high = high, 2 * high
    high = min(high, limit)
    if fits(high):
        return high
    while high - low > 1:  # fits(low), not fits(high)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def sft_policy_config(cfg, text_vocab_size: int, action_dim: int):
    """The config of the policy `sft` trains from scratch (`sft.*`, the simulator's chunk and
    frame size)."""
    from wmrl_cli.policies.config import tiny_config

    s = cfg.sft
    return tiny_config(
        text_vocab_size,
        chunk_len=cfg.simulator.chunk_size,
        action_dim=action_dim,
        image_size=cfg.simulator.image_size,
        patch_size=s.patch_size,
        vision_hidden=s.vision_hidden,
        vision_layers=s.vision_layers,
        llm_hidden=s.llm_hidden,
        llm_layers=s.llm_layers,
        fused=s.fused_vision,
    )


def check_sft_memory(cfg, world_size: int = 1) -> CheckedPlan | None:
    """`sft`'s plan before anything is written or collected (the policy's config from
    `sft.*` and the simulator; its vocabulary at most `PLANNED_VOCABULARY` words), against this
    machine's GPU or, on a CPU, its available host memory: one line, exit 2, where the batch
    cannot fit. None for `sft.size=full`, which sft itself refuses."""
    import torch

    from wmrl_cli.sims.backends import resolve_simulator, simulator_action_dim

    if cfg.sft.size == "full":
        return None
    action_dim = simulator_action_dim(resolve_simulator(cfg.simulator))
    policy_config = sft_policy_config(cfg, PLANNED_VOCABULARY, action_dim)
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    return sft_memory_plan(cfg, policy_config, world_size, device, host=True)


def check_rl_memory(
    cfg, inputs, world_size: int, device: str | None = None, host: bool = False
) -> CheckedPlan:
    """The RL plan from the inputs' files (`jobs.inputs.Inputs`), before any of them loads:
    `train-policy` checks it before starting its ranks, `jobs.train_policy` before loading the
    policy. A ConfigError (exit 2) naming what to change where it does not fit. A published
    asset not downloaded yet (`Inputs.not_downloaded`, only `train-policy --plan` resolves
    one) counts at its published size: the full-size policy and world model, 256 x 256 frames.
    `host`: on a CPU, checked against the host memory available (a run that starts here)."""
    from wmrl_cli.assets.registry import ASSETS
    from wmrl_cli.data.reset_set import reset_frame_size
    from wmrl_cli.memory.param_counts import (
        policy_config_of,
        published_reward_bytes,
        weight_file_bytes,
        world_model_context_frames,
        world_model_geometry,
        world_model_params,
    )
    from wmrl_cli.policies.config import full_config

    if device is None:
        import torch

        device = "cuda:0" if torch.cuda.is_available() else "cpu"

    def on_disk(path):
        return path if path is not None and path not in inputs.not_downloaded else None

    def world_params(path) -> int:  # an absent asset: the full size of the backend it holds
        if on_disk(path) is not None:
            return world_model_params(path, cfg.world_model.backend)
        return world_model_params(None, ASSETS[path.name].backend or cfg.world_model.backend)

    worlds = [inputs.world_model, *inputs.confirm_world_models] if inputs.world_model else []
    params = sum(world_params(path) for path in worlds)
    backend = cfg.world_model.backend
    reward = weight_file_bytes(inputs.reward_model)
    if inputs.reward_model is not None and on_disk(inputs.reward_model) is None:
        reward = published_reward_bytes(cfg.reward_model.kind)
    policy = on_disk(inputs.policy)
    policy = full_config() if policy is None else policy_config_of(policy)
    cost = None
    if inputs.world_model:
        reset_set = on_disk(inputs.reset_set)
        frames = reset_frame_size(reset_set) if reset_set else None
        context = cfg.world_model.context_frames
        if on_disk(inputs.world_model) is None:
            geometry = (backend, *(frames or (256, 256)))
        else:
            geometry = world_model_geometry(inputs.world_model, frames)
            context = world_model_context_frames(inputs.world_model, context)
        cost = imagination_cost(*geometry, context, cfg.simulator.chunk_size)
    return rl_memory_plan(cfg, policy, params, reward, world_size, device, cost, host)
