"""The `reward_model` section of the run config: the learned judge RL imagines with (its
path, kind and threshold) and what confirms or replaces its verdict (`source`: the judge, its
calls verified by the real simulator, or the simulator itself; the recall floors)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from wmrl_cli.config.section import Section


class RewardModelConfig(Section):
    kind: Literal["resnet", "taskemb_resnet", "videomae", "latent"] = "resnet"
    path: str | None = None
    source: Literal["model", "verified", "simulator"] = Field(
        "model",
        description="what judges success in the imagined env: the reward model; `verified`, "
        "the reward model's calls, each confirmed by the real simulator replaying the episode "
        "from its stored start up to the call (real steps for the calls only: "
        "envs/verified.py); or (a diagnostic control that costs real steps for every step) the "
        "real simulator replaying each episode's actions (envs/simulator_judged.py)",
    )
    keep_verified_calls: bool = Field(
        True,
        description="with source=verified: keep every call as an imagined episode up to the "
        "call labelled by its replay, in RUN/verified_calls/step_N (docs/formats.md; the "
        "judge's hardest negatives); false saves the disk and the write time at full size",
    )
    refuted_calls: Literal["end", "continue"] = Field(
        "end",
        description="with source=verified: what a call the simulator refutes does to its "
        "episode. `end`: it ends as a failure. `continue`: it goes on in the world model, and "
        "the judge's next call is replayed from where the last replay stopped, so a success "
        "the judge called too early is still paid when it comes; an episode then costs at most "
        "the exact verdict's real steps (envs/verified.py). Why: "
        "docs/results.md#the-judge-benchmark",
    )
    exact_fraction: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="with source=verified: the fraction of each rollout's groups judged "
        "exactly, by the real simulator stepping beside the world model, so that a success "
        "the judge did not call is paid too (a recall floor: docs/results.md); costs real "
        "steps for every step of those groups (envs/verified.py)",
    )
    task_recall_floor: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="with source=verified: a per-task recall floor (0: off). A task's groups "
        "are judged exactly, as exact_fraction's are, until the judge has called at least this "
        "fraction of the real successes seen in its exactly judged episodes, over at least "
        "task_recall_evidence of them; the tasks where the judge has shown recall are verified "
        "alone (envs/verified.py)",
    )
    task_recall_evidence: int = Field(
        5,
        ge=1,
        description="with task_recall_floor: the real successes of a task's exactly judged "
        "episodes needed before its recall is trusted",
    )
    task_recall_probe: int = Field(
        0,
        ge=0,
        description="with task_recall_floor: a task whose first this many exactly judged "
        "episodes hold no real success leaves the floor and is verified alone (0: never); "
        "exact judging pays nothing where nothing succeeds (3 of the 8 tasks a seed-0 floor "
        "kept exact: docs/results.md, 'Real steps to gain')",
    )
    audit_with_simulator: bool = Field(
        False,
        description="with source=model: the reward model still judges, and the real simulator "
        "replays each chunk beside it only to record the truth (env/model_* metrics: how often "
        "the learned signal RL trains on is true on the policy's own rollouts); a diagnostic "
        "that costs real steps",
    )
    success_threshold: float | None = Field(
        None, ge=0.0, le=1.0, description="None: the threshold calibrated with the model (F1)"
    )
    success_frames: int = Field(
        1,
        ge=1,
        le=64,
        description="a success is called when the score has reached the threshold on this "
        "many consecutive frames (1: the first such frame, RLinf's rule); the threshold "
        "train-reward sets on policy episodes follows the same rule. Why: "
        "docs/results.md#the-verdict-under-rl",
    )
    confirm_draws: int = Field(
        0,
        ge=0,
        le=8,
        description="in imagination, further draws of the world model (the same actions, other "
        "noise) that must each call success too before a call counts; each costs one more "
        "world-model pass. Why: docs/results.md#the-verdict-under-rl",
    )
    confirm_world_models: list[str] = Field(
        default_factory=list,
        description="the world models that draw the confirming draws, one per draw (draw j in "
        "the j-th; as many as confirm_draws); empty: the run's world model draws them. "
        "Measured: docs/results.md#the-verdict-under-rl",
    )
    use_rel_reward: bool = False
    reward_coef: float = Field(5.0, gt=0.0)
    round_scores: bool = Field(
        False,
        description="round the success probability to 0/1 before rewards and the success rule "
        "(RLinf's predict_rew): success then means p > 0.5 for any threshold in (0, 1]",
    )
    first_step_baseline: Literal["initial_frame", "zero"] = Field(
        "initial_frame",
        description="use_rel_reward: what the first step's score is compared with, the reset "
        "frame's score or 0 (RLinf)",
    )
    # training (`wmrl train-reward`)
    width: int = Field(
        16,
        ge=4,
        le=256,
        description="ResNet base width (RLinf: 64); kind latent: the head's first convolution's "
        "channels",
    )
    steps: int = Field(600, ge=1)
    batch_size: int = Field(64, ge=2)
    lr: float = Field(1e-3, gt=0.0, le=1.0)
    val_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    augment_shift: int = Field(
        0,
        ge=0,
        le=16,
        description="training: shift each frame by up to this many pixels (edge padding, random "
        "crop, DrQ's augmentation) so that a small model cannot memorize the training frames",
    )
    videomae: dict[str, Any] = Field(
        default_factory=dict,
        description="train-reward with kind videomae (WMPO's clip classifier): fields of "
        "rewards/videomae.py's VideoMAERewConfig over WMPO's videomae-base, e.g. {hidden_size: "
        "64, num_hidden_layers: 4, num_attention_heads: 4, intermediate_size: 256, patch_size: "
        "8, num_frames: 8}; its image_size is reward_model.image_size where that is set",
    )
    image_size: int | None = Field(
        None,
        ge=16,
        le=512,
        description="train-reward: score frames resized (bilinear) to this square size; None "
        "keeps the env's resolution. Above it, the stem's 4x downsampling spares the "
        "pixel-sized differences between a success and a near miss (RLinf scores 256x256)",
    )
