"""Typed run configuration. Every section forbids unknown keys so that a typo fails loudly.

Sections mirror the pipeline: the real simulator, the policy, the world model, the reward
model, the RL algorithm, training, evaluation, rollout collection (with KIR keyframes) and
logging. Defaults are the embedded Meta-World setting; presets override them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from wmrl_cli.config.coevolve import CoevolveConfig
from wmrl_cli.config.lerobot import LerobotConfig
from wmrl_cli.config.reward_model import RewardModelConfig
from wmrl_cli.config.section import Section


class SimulatorConfig(Section):
    """The real simulator that evaluation and data collection talk to."""

    name: Literal["metaworld", "libero"] = Field(
        "metaworld", description="simulator backend: metaworld (embedded) or libero"
    )
    suite: str = Field(
        "mw10", description="task suite: mw10, mw3, mw2 (metaworld) or libero_spatial, ... (libero)"
    )
    image_size: int = Field(64, ge=16, le=512, description="square camera image side, pixels")
    camera: str = Field("corner", description="MuJoCo camera name")
    max_steps: int = Field(128, ge=1, le=10_000, description="env steps before truncation")
    chunk_size: int = Field(
        8, ge=1, le=64, description="actions per chunk (policy and world model)"
    )
    num_envs: int = Field(10, ge=1, le=4096, description="environments stepped as one batch")
    num_workers: int = Field(2, ge=0, le=256, description="simulator processes (0: in-process)")
    seed: int = Field(0, ge=0, description="base seed: episode seed = seed + init_id")
    terminate_on_success: bool = True


class PolicyConfig(Section):
    """Which policy acts: `expert` (scripted), `random`, or a checkpoint directory."""

    name: str = Field("expert", min_length=1)
    noise_std: float = Field(0.0, ge=0.0, le=10.0, description="Gaussian action noise (expert)")
    temperature: float = Field(1.6, gt=0.0, le=100.0)
    greedy: bool = False
    top_k: int | None = Field(None, ge=1, le=256)


class WorldModelConfig(Section):
    backend: Literal["wan", "opensora"] = "wan"
    size: Literal["tiny", "full"] = "tiny"
    path: str | None = Field(None, description="checkpoint directory or asset name")
    reset_set: str | None = Field(
        None,
        description="initial states of the imagined env: an episode store or an RLinf "
        "reset folder (dataset/trajN.npy)",
    )
    context_frames: int = Field(4, ge=1, le=16)
    num_inference_steps: int | None = Field(
        None, ge=1, le=1000, description="sampling steps (None: the backend's, Wan 5, OpenSora 10)"
    )
    noise_seed: int | None = Field(
        None,
        ge=0,
        description="draw every prediction's sampling noise from this seed, a deterministic "
        "world model (RLinf's Wan env: 0); None: fresh noise on every call",
    )
    bf16_timesteps: bool = Field(
        False, description="Wan: round the denoiser's timesteps to bfloat16, as RLinf runs it"
    )
    dtype: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="the weights of a world model that imagines (RL, eval, co-evolve), its "
        "VAE's too: auto is bf16 on a GPU (as RLinf's envs load them) and float32 on a CPU",
    )
    offload_during_update: bool | None = Field(
        None,
        description="move the frozen world and reward models to CPU memory for each policy "
        "update and back for the next rollout; null: where the memory plan needs it",
    )
    vae_batch: int | None = Field(
        None,
        ge=1,
        description="the most envs one VAE encode or decode takes while imagining: the decode "
        "holds about 0.7 GiB per env at 256x256, 43 GiB for 64 envs; null: all at once, or 4 "
        "where the memory plan needs it",
    )
    # training (`wmrl train-wm`)
    carry_detail: bool = Field(
        True,
        description="add what the autoencoder loses of the last real frame to every prediction "
        "(world models trained by wmrl; the published ones run without it)",
    )
    motion_loss_weight: float = Field(
        0.0,
        ge=0.0,
        description="weight the denoiser loss towards latent positions that change (1 + m x "
        "change / mean change): the arm and what it moves, which the actions decide",
    )
    # the stronger action path (world_models/action_conditioning.py); off = published behaviour
    action_tokens: bool = Field(
        False, description="per-frame action tokens (action + running sum) in the token stream"
    )
    action_modulation: Literal["default", "all"] = Field(
        "default",
        description="OpenSora: 'all' gives the actions an adaLN of their own in every block and "
        "the final layer (default: summed into the spatial blocks' timestep embedding); Wan "
        "already modulates every block with its actions",
    )
    action_dropout: float = Field(
        0.0, ge=0.0, lt=1.0, description="training: P(actions -> learned null action)"
    )
    action_guidance: float | None = Field(
        None,
        ge=0.0,
        description="sampling: guidance scale on the actions (1: none); None: the model's own "
        "(a new model: 1). Applied wherever a world model imagines (RL, eval, co-evolve). "
        "Why: docs/results.md#action-guidance-at-2-sampling-steps",
    )
    distill_guidance: bool = Field(
        False,
        description="train-wm --init TEACHER: train the denoiser to give in one pass the "
        "teacher's velocity guided at action_guidance (the teacher's own where unset), then "
        "sample with no second pass: half the denoiser's cost in imagination "
        "(docs/results.md#action-guidance-distilled-into-one-pass)",
    )
    train_shift: float | None = Field(
        None,
        gt=0.0,
        description="shift of the logit-normal training noise levels (> 1: more high-noise "
        "levels, where the sampler decides the motion); None: the backend's",
    )
    time_limit_min: float | None = Field(
        None,
        gt=0.0,
        description="wall-clock budget of the whole run, autoencoder included: the denoiser "
        "stops (validates, saves) once it is spent",
    )
    vae_init: str | None = Field(
        None,
        description="reuse the trained autoencoder of this world model (a train-wm run or model "
        "directory) instead of training one; the denoiser is new",
    )
    vae_steps: int = Field(1500, ge=0, description="autoencoder steps when training from scratch")
    vae_batch_size: int = Field(8, ge=1)
    vae_lr: float = Field(1e-3, gt=0.0)
    vae_motion_weight: float = Field(
        0.0,
        ge=0.0,
        description="weight the autoencoder's reconstruction loss on pixels that move in the "
        "clip (1 + m): the dot or the arm, a few percent of a frame",
    )
    steps: int = Field(3000, ge=1, description="denoiser steps")
    batch_size: int = Field(16, ge=1)
    lr: float = Field(5e-4, gt=0.0, le=1.0)
    warmup_steps: int = Field(100, ge=0)
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant",
        description="after the warmup: a constant lr, or a cosine decay to 0 at `steps`, so "
        "that the model saved is not wherever a constant lr left it (a refinement's last steps "
        "then move it less)",
    )
    ema_decay: float = Field(0.99, ge=0.0, lt=1.0)
    grad_clip: float = Field(1.0, gt=0.0)
    sharding: Literal["none", "fsdp"] = Field(
        "none",
        description="training on several ranks (train-wm --num-processes, co-evolve's "
        "refinement): none, every rank a replica of the denoiser, its gradients, AdamW state and "
        "EMA (data parallel); fsdp, each rank 1/N of them (FSDP2, a unit per block): Wan2.2-5B's "
        "96 GiB over 8 ranks is 12 GiB each",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="training: recompute each denoiser block's activations in the backward pass "
        "(the same gradients, less memory: OpenSora's step at 256x256 from 63 to 21 GiB)",
    )
    window_stride: int = Field(2, ge=1, description="training windows start every N steps")
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    val_every: int = Field(500, ge=1)
    val_horizon: int = Field(32, ge=1)
    val_episodes: int = Field(16, ge=1)
    save_every: int = Field(500, ge=1)
    keep_checkpoints: int = Field(
        2, ge=0, description="step checkpoints kept on disk, the newest (0: every one)"
    )


class AlgorithmConfig(Section):
    name: Literal["grpo", "ppo"] = "grpo"
    env: Literal["imagined", "simulator"] = Field(
        "imagined",
        description="where RL rollouts run: the imagined env (world + reward model) or the "
        "real simulator (`simulator.*`)",
    )
    sim_init_ids: int = Field(
        1000, ge=1, description="env=simulator: training initial states (init ids) to draw from"
    )
    sim_init_offset: int = Field(
        3_000_000,
        ge=0,
        description="env=simulator: training init ids start here, apart from the evaluation "
        "seeds (0..) and the SFT demonstrations (1,000,000+)",
    )
    group_size: int = Field(8, ge=1)
    reset_sampling: Literal["uniform", "varied_outcome"] = Field(
        "uniform",
        description="how groups draw their initial states: uniformly (RLinf, WMPO) or, "
        "varied_outcome, tasks in proportion to the chance that a group of the task has "
        "varied outcomes under the current policy (envs/reset_sampler.py)",
    )
    train_tasks: list[str] | None = Field(
        None,
        min_length=1,
        description="the tasks RL draws its initial states from (names as the env lists "
        "them; null: every task of the reset set or suite). co-evolve sets it per stage with "
        "coevolve.trust_audit_per_task",
    )
    clip_low: float = Field(0.2, ge=0.0, le=1.0)
    clip_high: float = Field(0.28, ge=0.0, le=10.0)
    dual_clip: float | None = Field(None, gt=1.0)
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    normalize_advantage_std: bool = True
    filter_groups: bool = True
    value_clip: float = Field(0.2, ge=0.0)
    huber_delta: float = Field(10.0, gt=0.0)
    entropy_coef: float = Field(0.0, ge=0.0)
    kl_coef: float = Field(
        0.0,
        ge=0.0,
        description="weight of a k3 KL penalty to the policy as given (a frozen copy; 0 in "
        "RLinf's and WMPO's configs): an anchor against forgetting what the policy could do",
    )
    bc_coef: float = Field(
        0.0,
        ge=0.0,
        description="weight of a behaviour-cloning term on the successful episodes of bc_data, "
        "added at every optimizer step (DAPG, Rajeswaran et al. 2018): an anchor from real "
        "successes on every task, including those RL's verdict never pays; 0: off",
    )
    bc_data: str | None = Field(
        None,
        description="bc_coef: the episode store whose successful episodes the term clones "
        "(co-evolve's data/reward_real: the base policy's clean real rollouts, already paid for)",
    )
    bc_batch_size: int = Field(
        64, ge=1, description="bc_coef: steps cloned per optimizer step, all ranks together"
    )
    bc_tasks: list[str] | None = Field(
        None,
        min_length=1,
        description="bc_coef: clone the successes of these tasks alone (names as in bc_data's "
        "index; null: every task), e.g. those whose imagined loop is broken, so that the term "
        "does not hold back tasks RL in the world model can learn",
    )
    aggregation: Literal["token_mean", "trajectory_mean", "masked_mean_ratio"] = Field(
        "trajectory_mean",
        description="trajectory_mean: masked GRPO (WoVR eq. 11); masked_mean_ratio: RLinf's "
        "(trajectory mean over all trajectories, scaled by max_episode_steps / rollout length)",
    )
    filtered_in_denominator: bool = Field(
        False,
        description="trajectory_mean: filtered trajectories count in the average as zeros "
        "(RLinf; masked_mean_ratio always counts them) instead of being dropped",
    )
    normalize_gae_advantages: bool = Field(
        False, description="PPO: normalize GAE advantages (masked mean and std, + 1e-5; RLinf)"
    )
    filter_band: tuple[float, float] | None = Field(
        None,
        description="filter_groups: keep groups whose mean return lies in [low, high] (RLinf: "
        "[0.5, 4.5]); None: drop groups whose returns are all equal",
    )
    rollout_epochs: int = Field(
        1, ge=1, le=1024, description="rollouts of num_envs per step, one batch (RLinf: 16)"
    )
    min_kept_groups: int = Field(
        0,
        ge=0,
        description="dynamic sampling (DAPO, WMPO): after the rollout_epochs rollouts, draw "
        "further rollouts of num_envs until at least this many groups (all ranks) pass "
        "filter_groups, or max_rollout_epochs is reached; 0: off. GRPO with filter_groups only",
    )
    max_rollout_epochs: int = Field(
        4, ge=1, le=1024, description="dynamic sampling: at most this many rollouts per step"
    )
    optimizer_steps: int = Field(
        1,
        ge=1,
        le=1024,
        description="optimizer steps per update epoch: the shuffled trajectories are cut into "
        "this many batches (RLinf 4: rollout size / global_batch_size)",
    )
    kir_step_reset: bool = Field(
        False,
        description="an episode started at a keyframe counts its steps from 0 and runs the "
        "full max_episode_steps (RLinf); False: from the keyframe's step",
    )

    @field_validator("filter_band")
    @classmethod
    def _band_not_empty(cls, band: tuple[float, float] | None) -> tuple[float, float] | None:
        if band is not None and band[0] > band[1]:
            raise ValueError(f"the band is empty: low {band[0]} > high {band[1]}")
        return band

    @model_validator(mode="after")
    def _bc_needs_data(self) -> AlgorithmConfig:
        if self.bc_coef > 0 and not self.bc_data:
            raise ValueError(
                "bc_coef > 0 clones the successes of algorithm.bc_data: give an episode store"
            )
        return self

    @model_validator(mode="after")
    def _dynamic_sampling_needs_filter(self) -> AlgorithmConfig:
        if self.min_kept_groups and (self.name != "grpo" or not self.filter_groups):
            raise ValueError(
                "min_kept_groups (dynamic sampling) needs name=grpo with filter_groups=true: "
                "it draws rollouts until enough groups survive the filter"
            )
        if self.min_kept_groups and self.max_rollout_epochs < self.rollout_epochs:
            raise ValueError(
                f"max_rollout_epochs {self.max_rollout_epochs} < rollout_epochs "
                f"{self.rollout_epochs}: dynamic sampling adds rollouts, never removes them"
            )
        return self

    kir_context: Literal["pad", "last_frames"] = Field(
        "pad",
        description="RLinf reset files: 'last_frames' (RLinf) takes the file's last "
        "context_frames frames when it holds that many, else the first frame repeated; 'pad' "
        "takes the frames after the first, padding short files with the oldest of them",
    )
    num_envs: int = Field(
        64, ge=1, description="envs per rollout (imagined or simulated), all ranks together"
    )
    max_episode_steps: int = Field(256, ge=1)
    update_epochs: int = Field(1, ge=1)
    minibatch_trajectories: int = Field(8, ge=1, description="trajectories per forward pass")
    enable_kir: bool = True
    eval_every: int = Field(0, ge=0, description="real-simulator evaluation every N steps (0: end)")
    eval_trials: int = Field(
        5, ge=0, description="real-simulator trials per task (0: no real-simulator evaluation)"
    )


class TrainingConfig(Section):
    lr: float = Field(2e-5, gt=0.0, le=1.0)
    value_lr: float = Field(3e-3, gt=0.0, le=1.0)
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = Field(1e-5, gt=0.0)
    weight_decay: float = Field(0.01, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    steps: int = Field(100, ge=1)
    lora_rank: int | None = Field(None, ge=1, le=1024)
    bf16: bool = False
    save_every: int = Field(10, ge=1)
    keep_checkpoints: int = Field(
        2, ge=0, description="step checkpoints kept on disk, the newest (0: every one)"
    )
    # Memory at full size (memory/plan.py, training/sharding.py; docs/libero.md).
    sharding: Literal["none", "fsdp"] = Field(
        "none",
        description="none: every rank holds the whole policy and its optimizer state (data "
        "parallel); fsdp: weights, gradients and optimizer state are sharded over the ranks "
        "(torch FSDP2), and each rollout gathers the whole policy in its compute dtype",
    )
    param_dtype: Literal["float32", "bf16"] = Field(
        "float32",
        description="the trained policy's weights and gradients: float32 (master weights; "
        "training.bf16 runs the forward in bf16) or bf16 (RLinf's `precision: bf16`: AdamW "
        "updates bf16 weights, and an update below 1/256 of a weight rounds away); weights "
        "that do not train (LoRA's base) are bf16 under training.bf16",
    )
    optimizer_dtype: Literal["param", "float32", "bf16"] = Field(
        "param", description="AdamW's two moments: in the weights' dtype (param), float32 or bf16"
    )
    activation_checkpointing: bool = Field(
        False,
        description="keep only each Llama and vision block's input and recompute the block in "
        "the backward pass (less memory, about a third more compute)",
    )
    cpu_offload: bool = Field(
        False,
        description="with sharding=fsdp on GPUs: the sharded weights, gradients and AdamW state "
        "live in CPU memory and AdamW steps there (FSDP2's CPUOffloadPolicy)",
    )
    memory_budget_gb: float | None = Field(
        None,
        gt=0.0,
        description="GiB per GPU to plan for (default: the GPU's own memory): the memory plan "
        "must fit in it less memory_reserve_gb, else the run stops before loading, naming "
        "what to change (a CPU run is checked against the host memory available)",
    )
    memory_reserve_gb: float | None = Field(
        None,
        ge=0.0,
        description="GiB of each GPU the plan leaves free for what it cannot see: the CUDA "
        "context, NCCL's buffers, the allocator's fragmentation (default: 1 GiB + 5% of the "
        "GPU, 5.0 of an 80 GB H100)",
    )

    dist_timeout_minutes: float = Field(
        30.0,
        gt=0.0,
        le=10_080.0,
        description="minutes a rank waits in a collective for the other ranks before the "
        "process group stops the run (NCCL's own default is 10)",
    )

    @model_validator(mode="after")
    def _offload_needs_fsdp(self) -> TrainingConfig:
        if self.cpu_offload and self.sharding != "fsdp":
            raise ValueError("cpu_offload offloads FSDP's shards: set training.sharding=fsdp")
        return self


class EvalConfig(Section):
    episodes_per_task: int = Field(10, ge=1, le=100_000, description="trials per task")
    save_video: bool = False
    video_fps: int = Field(20, ge=1, le=240)


class KirConfig(Section):
    """Keyframe selection for keyframe-initialized rollouts (docs/formats.md#kir)."""

    enabled: bool = False
    chunks_before_success: list[int] = Field(
        default_factory=lambda: [1, 2, 4],
        description="in successful episodes, keyframes this many chunks before the success",
    )
    stall_threshold: float = Field(
        2.0,
        ge=0.0,
        description="mean absolute pixel change per chunk below which a failed "
        "episode counts as stalled (uint8 units)",
    )
    max_stall_keyframes: int = Field(2, ge=0, description="stall keyframes kept per failed episode")
    min_context: int = Field(4, ge=0, description="frames a keyframe needs before it")


class PerturbationConfig(Section):
    """Action perturbation in `wmrl rollout` (any policy), so that the stored actions vary
    independently of the scene (world-model data; policies/perturbation.py)."""

    kind: Literal["none", "gaussian", "ou", "chunk_offset"] = Field(
        "none",
        description="noise on the policy's actions: none, gaussian (i.i.d. per step), ou "
        "(Ornstein-Uhlenbeck per env, temporally correlated) or chunk_offset (one offset per "
        "episode chunk)",
    )
    std: float = Field(
        0.5, ge=0.0, le=10.0, description="noise std (ou: its stationary std), action units"
    )
    ou_theta: float = Field(
        0.15, gt=0.0, le=1.0, description="ou: mean reversion per step (lag-1 correlation 1-theta)"
    )
    random_chunk_prob: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="probability that an episode chunk (simulator.chunk_size steps) is replaced "
        "by uniform random actions in [-1, 1]",
    )


