"""The imagined env: a world model plus a reward model behind the simulator's interface.

Per chunk the world model predicts C frames from C actions, the reward model scores every
generated frame, and an env succeeds when the chunk's highest score reaches the threshold
(RLinf's rule), or, with `success_frames` k > 1, when k consecutive frames (across chunks) have
reached it; it then terminates at the end of that chunk. Truncation at `max_steps`.

Rewards: with `use_rel_reward` (RLinf), the step reward is the change of the scaled score,
reward_coef * (r_t - r_{t-1}), so an episode's return is reward_coef * (r_end - r_0); without
it, the reward is reward_coef on the step that ends the episode with success and 0 elsewhere.
Either way a successful episode returns about reward_coef and a failed one about 0.

A call can be required to repeat in other draws of the world model (`confirm_draws` n): the
env imagines every episode n more times from the same start with the same actions and other
noise, and a call counts only once each of those draws has called success too. The policy sees
the first draw only. Most of the successes RL learns to fool a judge with are drawn by the
world model and do not repeat under other noise (docs/results.md#the-verdict-under-rl). A
draw imagines an episode only once the first draw calls it: it then catches up on the episode's
chunks so far in one go and follows it from there, so an episode never called costs one pass
of the world model, as without confirmation. The draws may come from other world models
(`confirm_models`, one per draw), the ensemble check; measured, a world model refined with
another seed repeated the run's model's false calls (docs/results.md#the-verdict-under-rl).

RLinf's variants, each an option (docs/parity.md): scores rounded to 0/1 (`round_scores`),
r_0 = 0 rather than the reset frame's score (`zero_first_baseline`), the same sampling noise on
every call (`noise_seed`), keyframe episodes counting steps from 0 (`kir_step_reset`), and the
reward model's own task numbering (`reward_task_ids`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from wmrl_cli.data.reset_set import ResetEntry
from wmrl_cli.envs.interface import ChunkResult, Obs
from wmrl_cli.errors import WmrlError
from wmrl_cli.rewards.base import RewardModel, round_scores
from wmrl_cli.rewards.calibration import held_success
from wmrl_cli.world_models.interface import WorldModel


def _reset_model(model: WorldModel, entries: list[ResetEntry]) -> None:
    model.reset_context(
        np.stack([e.reference for e in entries]),
        np.stack([e.context for e in entries]),
        np.stack([e.context_actions for e in entries]).astype(np.float32),
    )


class ImaginedEnv:
    def __init__(
        self,
        world_model: WorldModel,
        reward_model: RewardModel | None,
        reset_set: list[ResetEntry],
        task_names: list[str],
        num_envs: int,
        max_steps: int,
        success_threshold: float = 0.9,
        use_rel_reward: bool = False,
        reward_coef: float = 5.0,
        seed: int = 0,
        action_transform: Callable[[np.ndarray], np.ndarray] | None = None,
        round_scores: bool = False,
        zero_first_baseline: bool = False,
        noise_seed: int | None = None,
        kir_step_reset: bool = False,
        reward_task_ids: list[int] | None = None,
        threshold_source: str = "given",
        success_frames: int = 1,
        confirm_draws: int = 0,
        confirm_models: list[WorldModel] | None = None,
    ) -> None:
        """`action_transform` maps the policy's actions into the convention the world model was
        trained in (RLinf's LIBERO world models: LIBERO's gripper sign, as the real env).
        Without a reward model every score is 0 (an env judged elsewhere: simulator_judged.py).
        `reward_task_ids[t]` is the reward model's id of the env's task t (None: the same).
        `threshold_source` says where `success_threshold` came from, for the run's log.
        `success_frames`: consecutive frames at the threshold that make a success (1: the first
        such frame), counted across chunks from the reset. `confirm_draws`: further draws of
        the world model that must each call success too (single-frame judges only), drawn
        by `confirm_models[j]` (None: by `world_model`)."""
        if not reset_set:
            raise WmrlError("the imagined env needs a non-empty reset set")
        if confirm_draws and int(getattr(reward_model, "clip_length", 1)) > 1:
            raise WmrlError(
                "reward_model.confirm_draws needs a reward model that scores single frames; "
                f"this one scores clips of {reward_model.clip_length} frames"
            )
        confirm_models = list(confirm_models or [world_model] * confirm_draws)
        if len(confirm_models) != confirm_draws:
            raise WmrlError(
                f"{len(confirm_models)} confirming world model(s) for {confirm_draws} draw(s)"
            )
        for model in confirm_models:
            if not model.context_state_names:
                raise WmrlError(
                    "reward_model.confirm_draws needs a world model whose context can be held "
                    f"apart per draw; {type(model).__name__} names none"
                )
        self.world_model = world_model
        self.reward_model = reward_model
        self.reset_set = reset_set
        self.entry_task_ids = [e.task_id for e in reset_set]  # varied_outcome reset sampling
        self.task_names = task_names
        self.num_envs = num_envs
        self.action_dim = int(reset_set[0].context_actions.shape[-1])
        self.max_steps = max_steps
        self.threshold = success_threshold
        self.threshold_source = threshold_source
        self.success_frames = success_frames
        self.use_rel_reward = use_rel_reward
        self.reward_coef = reward_coef
        self.generator = torch.Generator().manual_seed(seed)
        self.action_transform = action_transform
        self.round_scores = round_scores
        self.zero_first_baseline = zero_first_baseline
        self.noise_seed = noise_seed
        self.kir_step_reset = kir_step_reset
        self.reward_task_ids = None if reward_task_ids is None else np.asarray(reward_task_ids)
        # VideoMAE-style reward models score a clip ending at each frame: keep its history.
        self._history_len = max(int(getattr(reward_model, "clip_length", 1)) - 1, 0)
        self.confirm_draws = confirm_draws
        self.confirm_models = confirm_models
        # per confirming draw: its own context in the world model, held run, whether it called,
        # which episodes it imagines (those the first draw has called)
        self._draws: list[dict] = []
        self._chunks: list[tuple[torch.Tensor, np.ndarray, np.ndarray]] = []  # since the reset
        self.timings = {"world_model": 0.0, "reward": 0.0}

    def pop_timings(self) -> dict[str, float]:
        """Seconds spent in the world model and the reward model since the last call."""
        out, self.timings = self.timings, {"world_model": 0.0, "reward": 0.0}
        return out

    def reset(self, init_ids: list[int], sim_states: list | None = None) -> Obs:
        if len(init_ids) != self.num_envs:
            raise ValueError(f"reset needs {self.num_envs} init ids, got {len(init_ids)}")
        entries = [self.reset_set[i] for i in init_ids]
        _reset_model(self.world_model, entries)
        self._entries = entries
        self._draws = [
            {"model": model, "context": self._reset_context(model, entries),
             "held": np.zeros(self.num_envs, dtype=np.int64),
             "called": np.zeros(self.num_envs, dtype=bool),
             "started": np.zeros(self.num_envs, dtype=bool)}
            for model in self.confirm_models
        ]  # fmt: skip
        self._chunks = []
        self._steps = np.array([0 if self.kir_step_reset else e.step for e in entries])
        self._done = np.zeros(self.num_envs, dtype=bool)
        self._held = np.zeros(self.num_envs, dtype=np.int64)  # frames at the threshold in a row
        current = np.stack([e.context[-1] for e in entries])
        self._last_frames = current
        history = np.stack([e.context for e in entries])[:, -self._history_len :]
        self._history = history if self._history_len else None
        self._prev_score = self._score(current[:, None])[:, 0]
        if self.zero_first_baseline:
            self._prev_score = np.zeros_like(self._prev_score)
        return self._obs(current)

    def _reset_context(self, model: WorldModel, entries: list[ResetEntry]) -> dict:
        """A confirming draw's context at the reset: the run's world model's (already reset),
        or another world model's, reset to the same entries."""
        if model is not self.world_model:
            _reset_model(model, entries)
        return model.context_state()

    def _obs(self, images: np.ndarray) -> Obs:
        task_ids = np.array([e.task_id for e in self._entries], dtype=np.int64)
        return Obs(
            images=images, instructions=[e.instruction for e in self._entries], task_ids=task_ids
        )

    @torch.no_grad()
    def _score(self, frames: np.ndarray) -> np.ndarray:
        """Success probability of each frame [B,T]; clip models see the preceding history."""
        if self.reward_model is None:
            return np.zeros(frames.shape[:2], dtype=np.float32)
        task_ids = np.array([e.task_id for e in self._entries], dtype=np.int64)
        if self.reward_task_ids is not None:
            task_ids = self.reward_task_ids[task_ids]
        if self._history_len and self._history is not None:
            full = np.concatenate([self._history, frames], axis=1)
            scores = self.reward_model.predict(full, task_ids)[:, -frames.shape[1] :]
        else:
            scores = self.reward_model.predict(frames, task_ids)
        scores = scores.float().cpu().numpy()
        return round_scores(scores) if self.round_scores else scores

    def _confirmed(
        self, actions: torch.Tensor, active: np.ndarray, valid: np.ndarray, called: np.ndarray
    ) -> np.ndarray:
        """Whether every confirming draw has called success by this chunk's end [B]. Each draw
        imagines the chunk in its own context with the next noise of the stream, for the
        episodes it follows; an episode the first draw calls (`called`) for the first time it
        starts following, imagining all of the episode's chunks since the reset (its context
        has stayed at the reset's, as `predict_active` leaves inactive envs)."""
        self._chunks.append((actions.clone(), active.copy(), valid.copy()))
        own = self.world_model.context_state()
        confirmed = np.ones(self.num_envs, dtype=bool)
        try:
            for j, draw in enumerate(self._draws):
                draw["model"].set_context_state(draw["context"])
                new = called & ~draw["started"]
                for k, (chunk_actions, chunk_active, chunk_valid) in enumerate(self._chunks):
                    this_chunk = k == len(self._chunks) - 1
                    follow = draw["started"] | new if this_chunk else new
                    imagine = follow & chunk_active
                    if imagine.any():
                        self._draw_chunk(draw, j, chunk_actions, imagine, chunk_valid)
                draw["started"] |= new
                draw["context"] = draw["model"].context_state()
                confirmed &= draw["called"]
        finally:
            self.world_model.set_context_state(own)
        return confirmed

    def _draw_chunk(
        self, draw: dict, j: int, actions: torch.Tensor, imagine: np.ndarray, valid: np.ndarray
    ) -> None:
        """One chunk of confirming draw j for the envs `imagine` [B]: its held runs and calls."""
        if self.noise_seed is not None:  # a fixed noise: each draw a fixed other one
            self.generator.manual_seed(self.noise_seed + 1 + j)
        frames = draw["model"].predict_active(
            actions, torch.from_numpy(imagine), generator=self.generator
        )
        scores = self._score(frames.cpu().numpy())
        held, runs = held_success(scores, self.threshold, self.success_frames, draw["held"])
        draw["held"] = np.where(imagine, runs, draw["held"])
        draw["called"] |= (held & valid).any(axis=1) & imagine

    def judges_single_frames(self) -> bool:
        """Whether the reward model scores a frame on its own (not a clip of its history)."""
        return self.reward_model is not None and not self._history_len

    def frame_passes(self, frames: np.ndarray) -> np.ndarray:
        """Whether the judge's score of one frame per env [B,H,W,3] (say, the real simulator's
        at a chunk's end) reaches the threshold [B]; single-frame judges only."""
        if not self.judges_single_frames():
            raise ValueError("frame_passes needs a reward model that scores single frames")
        return self._score(frames[:, None])[:, 0] >= self.threshold

    def chunk_step(self, actions: np.ndarray) -> ChunkResult:
        if self.action_transform is not None:
            actions = self.action_transform(actions)
        actions = np.asarray(actions, dtype=np.float32)
        b, c, _ = actions.shape
        t0 = time.perf_counter()
        if self.noise_seed is not None:  # a deterministic world model: the same noise every call
            self.generator.manual_seed(self.noise_seed)
        was_done = self._done.copy()
        # Ended episodes skip the world model and keep showing their last frame.
        frames = self.world_model.predict_active(
            torch.from_numpy(actions), torch.from_numpy(~was_done), generator=self.generator
        )
        frames = frames.cpu().numpy()
        frames[was_done] = self._last_frames[was_done][:, None]
        t1 = time.perf_counter()
        scores = self._score(frames)
        self.timings["world_model"] += t1 - t0
        self.timings["reward"] += time.perf_counter() - t1
        if self._history_len:
            self._history = np.concatenate([self._history, frames], axis=1)[:, -self._history_len :]

        valid = np.repeat(~was_done[:, None], c, axis=1)
        held, self._held = held_success(scores, self.threshold, self.success_frames, self._held)
        if self._draws:  # a call counts once every other draw has made it too
            t2 = time.perf_counter()
            called = (held & valid).any(axis=1)
            confirmed = self._confirmed(torch.from_numpy(actions), ~was_done, valid, called)
            held &= confirmed[:, None]
            self.timings["world_model"] += time.perf_counter() - t2
        success = held & valid
        chunk_success = success.any(axis=1)
        steps_after = self._steps + c
        truncated_now = ~chunk_success & (steps_after >= self.max_steps) & ~was_done

        terminated = np.zeros((b, c), dtype=bool)
        truncated = np.zeros((b, c), dtype=bool)
        terminated[chunk_success, -1] = True
        truncated[truncated_now, -1] = True

        if self.use_rel_reward:
            scaled = self.reward_coef * scores
            prev = np.concatenate([self.reward_coef * self._prev_score[:, None], scaled[:, :-1]], 1)
            rewards = scaled - prev
        else:
            rewards = np.zeros((b, c), dtype=np.float32)
            rewards[chunk_success, -1] = self.reward_coef
        rewards = np.where(valid, rewards, 0.0).astype(np.float32)

        self._last_frames = frames[:, -1]
        self._prev_score = np.where(was_done, self._prev_score, scores[:, -1])
        self._steps = np.where(was_done, self._steps, steps_after)
        self._done = was_done | chunk_success | truncated_now
        return ChunkResult(
            obs=self._obs(self._last_frames.copy()),
            frames=frames,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            success=success,
            info={"valid": valid, "scores": scores},
        )

    def resume(self, i: int) -> bool:
        """Env i's episode, ended by a call that was refuted outside (verified imagination
        with `refuted_calls=continue`), goes on as if never called; whether it is truncated
        now, its last step reached."""
        truncated = bool(self._steps[i] >= self.max_steps)
        self._done[i] = truncated
        return truncated

    def close(self) -> None:
        pass
