"""World-model reliability (`wmrl eval --world-model`): can this world model stand in for the
simulator? The measurements; the report they fill is in `evaluation/reliability_report.py`.

Three measurements on held-out episodes, in one run:

1. fidelity: open-loop PSNR/SSIM per horizon against the copy-last-frame baseline
   (`open_loop_eval`);
2. speed: imagined frames per second (the world model's `predict` on B envs at the store's
   image size) next to the real simulator's (the same B envs, random actions, rendering every
   step), measured back to back in this process;
3. success agreement: from start points with a stored simulator state (episode starts and
   KIR-rule keyframes), the recorded action chunks are rolled through the imagined env (world
   model + reward model, success when a chunk's maximum score reaches the threshold) and
   replayed in the simulator from the stored state. Precision of imagined success against real
   success says how often the world model hallucinates success; recall, how often it misses it.
   The report also gives the threshold that would agree best with the simulator on these
   imagined frames (best F1 of the maximum score against real success): a reward model
   calibrated on real frames often scores a world model's blurrier frames lower.

The fidelity table also measures action sensitivity: the same open-loop rollouts driven by
another episode's actions (`open_loop_eval(action_check=True)`). Given a learned policy, the
report adds how differently it acts on the imagined frames than on the real ones
(`policy_shift_eval`).

Both worlds see the same actions over the same steps: the horizon rounded up to whole chunks,
cut at the end of the recording (later steps are masked on both sides).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wmrl_cli.config.schema import KirConfig, SimulatorConfig
from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.data.kir import Keyframe, select_keyframes
from wmrl_cli.data.reset_set import ResetEntry, reset_set_from_store, rest_action
from wmrl_cli.envs.imagined import ImaginedEnv
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.hand_tracking import hand_tracking_eval
from wmrl_cli.evaluation.policy_shift import ActionDistribution, policy_shift_eval
from wmrl_cli.evaluation.reliability_report import (
    ReliabilityReport,
    SpeedReport,
    StartResult,
    success_agreement,
)
from wmrl_cli.evaluation.simulator_replay import (
    SimulatorReplay,
    padded_batches,
    replay_sim_config,
    seed_offset,
)
from wmrl_cli.evaluation.world_model_eval import ALTERNATIVES, open_loop_eval
from wmrl_cli.logging import progress_task
from wmrl_cli.rewards.base import RewardModel
from wmrl_cli.rewards.calibration import (
    best_f1_threshold,
    cross_validated_threshold,
    held_score,
    judge_threshold,
)
from wmrl_cli.world_models.interface import WorldModel

# -- inputs ------------------------------------------------------------------------------------


def _check_inputs(world_model: WorldModel, episodes: list[Episode]) -> None:
    if not episodes:
        raise WmrlError("no episodes to evaluate the world model on")
    first = episodes[0]
    size = tuple(first.frames.shape[1:3])
    if size != (world_model.height, world_model.width):
        raise WmrlError(
            f"the episodes' frames are {size[0]}x{size[1]} but the world model generates "
            f"{world_model.height}x{world_model.width}"
        )
    if first.actions.shape[1] != world_model.action_dim:
        raise WmrlError(
            f"the episodes' actions have {first.actions.shape[1]} dimensions, the world model "
            f"takes {world_model.action_dim}"
        )
    if len({e.chunk_size for e in episodes}) > 1:
        raise WmrlError("the episodes were recorded with different chunk sizes")
    if len({e.frames.shape[1:] for e in episodes}) > 1:
        raise WmrlError("the episodes were recorded at different image sizes")


# -- start points ------------------------------------------------------------------------------


@dataclass
class _Start:
    episode_id: int
    step: int
    kind: str
    entry: ResetEntry | None = None


def start_points(
    episodes: dict[int, Episode], chunk_starts: Sequence[int], keyframes: bool
) -> list[_Start]:
    """Chunk boundaries with a stored simulator state and at least one recorded action after
    them: the chunks `chunk_starts` of every episode (0: its start), plus, with `keyframes`,
    the boundaries the KIR rule picks (just before success; where a failed episode stalls)."""
    out: list[_Start] = []
    for eid, episode in sorted(episodes.items()):
        chosen: dict[int, str] = {}
        for k in chunk_starts:
            chosen.setdefault(int(k) * episode.chunk_size, "start" if k == 0 else "chunk")
        if keyframes:
            for key in select_keyframes(episode, eid, KirConfig()):
                chosen.setdefault(key.step, key.reason.split(":")[0])
        for step, kind in sorted(chosen.items()):
            if step in episode.sim_states and step < episode.length:
                out.append(_Start(eid, step, kind))
    return out


def _attach_entries(store: EpisodeStore, starts: list[_Start], context: int) -> None:
    """Reset entries built exactly as the imagined env's reset set (`reset_set_from_store`),
    which lists per episode (in id order) its first frame, then the given later steps."""
    ids = sorted({s.episode_id for s in starts})
    later = [s for s in starts if s.step > 0]
    entries = reset_set_from_store(
        store, ids, [Keyframe(s.episode_id, s.step, s.kind) for s in later], context
    )
    keys = [(e, step) for e in ids for step in [0] + [s.step for s in later if s.episode_id == e]]
    by_key = dict(zip(keys, entries))
    for start in starts:
        start.entry = by_key[(start.episode_id, start.step)]


# -- measurements ------------------------------------------------------------------------------


def _chunk_actions(episode: Episode, step: int, length: int) -> tuple[np.ndarray, int]:
    """Recorded actions from `step` for `length` steps (rest actions after the recording ends)
    and the number of recorded ones."""
    a_dim = episode.actions.shape[1]
    out = np.tile(rest_action(a_dim), (length, 1)).astype(np.float32)
    recorded = episode.actions[step : step + length]
    out[: len(recorded)] = recorded
    return out, len(recorded)


@torch.no_grad()
def measure_speed(
    world_model: WorldModel,
    reward_model: RewardModel,
    sim: Any,
    images: np.ndarray,
    task_ids: np.ndarray,
    init_ids: list[int],
    chunk: int,
    chunks: int = 3,
    seed: int = 0,
) -> SpeedReport:
    """Frames per second of the world model (and + reward model) and of the simulator, for
    sim.num_envs envs and `chunks` chunks of random actions after one warm-up chunk each."""
    b = sim.num_envs
    rng = np.random.default_rng(seed)

    def random_chunk() -> np.ndarray:
        return rng.uniform(-1.0, 1.0, (b, chunk, world_model.action_dim)).astype(np.float32)

    k = world_model.num_context_frames
    world_model.reset_context(
        images,
        np.repeat(images[:, None], k, axis=1),
        np.tile(rest_action(world_model.action_dim), (b, k, 1)),
    )
    gen = torch.Generator().manual_seed(seed)
    world_model.predict(torch.from_numpy(random_chunk()), gen).cpu()  # warm-up
    wm_time = reward_time = 0.0
    for _ in range(chunks):
        actions = torch.from_numpy(random_chunk())
        t0 = time.perf_counter()
        frames = world_model.predict(actions, gen).cpu().numpy()  # .cpu() waits for the GPU
        t1 = time.perf_counter()
        reward_model.predict(frames, task_ids).cpu()
        wm_time, reward_time = wm_time + t1 - t0, reward_time + time.perf_counter() - t1

    sim.reset(init_ids)
    sim.chunk_step(random_chunk())  # warm-up: the first steps after a reset pay for rendering setup
    sim_time, sim_frames = 0.0, 0
    for _ in range(chunks):
        actions = random_chunk()
        t0 = time.perf_counter()
        result = sim.chunk_step(actions)
        sim_time += time.perf_counter() - t0
        sim_frames += int(result.info["valid"].sum())  # envs that ended execute nothing
        if (result.terminated | result.truncated).any(axis=1).all():
            sim.reset(init_ids)
    wm_frames = b * chunk * chunks
    wm_fps = wm_frames / max(wm_time, 1e-9)
    real_fps = sim_frames / max(sim_time, 1e-9)
    return SpeedReport(
        num_envs=b,
        chunk_size=chunk,
        image_size=int(images.shape[1]),
        timed_chunks=chunks,
        world_model_fps=wm_fps,
        imagined_env_fps=wm_frames / max(wm_time + reward_time, 1e-9),
        real_fps=real_fps,
        ratio=wm_fps / max(real_fps, 1e-9),
        sim_workers=min(int(sim.cfg.num_workers), b),
        device=str(world_model.device),
    )


def imagined_successes(
    env: ImaginedEnv, entry_ids: list[int], actions: np.ndarray, masks: np.ndarray, chunk: int
) -> tuple[np.ndarray, np.ndarray]:
    """Roll one batch through the imagined env: (success [B], the highest threshold at which it
    would call each a success [B]: `held_score`). A success counts when its held run begins at
    a masked step; the run may go on past them (under `success_frames` > 1 a recording that
    ends at the real success would otherwise leave it no frames to hold): `actions` [B,T] run
    `success_frames - 1` steps, rounded up to chunks, past the last masked one."""
    env.reset(entry_ids)
    calls, scores, valid = [], [], []
    done = np.zeros(len(entry_ids), dtype=bool)
    for i in range(actions.shape[1] // chunk):
        result = env.chunk_step(actions[:, i * chunk : (i + 1) * chunk])
        calls.append(result.success)
        scores.append(result.info["scores"])
        valid.append(result.info["valid"])
        done |= (result.terminated | result.truncated).any(axis=1)
        if done.all():  # every env has its outcome: later chunks would change nothing
            break
    seen = np.concatenate(valid, axis=1)
    starts = masks[:, : seen.shape[1]]
    run = env.success_frames - 1  # a call at frame t is a run that began at t - run
    begun = np.zeros_like(starts)
    begun[:, run:] = starts[:, : starts.shape[1] - run]
    called = (np.concatenate(calls, axis=1) & seen & begun).any(axis=1)
    score = held_score(np.where(seen, np.concatenate(scores, axis=1), -np.inf), run + 1, starts)
    return called, score


def real_successes(
    sim: Any,
    init_ids: list[int],
    states: list[np.ndarray],
    actions: np.ndarray,
    masks: np.ndarray,
    chunk: int,
    judge: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Replay one batch in the simulator from stored states: (success [B], the highest score
    `judge` gives the replay's frames [B]; -inf without a judge) over masked steps."""
    sim.reset(init_ids, states)
    success = np.zeros(len(init_ids), dtype=bool)
    best = np.full(len(init_ids), -np.inf)
    for i in range(actions.shape[1] // chunk):
        part = slice(i * chunk, (i + 1) * chunk)
        result = sim.chunk_step(actions[:, part])
        seen = result.info["valid"] & masks[:, part]
        success |= (result.success & seen).any(axis=1)
        if judge is not None:
            best = np.maximum(best, np.where(seen, judge(result.frames), -np.inf).max(axis=1))
        if (result.terminated | result.truncated).any(axis=1).all():
            break
    return success, best


def _replay_and_time(
    world_model: WorldModel,
    reward_model: RewardModel,
    cfg: SimulatorConfig,
    starts: list[_Start],
    episodes: dict[int, Episode],
    actions: np.ndarray,
    masks: np.ndarray,
    speed_chunks: int,
    seed: int,
    progress: bool,
) -> tuple[np.ndarray, np.ndarray, SpeedReport, int]:
    """Real success of every start point, the reward model's highest score on the replayed
    (real) frames, the speed of both worlds, timed on the first batch's envs (which the
    replays then reuse: building a Meta-World env takes a second), and the simulator steps
    spent (at most: a batch whose envs all ended early stops sooner)."""
    from wmrl_cli.sims.backends import replay_actions, resolve_simulator, simulator_class

    cfg = resolve_simulator(cfg)
    simulator = simulator_class(cfg)
    actions = replay_actions(cfg, actions)  # the recorded actions, executed again
    b, chunk = cfg.num_envs, episodes[starts[0].episode_id].chunk_size
    # The simulator seeds an episode with its seed + init_id: one simulator per seed offset.
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(starts):
        groups.setdefault(seed_offset(episodes[s.episode_id]), []).append(i)
    real = np.zeros(len(starts), dtype=bool)
    real_score = np.zeros(len(starts))
    speed: SpeedReport | None = None
    sim_steps = 0
    replays = progress_task("simulator replays (starts)", len(starts), progress, announce=True)
    with replays as advance:
        for offset, group in sorted(groups.items()):
            with simulator(cfg.model_copy(update={"seed": offset}), num_envs=b) as sim:
                for sub in padded_batches(len(group), b):
                    idx = [group[j] for j in sub]
                    init_ids = [episodes[starts[i].episode_id].init_id for i in idx]
                    entries = [starts[i].entry for i in idx]
                    if speed is None:
                        speed = measure_speed(
                            world_model,
                            reward_model,
                            sim,
                            np.stack([e.context[-1] for e in entries]),
                            np.array([e.task_id for e in entries]),
                            init_ids,
                            chunk,
                            speed_chunks,
                            seed,
                        )
                        sim_steps += (1 + speed_chunks) * chunk * b
                    states = [e.sim_state for e in entries]
                    task_ids = np.array([e.task_id for e in entries])

                    def judge(frames: np.ndarray, task_ids: np.ndarray = task_ids) -> np.ndarray:
                        return reward_model.predict(frames, task_ids).float().cpu().numpy()

                    real[idx], real_score[idx] = real_successes(
                        sim, init_ids, states, actions[idx], masks[idx], chunk, judge
                    )
                    sim_steps += len(idx) * actions.shape[1]
                    advance(len(set(idx)))
    assert speed is not None  # there is at least one start point
    return real, real_score, speed, sim_steps


# -- the whole evaluation ----------------------------------------------------------------------


def evaluate_world_model(
    world_model: WorldModel,
    reward_model: RewardModel,
    store: EpisodeStore,
    episode_ids: Sequence[int],
    sim_cfg: SimulatorConfig,
    horizon: int = 32,
    chunk_starts: Sequence[int] = (0,),
    threshold: float | None = None,
    progress: bool = True,
    *,
    keyframes: bool = True,
    speed_chunks: int = 3,
    seed: int = 0,
    keep_videos: int = 4,
    world_model_name: str | None = None,
    reward_model_name: str | None = None,
    hand_tracking: bool = True,
    policy: ActionDistribution | None = None,
    policy_temperature: float = 1.0,
    success_frames: int = 1,
    threshold_source: str = "given",
) -> ReliabilityReport:
    """Fidelity, speed and success agreement of a world model on `episode_ids` of `store`.

    sim_cfg.num_envs is the batch size of both worlds; suite, image size and seeds come from
    the episodes (see `replay_sim_config`). chunk_starts: chunk indices from which success is
    compared in every episode (0: the episode start); keyframes adds the KIR rule's points.
    policy: a learned policy whose action distribution on imagined frames is compared with the
    one on real frames (`policy_shift_eval`), at `policy_temperature`. success_frames: the
    imagined env's rule (consecutive frames at the threshold), as RL uses it. threshold: on
    raw scores (`jobs/check_models.py: verdict_threshold`), with `threshold_source` for
    the report; None: the reward model's own, else RLinf's.
    """
    from wmrl_cli.sims.backends import resolve_simulator, simulator_suite

    if horizon < 1:
        raise WmrlError(f"the horizon must be at least 1 step, got {horizon}")
    store.require_simulator_states("to replay")
    ids = sorted({int(i) for i in episode_ids})
    episodes = {i: store.load(i) for i in ids}
    ordered = [episodes[i] for i in ids]
    _check_inputs(world_model, ordered)
    chunk = ordered[0].chunk_size
    length = -(-horizon // chunk) * chunk
    if threshold is None:
        thr, thr_source = judge_threshold(None, reward_model)
    else:
        thr, thr_source = float(threshold), threshold_source
    cfg = replay_sim_config(store, ordered, sim_cfg)
    b = cfg.num_envs

    world_model.eval()
    replay = SimulatorReplay(cfg, b)
    try:
        open_loop = open_loop_eval(
            world_model,
            ordered,
            horizon,
            batch_size=b,
            seed=seed,
            keep_videos=keep_videos,
            alternatives=ALTERNATIVES,
            replay=replay,
            progress=progress,
        )
        hand = (
            hand_tracking_eval(
                world_model, ordered, replay.states, horizon, b, seed, progress=progress
            )
            if hand_tracking and len(ordered) >= 2
            else None
        )
    finally:
        replay.close()
    shift = (
        policy_shift_eval(
            world_model, policy, ordered, horizon, b, seed, policy_temperature, progress=progress
        )
        if policy is not None
        else None
    )

    starts = start_points(episodes, chunk_starts, keyframes)
    if not starts:
        raise WmrlError("no start point has a stored simulator state (chunk boundaries do)")
    _attach_entries(store, starts, world_model.num_context_frames)
    # The imagined side runs `success_frames - 1` steps past the compared span: a held call
    # that begins inside it (as the simulator's instant success would) may end after it.
    held_length = -(-(length + success_frames - 1) // chunk) * chunk
    plans = [_chunk_actions(episodes[s.episode_id], s.step, held_length) for s in starts]
    held_actions = np.stack([p[0] for p in plans])
    recorded = np.minimum([p[1] for p in plans], length)
    held_masks = np.arange(held_length)[None] < recorded[:, None]
    actions, masks = held_actions[:, :length], held_masks[:, :length]

    env = ImaginedEnv(
        world_model,
        reward_model,
        [s.entry for s in starts],
        simulator_suite(resolve_simulator(cfg)).task_names,
        num_envs=b,
        max_steps=cfg.max_steps,
        success_threshold=thr,
        seed=seed,
        success_frames=success_frames,
    )
    imagined = np.zeros(len(starts), dtype=bool)
    max_score = np.zeros(len(starts))
    batches = padded_batches(len(starts), b)
    rollouts = progress_task("imagined rollouts (starts)", len(starts), progress, announce=True)
    with rollouts as advance:
        for idx in batches:
            success, score = imagined_successes(env, idx, held_actions[idx], held_masks[idx], chunk)
            imagined[idx], max_score[idx] = success, score
            advance(len(set(idx)))
    real, real_score, speed, replay_steps = _replay_and_time(
        world_model, reward_model, cfg, starts, episodes, actions, masks, speed_chunks, seed,
        progress,
    )  # fmt: skip

    results = []
    for i, s in enumerate(starts):
        episode = episodes[s.episode_id]
        steps = int(masks[i].sum())
        results.append(
            StartResult(
                episode_id=s.episode_id,
                init_id=episode.init_id,
                task=episode.task_name,
                step=s.step,
                kind=s.kind,
                steps=steps,
                imagined_success=bool(imagined[i]),
                real_success=bool(real[i]),
                recorded_success=bool(episode.success[s.step : s.step + steps].any()),
                max_score=float(max_score[i]),
                real_max_score=float(real_score[i]),
            )
        )
    kinds = sorted({r.kind for r in results})
    by_kind = {
        kind: success_agreement(
            [r.imagined_success for r in results if r.kind == kind],
            [r.real_success for r in results if r.kind == kind],
        )
        for kind in kinds
    }
    return ReliabilityReport(
        world_model=world_model_name or type(world_model).__name__,
        reward_model=reward_model_name or str(getattr(reward_model, "kind", "reward model")),
        suite=cfg.suite,
        episodes=len(ordered),
        horizon=horizon,
        chunk_size=chunk,
        threshold=thr,
        threshold_source=thr_source,
        open_loop=open_loop,
        speed=speed,
        agreement=success_agreement(imagined, real),
        reward_on_real=success_agreement(real_score >= thr, real),
        agreement_by_kind=by_kind if len(kinds) > 1 else {},
        starts=results,
        hand_tracking=hand,
        policy_shift=shift,
        simulator_steps=replay.steps + replay_steps,
        # A start with no compared step scores -inf: any finite floor below every score does.
        imagined_calibration=(
            best_f1_threshold(np.maximum(max_score, -1.0), real) if real.any() else None
        ),
        imagined_calibration_cv=(
            cross_validated_threshold(
                np.maximum(max_score, -1.0), real, [r.episode_id for r in results]
            )
            if real.any()
            else None
        ),
    )
