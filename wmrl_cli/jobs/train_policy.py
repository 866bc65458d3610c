"""Training a policy with RL: the one job behind `wmrl train-policy` and co-evolve's RL stages.

It builds this rank's env (imagined, simulator-judged or the real simulator, as
`algorithm.env` and `reward_model.*` say) and the trainer, which loads the base policy, and
runs it. The caller owns the run directory, the seeds and what it prints; the trainer resumes
from `run_dir/checkpoints` by itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmrl_cli.config import RunConfig
from wmrl_cli.jobs.assembly import build_env, load_policy, real_eval_callback, verdict_line
from wmrl_cli.jobs.inputs import Inputs
from wmrl_cli.logging import console


@dataclass
class TrainedPolicy:
    """What a training run left: the saved policy and its last real-simulator evaluation
    (step, success_once), None without one."""

    path: Path
    last_eval: tuple[int, float] | None


def make_accelerator(cfg: RunConfig) -> Any:
    """The Accelerate handle RL runs under: the GPU where there is one, bf16 autocast with
    `training.bf16`."""
    import torch

    from wmrl_cli.runtime import fresh_accelerator

    return fresh_accelerator(
        cfg.training.dist_timeout_minutes,
        cpu=not torch.cuda.is_available(),
        mixed_precision="bf16" if cfg.training.bf16 else "no",
    )


def train_policy(
    cfg: RunConfig,
    run_dir: Path,
    inputs: Inputs,
    accelerator: Any,
    *,
    evaluate: bool = True,
    real_steps: int = 0,
) -> TrainedPolicy:
    """RL of `inputs.policy` as `cfg` says, into `run_dir`. `evaluate`: the periodic evaluation
    in the real simulator (`algorithm.eval_every`, spread over the ranks); `real_steps`: where
    `env/real_steps` starts (the real steps spent before this run, e.g. co-evolve's data)."""
    from wmrl_cli.memory.budget import check_rl_memory
    from wmrl_cli.rl.trainer import PolicyTrainer

    device = str(accelerator.device)
    # the memory plan's refusal before anything large loads (the trainer prints the table)
    check_rl_memory(cfg, inputs, accelerator.num_processes, device, host=True)
    env = build_env(cfg, cfg.algorithm.num_envs // accelerator.num_processes, device, inputs)
    if accelerator.is_main_process and (line := verdict_line(env, inputs)):
        console.print(line, markup=False)  # who judges this run
    try:
        callback = None
        if evaluate:  # on every rank, each its share of the episodes
            rank, ranks = accelerator.process_index, accelerator.num_processes
            callback = real_eval_callback(cfg, run_dir, rank, ranks)
        # the base policy loads inside, where and only if it is needed (not held here: a
        # resumed run trains its checkpoint's policy, and the base would stay beside it)
        trainer = PolicyTrainer(
            cfg,
            run_dir,
            lambda on, dtype: load_policy(inputs, on, dtype),
            env,
            accelerator,
            callback,
            real_steps=real_steps,
        )
        path = trainer.train()
    finally:
        env.close()
    return TrainedPolicy(Path(path), trainer.last_eval)
