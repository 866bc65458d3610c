"""What one rollout of a batch of envs leaves for the update: per env, per chunk step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from wmrl_cli.envs.interface import Env
from wmrl_cli.rl.masks import valid_step_mask


@dataclass
class Rollout:
    """B trajectories of at most T chunk steps (C actions of dimension A each).

    images uint8 [B,T,H,W,3]: the observation each chunk was chosen from; tokens, logprobs
    [B,T,C,A]; values [B,T] (zeros without a critic); rewards [B,T] (summed over the chunk);
    dones [B,T]; success [B] (success_once); step_mask [B,T]: steps up to the first done.
    model_success [B]: where the env is judged by the simulator and also runs a reward model
    (envs/simulator_judged.py), the reward model's verdict on the same episodes; else None.
    real_success [B]: where the reward model judges and the simulator audits it
    (`reward_model.audit_with_simulator`), the simulator's verdict on the same actions.
    real_frame_passes [B]: with the audit and a single-frame judge, whether the judge also
    passes the simulator's frame at the end of the chunk where it called success (False where
    it called none): a false call with it is the judge's error, without it the world model's.
    task_ids [B]: each trajectory's task (an index into the env's task_names).
    """

    images: np.ndarray
    instructions: list[str]
    tokens: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    success: torch.Tensor
    step_mask: torch.Tensor
    episode_len: torch.Tensor  # env steps (actions) taken before the first done
    last_value: torch.Tensor  # [B] bootstrap value after the last step (0 when done)
    model_success: torch.Tensor | None = None
    real_success: torch.Tensor | None = None
    real_frame_passes: torch.Tensor | None = None
    task_ids: torch.Tensor | None = None


@torch.no_grad()
def collect_rollout(
    env: Env,
    policy,
    init_ids: list[int],
    max_chunks: int,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
) -> Rollout:
    """Policy and env alternate chunk by chunk until every env is done or `max_chunks`."""
    obs = env.reset(init_ids)
    task_ids = torch.as_tensor(np.asarray(obs.task_ids, dtype=np.int64))
    b = len(init_ids)
    images, tokens, logprobs, values, rewards, dones = [], [], [], [], [], []
    success = np.zeros(b, dtype=bool)
    model_success: np.ndarray | None = None
    real_success: np.ndarray | None = None
    real_frame_passes: np.ndarray | None = None
    done = np.zeros(b, dtype=bool)
    steps = np.zeros(b, dtype=np.int64)
    for t in range(max_chunks):
        out = policy.act(
            obs.images,
            obs.instructions,
            sample=True,
            temperature=temperature,
            top_k=top_k,
            generator=generator,
        )
        images.append(obs.images)
        tokens.append(torch.as_tensor(out.tokens))
        logprobs.append(torch.as_tensor(out.logprobs))
        values.append(torch.zeros(b) if out.values is None else torch.as_tensor(out.values))
        result = env.chunk_step(out.actions)
        valid = result.info.get("valid", np.ones_like(result.rewards, dtype=bool))
        steps += valid.sum(1)
        ended = (result.terminated | result.truncated).any(1)
        if t == max_chunks - 1:
            ended = np.ones(b, dtype=bool)  # the step limit truncates whatever is still running
        called = (result.success & valid).any(1) & ~success
        success |= called
        if "model_success" in result.info:
            verdict = (result.info["model_success"] & valid).any(1)
            model_success = verdict if model_success is None else model_success | verdict
        if "real_success" in result.info:
            truth = (result.info["real_success"] & valid).any(1)
            real_success = truth if real_success is None else real_success | truth
        if "real_frame_passes" in result.info:  # read at the chunk of the call
            passes = called & result.info["real_frame_passes"]
            real_frame_passes = passes if real_frame_passes is None else real_frame_passes | passes
        rewards.append(torch.as_tensor(result.rewards.sum(1), dtype=torch.float32))
        dones.append(torch.as_tensor(ended | done))
        done |= ended
        obs = result.obs
        if done.all():
            break
    done_t = torch.stack(dones, 1).float()
    return Rollout(
        images=np.stack(images, 1),
        instructions=list(obs.instructions),
        tokens=torch.stack(tokens, 1),
        logprobs=torch.stack(logprobs, 1).float(),
        values=torch.stack(values, 1).float(),
        rewards=torch.stack(rewards, 1),
        dones=done_t,
        success=torch.as_tensor(success),
        step_mask=valid_step_mask(done_t),
        episode_len=torch.as_tensor(steps),
        last_value=torch.zeros(b),
        model_success=None if model_success is None else torch.as_tensor(model_success),
        real_success=None if real_success is None else torch.as_tensor(real_success),
        real_frame_passes=None if real_frame_passes is None else torch.as_tensor(real_frame_passes),
        task_ids=task_ids,
    )
