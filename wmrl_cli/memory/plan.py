"""The estimated per-GPU memory of a policy-training run, before anything large is loaded.

Three phases, the largest one is the peak:

- rollout: the policy's weights and optimizer state stay where they are, the frozen world
  model (and VAE) and reward model imagine with their working set (the VAE decode grows with
  the envs it takes at once: `world_model.vae_batch`), and under FSDP the whole policy is
  gathered in its compute dtype for the rollout's forward passes (`training/sharding.py`);
- update: weights, gradients, AdamW's two moments, the activations a micro-batch keeps for
  backward, the compute-dtype weight copies autograd keeps, and the world model unless it is
  offloaded during the update;
- AdamW's step: weights, gradients, moments and torch's multi-tensor step's temporary (one
  moment's size); the activations are gone by then.

Sizes come from parameter counts (`memory/param_counts.py`, built on the meta device) and
bytes per element: float32 4, bf16 2. Sharding (FSDP) divides weights, gradients and optimizer
state by the ranks; CPU offload moves all three to CPU memory. With float32 weights and bf16
compute, the float32 weights are the master copy (of what trains: LoRA's frozen base is kept
in bf16, used as it is); autocast's bf16 copy of a weight is kept for
backward by the layer that used it (every block without checkpointing, one block with it), and
a rollout's forward caches a copy of every trained weight until it leaves autocast (FSDP
gathers the compute dtype itself, one block at a time in the update, two in flight).

Activations, per token and block, are what autograd keeps for backward (SDPA keeps no attention
matrix). Llama (RMSNorm in float32, SwiGLU with MLP width i): 16 h + (7 h + 4 i) x b bytes; a
ViT block (LayerNorm, GELU MLP of width m, layer scale): (11 h + 2 m) x b bytes, for compute
dtype size b. With activation checkpointing the stack's input and each block's output are kept,
in the residual stream's dtype (float32 under float32 weights, whose embeddings are float32),
plus one block recomputed at a time. Frozen vision towers (LoRA) keep nothing; the projector
keeps its linears' inputs and GELUs' outputs. A micro-batch is `algorithm.minibatch_trajectories`
x ceil(max_episode_steps / chunk) sequences of 1 + patches + 32 prompt + C x A action + 1 tokens
(every step valid: the worst case). `tests/helpers/memory_plan_count.py` counts what the code
allocates at full size on fake tensors: the plan's peak phase is within 1% of the count on one
GPU and on rank 0 of 8 FSDP ranks; the update phase of full fine-tuning it overstates by 8-12%,
which matters only with bf16 moments, where that phase is the peak (docs/benchmarks.md). Not
counted: the CUDA context (~0.5 GiB), library workspaces and allocator fragmentation (the GPU
rows of `benchmarks/gpu_fullsize.py`). Whether a plan fits, and what to change where it does
not: `memory/budget.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from wmrl_cli.memory.param_counts import PolicySize, Stack

GIB = 2**30
BYTES = {"float32": 4, "fp32": 4, "bf16": 2, "bfloat16": 2}


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
    envs: int = 0  # RL: envs on this rank (the policy's rollout batch, imagined or simulated)
    vae_batch: int | None = None  # world_model.vae_batch

    @property
    def shards(self) -> int:
        return self.world_size if self.sharding == "fsdp" else 1


@dataclass(frozen=True)
class ImaginationCost:
    """Bytes one imagined env adds while the world model predicts a chunk: its VAE's work (the
    frames at full resolution through the decoder's widest layers), its share of the
    denoiser's working set, and its decoded frames held while later envs decode."""

    decode: int
    denoise: int
    held: int = 0


def window_latent_frames(backend: str, context_frames: int, chunk: int) -> tuple[int, int]:
    """(conditioning, predicted) latent frames of a window of `context_frames` and a `chunk`:
    Wan's causal VAE makes one latent of the reference frame and one of every 4 frames after
    it; OpenSora's 2D VAE one of every frame, with no reference frame."""
    if backend == "wan":
        return 1 + context_frames // 4, chunk // 4
    return context_frames, chunk


def _wan_256(context_frames: int, chunk: int) -> tuple[float, float, int]:
    # the causal VAE decodes latent frame by latent frame with a cache: of the decode only the
    # decoded frames grow with the window (bf16 and uint8, 3 bytes a pixel's channel), and it
    # decodes the whole window
    decoded = 1 + context_frames + chunk
    conditioning, predicted = window_latent_frames("wan", context_frames, chunk)
    return 0.658 + 0.00055 * decoded, 0.0130 * conditioning + 0.0120 * predicted, decoded