class RolloutConfig(Section):
    episodes_per_task: int = Field(10, ge=1, le=100_000)
    kir: KirConfig = Field(default_factory=KirConfig)
    perturbation: PerturbationConfig = Field(default_factory=PerturbationConfig)


class SftConfig(Section):
    """Behaviour cloning of the base policy from scripted-expert demonstrations (`wmrl sft`)."""

    demos_per_task: int = Field(10, ge=1, le=100_000)
    demo_noise_std: float = Field(0.0, ge=0.0, le=10.0, description="expert action noise")
    demo_seed_offset: int = Field(
        1_000_000,
        ge=0,
        description="demo seeds = simulator.seed + this + init id, so they "
        "never overlap evaluation seeds",
    )
    data: str | None = Field(None, description="train on this episode store instead")
    size: Literal["tiny", "full"] = "tiny"
    patch_size: int = Field(8, ge=1)
    vision_hidden: int = Field(64, ge=8)
    vision_layers: int = Field(2, ge=1)
    llm_hidden: int = Field(128, ge=16)
    llm_layers: int = Field(3, ge=1)
    fused_vision: bool = True
    steps: int = Field(2000, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(1e-3, gt=0.0, le=1.0)
    weight_decay: float = Field(0.01, ge=0.0)
    warmup_steps: int = Field(100, ge=0)
    grad_clip: float = Field(1.0, gt=0.0)
    augment_shift: int = Field(4, ge=0, le=64, description="random-shift augmentation, pixels")
    save_every: int = Field(500, ge=1)
    keep_checkpoints: int = Field(
        2, ge=0, description="step checkpoints kept on disk, the newest (0: every one)"
    )
    log_every: int = Field(10, ge=1)


class LoggingConfig(Section):
    tensorboard: bool = True
    trackers: list[Literal["wandb", "trackio"]] = Field(
        default_factory=list,
        description="experiment trackers beside TensorBoard (--log-with): the same scalars, "
        "from the main process; none by default (nothing is sent anywhere)",
    )
    progress: bool = True
    log_every: int = Field(
        10, ge=1, description="steps between plain log lines where stdout is no terminal"
    )


class RunConfig(Section):
    """A whole run; `config.yaml` in every run directory is this object, resolved."""

    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    world_model: WorldModelConfig = Field(default_factory=WorldModelConfig)
    reward_model: RewardModelConfig = Field(default_factory=RewardModelConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    sft: SftConfig = Field(default_factory=SftConfig)
    coevolve: CoevolveConfig = Field(default_factory=CoevolveConfig)
    lerobot: LerobotConfig = Field(default_factory=LerobotConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    output_dir: Path | None = Field(
        None, description="run directory (default: runs/<cmd>[-<preset>])"
    )
    assets_dir: Path | None = Field(
        None,
        description="where `wmrl download` put the published assets that config values name "
        "(default: $WMRL_ASSETS, else ./assets)",
    )
    num_threads: int = Field(0, ge=0, le=256, description="torch threads per process (0: auto)")
    precision: Literal["auto", "fp32", "bf16"] | None = Field(
        None,
        description="world models' forward passes (training and imagination): bf16 autocast "
        "with float32 master weights and losses, or fp32; auto: bf16 where the device supports "
        "it (a GPU, or a CPU with native bf16). Unset: bf16 on a GPU (as the memory plans "
        "count), float32 on a CPU, where bf16 gains little at the tiny sizes "
        "(docs/benchmarks.md)",
    )
    compile_world_model: bool = Field(
        False,
        description="torch.compile the world model's denoiser and autoencoder decoder for "
        "imagination (train-policy, co-evolve's RL; docs/benchmarks.md); the first chunks pay "
        "a minute or two of compilation",
    )
