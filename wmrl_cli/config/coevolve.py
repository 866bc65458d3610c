"""The `coevolve` section of the run config: what `wmrl co-evolve` runs (its stages, the
world model's check before RL, the acceptance of a refinement, per-task trust and the
controls)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from wmrl_cli.config.section import Section


class CoevolveConfig(Section):
    """Co-evolution (`wmrl co-evolve`): stage 1 RL in WM_base, real rollouts of the evolved
    policy refine the world and reward models, stage 2 RL in WM_evo (WoVR's PACE, arXiv
    2602.13977)."""

    start: Literal["sft", "given"] = Field(
        "sft",
        description="sft: expert demonstrations, an SFT base policy, and world and reward models "
        "trained from scratch on its rollouts (Meta-World); given: the policy, world model, "
        "reward model and reset set the config names (published assets or wmrl runs; LIBERO)",
    )
    base_rollouts_per_task: int = Field(10, ge=1, description="base-policy rollouts (WM data)")
    evolved_rollouts_per_task: int = Field(5, ge=1, description="real rollouts per refinement")
    refinements: int = Field(1, ge=0, le=10, description="refine-then-RL rounds after stage 1")
    refine_steps: int = Field(500, ge=1, description="world-model fine-tuning steps")
    refine_reward_steps: int = Field(300, ge=1)
    refine_candidates: int = Field(
        1,
        ge=1,
        le=8,
        description="world-model refinements per round, each with its own training seed (its "
        "batches and train/val split); more than one needs accept_audit_per_task to choose. "
        "Why: docs/results.md#refining-the-world-model",
    )
    accept_audit_per_task: int = Field(
        0,
        ge=0,
        description="N > 0: before each refined stage, the evolved policy runs N imagined "
        "episodes per task in the current world model and in every refinement, judged as RL "
        "judges them (the last stage's judge and threshold) and replayed in the simulator "
        "(`eval --audit`; real steps); the stage then runs in the world model whose verdicts "
        "agree best with the replays (F1), the current one on a tie; 0: the refinement is used. "
        "Why: docs/results.md#refining-the-world-model",
    )
    trust_audit_per_task: int = Field(
        0,
        ge=0,
        description="N > 0: before each RL stage, the policy it starts from runs N imagined "
        "episodes per task in the stage's world model, judged as the stage judges them and "
        "replayed in the simulator (real steps; where acceptance audited the same policy, "
        "world model and judge, its tally is used instead); the stage then draws its starts "
        "only from the tasks whose verdict clears trust_precision_floor "
        "(algorithm.train_tasks). 0: every task. Measured: docs/results.md#per-task-trust",
    )
    trust_precision_floor: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="with trust_audit_per_task: a task trains when its audited precision (true "
        "calls / calls) is at least this, or the judge called no success on it",
    )
    refine_reward_model: bool = Field(
        True,
        description="each refinement also retrains (sft) or fine-tunes (given) the reward model "
        "on the merged data; false: the judge that gave the last stage its signal judges the "
        "next one too, at its threshold, and only the world model is refined. Why: "
        "docs/results.md#the-judge-through-pace",
    )
    reward_imagined_start_every: int = Field(
        0,
        ge=0,
        description="K > 0: each reward model also trains on its world model's imagined "
        "rollouts of the training data, from steps 0, K, 2K, ... of every episode, sampled as RL "
        "samples, each frame labelled by the recorded outcome (`wmrl rollout --world-model "
        "--replay`); 0: real frames only",
    )
    reward_imagined_horizon: int = Field(
        32, ge=1, description="steps imagined per start of reward_imagined_start_every"
    )
    reward_policy_rollouts_per_task: int = Field(
        0,
        ge=0,
        description="N > 0: each reward model trained after a world model also learns from N "
        "imagined episodes per task of the policy RL will start from, acting in that world "
        "model from the RL reset set's starts, labelled by executing its actions in the "
        "simulator (`wmrl rollout --world-model --policy --reset-set`; real steps); its "
        "threshold is then their episode-level best F1; 0: none. Why: "
        "docs/results.md#labelled-imagined-episodes",
    )
    reward_real_rollouts_per_task: int = Field(
        0,
        ge=0,
        description="N > 0: every reward model of the run also learns from N real rollouts per "
        "task of the policy stage 1 starts from, without action noise and run on after "
        "success (the policy's own successes, near misses and the states after a success, "
        "which the perturbed world-model rollouts and the demonstrations lack); 0: none. Why: "
        "docs/results.md#real-rollouts-in-the-judges-data",
    )
    world_model_on_reward_real: bool = Field(
        False,
        description="true: the first world model also learns from the reward models' real "
        "rollouts (reward_real_rollouts_per_task, already paid for): the base policy's own "
        "closed loop, which its perturbed rollouts and the demonstrations do not show; RL's "
        "starts and the judge's data stay as they are. Measured (seed 1): no better closed "
        "loop; docs/notes/real-steps-to-gain.md (the world model on the judge's real rollouts)",
    )
    closed_loop_floor: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="f > 0: stage 1's RL leaves out the tasks where the base policy acting in "
        "the world model (its labelled imagined episodes, replayed: "
        "reward_policy_rollouts_per_task) succeeds less than f times as often as in its real "
        "rollouts (reward_real_rollouts_per_task): successes the world model's loop does not "
        "produce, which no verdict can pay. No real step beyond those stores'. 0: off. "
        "Measured (seed 1, f = 0.5): the run gained less than with every task, its trained "
        "tasks less; docs/notes/real-steps-to-gain.md (a closed-loop floor)",
    )
    bc_anchor: float = Field(
        0.0,
        ge=0.0,
        description="c > 0: every RL stage in imagination also clones the base policy's real "
        "successes in data/reward_real (algorithm.bc_coef = c, bc_data the store; "
        "algorithm.bc_batch_size steps per update), which the judge's data already paid for: "
        "it holds the tasks whose imagined loop is broken. The simulator control runs without "
        "it. Needs reward_real_rollouts_per_task > 0. 0: off. Measured (seed 1, c = 0.5, "
        "bc_batch_size 128): +7.5 [+3.5, +12.0] by step 10, going on without it +6.5; "
        "docs/notes/real-steps-to-gain.md (a behaviour-cloning anchor)",
    )
    frozen_control: bool = Field(False, description="also run the last stage in the frozen WM")
    simulator_control: bool = Field(
        False,
        description="also run RL in the real simulator from the base policy, with the run's "
        "algorithm and training settings, for as many steps as the imagined stages took in all "
        "((refinements + 1) x training.steps), evaluated like them: what the same RL gains with "
        "a perfect world model and verdict, and the real steps it costs (counted apart from "
        "the method's). Measured: docs/results.md#the-simulator-control",
    )
    eval_trials: int = Field(10, ge=1, description="real evaluation trials per task per stage")
    curve_every: int = Field(
        0,
        ge=0,
        description="N > 0: the RL stages and the simulator control are also evaluated in the "
        "real simulator every N RL steps and at their last, on the same held-out episodes "
        "(eval_trials per task), and the report draws real success against real steps "
        "(real_steps_to_gain.png); 0: each stage is evaluated once, after it. Why: "
        "docs/results.md#real-steps-to-gain",
    )
    videos: bool = Field(True, description="save videos of the final evaluation")
    # Between a world model and RL in it (coevolve/gate.py).
    check_episodes: int = Field(
        10,
        ge=0,
        description="validation episodes on which each world model is checked before RL "
        "(`eval --world-model`: action gap, imagined vs real success); 0: no check",
    )
    recalibrate_threshold: bool = Field(
        True,
        description="RL judges imagined success at the reward-model threshold recalibrated on "
        "the world model's frames by the check (best F1 of imagined vs real success). Why the "
        "default profile turns it off: docs/results.md#the-judge-through-pace",
    )
    min_action_gap_db: float | None = Field(
        None, description="stop before RL when the checked action gap at step 8 is below (dB)"
    )
    min_imagined_recall: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="stop before RL when the checked recall of imagined success (out of sample)"
        " is below",
    )