def _opensora_256(context_frames: int, chunk: int) -> tuple[float, float, int]:
    # the 2D VAE takes all frames at once: the chunk's decode or, where larger, the context's
    # encode; the denoiser's tokens are the window's frames; it decodes the chunk
    decode = max(0.0939 * chunk, 0.0787 * context_frames)
    return decode, 0.01003 * (context_frames + chunk), chunk


# GiB per env at 256x256 in bf16 (RLinf's settings), by the window's frames: the VAE's work,
# the denoiser's share and the frames it decodes. Counted by tests/helpers/memory_plan_count.py on
# fake tensors for the published configs, 4 to 16 context frames and chunks of 4 to 16
# (docs/benchmarks.md). Other frame sizes scale by pixels (counted at 128x128 and 512x512:
# within 2.6%). The decode and the denoiser hardly overlap: the peak is the larger of the two,
# the decode's with the frames of the envs decoded before it.
IMAGINATION_256 = {"wan": _wan_256, "opensora": _opensora_256}


def imagination_cost(
    backend: str, height: int, width: int, context_frames: int = 4, chunk: int = 8
) -> ImaginationCost:
    """What one env adds while `backend` imagines `chunk` frames after `context_frames` at
    height x width (the seeds' presets: 4 and 8)."""
    decode, denoise, decoded_frames = IMAGINATION_256[backend](context_frames, chunk)
    scale = height * width / 256**2 * GIB
    # uint8 frames, each decoded batch's and their concatenation
    held = 2 * decoded_frames * height * width * 3
    return ImaginationCost(int(decode * scale), int(denoise * scale), held)


def imagination_bytes(cost: ImaginationCost | None, envs: int, vae_batch: int | None) -> int:
    """The world model's working set for `envs` envs, `vae_batch` of them per VAE call."""
    if cost is None or envs <= 0:
        return 0
    at_once = min(envs, vae_batch or envs)
    return max(cost.decode * at_once + cost.held * (envs - at_once), cost.denoise * envs)


@dataclass(frozen=True)
class PlanSizes:
    """Parameter counts (the policy at the run's LoRA rank), the reward model's bytes and
    what imagination adds per env."""

    policy: PolicySize
    world_model: int = 0
    reward_model_bytes: int = 0
    imagination: ImaginationCost | None = None


PHASES = ("rollout", "update", "AdamW step")


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

    @property
    def peak_phase(self) -> int:
        """The phase that holds the peak: 0 the rollout, 1 the update, 2 AdamW's step."""
        phases = [self.rollout, self.update, self.step]
        return phases.index(max(phases))

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
        for phase in PHASES:
            table.add_column(f"{phase} GiB", justify="right")
        for label, *phases in self.rows:
            if any(phases):
                table.add_row(label, *(f"{x:.2f}" for x in phases))
        tail = "" if budget is None else f" of {budget:.1f}"
        cells = ["", "", ""]
        cells[self.peak_phase] = f"{self.peak:.2f}{tail}"  # under the phase that holds it
        table.add_row("peak", *cells, style="bold")
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


def rollout_forward_bytes(
    policy: PolicySize, envs: int, b: int, w: int, sharding: str, frozen: int | None = None
) -> int:
    """The policy's forward for `envs` observations without gradients: one Llama block's working
    set at a time and, with float32 weights under bf16 autocast (unsharded), autocast's copies:
    a cached one of every trained weight until the forward leaves autocast, and the current
    block's frozen weights (LoRA) where they are kept in `frozen` bytes wider than the compute
    dtype. It runs when the world model does not, so it and imagination do not add."""
    if not envs:
        return 0
    llama = policy.stacks[0]
    copies = 0
    if b < w and sharding != "fsdp":
        lora = policy.trainable < 0.99 * policy.params
        frozen_block = policy.largest_kept_block if lora and (frozen or w) > b else 0
        copies = (policy.trainable + frozen_block) * b
    return envs * llama.tokens * block_bytes_per_token(llama, b) + copies


def frozen_bytes(s: PlanSettings) -> int:
    """Bytes per frozen weight (LoRA's base, its vision towers): the compute dtype's where it is
    narrower than the weights' (they need no master copy: `PolicySharding.frozen_dtype`)."""
    return min(BYTES[s.param_dtype], BYTES[s.compute_dtype])


def plan_memory(sizes: PlanSizes, s: PlanSettings) -> MemoryPlan:
    """The per-GPU estimate for `sizes` under `s` (see the module doc)."""
    p = sizes.policy
    wb, ob, cb = BYTES[s.param_dtype], BYTES[s.optimizer_dtype], BYTES[s.compute_dtype]
    on_gpu = 0 if s.cpu_offload and s.sharding == "fsdp" else 1
    shards = s.shards
    lora = p.trainable < 0.99 * p.params
    fb = frozen_bytes(s)
    frozen = p.params - p.trainable
    weights = _gib((p.trainable * wb + frozen * fb) / shards) * on_gpu
    grads = _gib(p.trainable * wb / shards) * on_gpu
    moments = _gib(2 * p.trainable * ob / shards) * on_gpu
    # torch's multi-tensor AdamW (the default on GPUs) makes one moment-sized temporary;
    # MixedStateAdamW (moments in another dtype than the weights) steps one tensor at a time,
    # through up to five float32 copies of it (gradient, moments, weight, denominator)
    if ob == wb:
        step_temporary = _gib(p.trainable * ob / shards) * on_gpu
    else:
        step_temporary = _gib(5 * p.largest_trainable * 4 / shards) * on_gpu
    if s.sharding == "fsdp":
        copies = ("gathered for the rollout / two blocks in flight", _gib(p.params * cb))
        copies_update = _gib(2 * p.largest_unit * cb)
        residual = cb  # the gathered weights are in the compute dtype
    elif cb < wb:  # the bf16 copies of float32 weights that autograd keeps for backward
        copies = ("bf16 weight copies kept for backward (autocast)", 0.0)
        blocks = p.largest_kept_block if s.activation_checkpointing else p.kept_block_params
        if lora and fb == cb:  # a bf16 base is used as it is: only what trains is copied
            copies_update = _gib(p.trainable * cb)
        else:
            copies_update = _gib((blocks + p.projector_params) * cb)
        # the embeddings' dtype: float32 (trained) keeps the residual stream float32
        residual = fb if lora else wb
    else:
        copies, copies_update, residual = ("", 0.0), 0.0, wb
    acts = _gib(activation_bytes(p, s.sequences, cb, residual, s.activation_checkpointing))
    imagination = imagination_bytes(sizes.imagination, s.envs, s.vae_batch)
    wm = _gib(sizes.world_model * BYTES[s.world_model_dtype])
    rm = _gib(sizes.reward_model_bytes)
    kept = 0.0 if s.offload_world_model else 1.0
    weight_label = "float32 master" if wb == 4 and cb == 2 else s.param_dtype
    if lora:
        weight_label += f", {p.trainable / 1e6:.0f} M trained"
        weight_label += ", frozen base bf16" if fb < wb else ""
    # the KL reference computes as the policy (`PolicySharding.reference_dtype`)
    rb = cb if s.sharding == "fsdp" else fb if lora else wb
    rows = [
        (f"policy weights ({_params(p.params)}, {weight_label})", weights, weights, weights),
        (f"policy {copies[0]}", copies[1], copies_update, 0.0),
        (f"gradients ({s.param_dtype})", 0.0, grads, grads),
        (f"AdamW moments ({s.optimizer_dtype})", moments, moments, moments),
        (
            "AdamW step temporary (" + ("multi-tensor)" if ob == wb else "per tensor)"),
            0.0,
            0.0,
            step_temporary,
        ),
        (
            f"activations ({s.sequences} sequences"
            + (", checkpointed)" if s.activation_checkpointing else ")"),
            0.0,
            acts,
            0.0,
        ),
        (
            "KL reference policy (frozen)",
            *(3 * [_gib(p.params * rb)] if s.kl_reference else [0, 0, 0]),
        ),
        (
            f"world model + VAE ({_params(sizes.world_model)}, {s.world_model_dtype}"
            + (", offloaded in the update)" if s.offload_world_model else ")"),
            wm,
            wm * kept,
            wm * kept,
        ),
        (
            f"rollout working set ({s.envs} envs: the larger of imagination"
            + (f", VAE {s.vae_batch} at a time," if s.vae_batch else "")
            + " and the policy's forward with its weight copies)",
            _gib(max(imagination, rollout_forward_bytes(p, s.envs, cb, wb, s.sharding, fb))),
            0.0,
            0.0,
        ),
        ("reward model", rm, rm * kept, rm * kept),
    ]
    return MemoryPlan(tuple((label, *map(float, phases)) for label, *phases in rows), s)
