"""Imagined episodes (`wmrl rollout --world-model WM --replay STORE`): a world model rolled
open-loop from stored episodes' real context frames with their recorded actions.

The simulator's outcome of those actions is already recorded (the episode's success flags), so
each imagined episode carries real labels without a replay: frames a reward model can be
trained on (`wmrl train-reward --data REAL --data IMAGINED`). An imagined episode starts at
step t0 of its source: its first frame is the source's real frame t0, the following ones are
predicted; actions, rewards and success flags are the source's from t0 on. It holds no
simulator states (docs/formats.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.data.reset_set import context_entry, rest_action
from wmrl_cli.errors import ConfigError
from wmrl_cli.logging import progress_task
from wmrl_cli.world_models.interface import WorldModel


@dataclass(frozen=True)
class Start:
    episode_id: int
    t0: int
    steps: int  # predicted frames: min(horizon, the steps recorded after t0)


def imagined_starts(store: EpisodeStore, start_every: int, horizon: int | None) -> list[Start]:
    """Every episode's steps 0, K, 2K, ... (K = start_every; 0: the episode start only) with at
    least one recorded step after them, each rolled for min(horizon, the rest) steps; checked
    before any model loads."""
    if start_every < 0:
        raise ConfigError(f"--start-every must be 0 (the episode start) or more, got {start_every}")
    if horizon is not None and horizon < 1:
        raise ConfigError(f"--horizon must be at least 1 step, got {horizon}")
    if store.imagined:
        raise ConfigError(f"--replay {store.root}: holds imagined episodes; give the real store")
    starts = []
    for meta in store.index:
        length = int(meta["length"])
        for t0 in range(0, length, start_every) if start_every else [0]:
            rest = length - t0
            if rest > 0:
                starts.append(Start(int(meta["id"]), t0, min(horizon or rest, rest)))
    if not starts:
        raise ConfigError(f"--replay {store.root}: the store holds no episode with frames to roll")
    return starts


def check_source(store: EpisodeStore, world_model: WorldModel) -> None:
    """One line for a source the world model cannot be rolled from (its episodes' frames, actions
    and chunks must fit the world model)."""
    frames, actions = _first_shapes(store)
    if frames != (world_model.height, world_model.width):
        raise ConfigError(
            f"--replay {store.root}: frames are {frames[0]}x{frames[1]} but the world model "
            f"generates {world_model.height}x{world_model.width}"
        )
    if actions != world_model.action_dim:
        raise ConfigError(
            f"--replay {store.root}: actions have {actions} dimensions, the world model takes "
            f"{world_model.action_dim}"
        )
    if len({int(m["chunk_size"]) for m in store.index}) > 1:
        raise ConfigError(f"--replay {store.root}: episodes recorded with different chunk sizes")


def _first_shapes(store: EpisodeStore) -> tuple[tuple[int, int], int]:
    episode = store.load(0)
    return tuple(episode.frames.shape[1:3]), int(episode.actions.shape[1])


def _batch_actions(episodes: list[Episode], starts: list[Start], steps: int) -> np.ndarray:
    """Recorded actions [B, steps, A] from each start, the rest action after the recording."""
    a_dim = episodes[0].actions.shape[1]
    out = np.tile(rest_action(a_dim), (len(starts), steps, 1))
    for i, (episode, start) in enumerate(zip(episodes, starts, strict=True)):
        recorded = episode.actions[start.t0 : start.t0 + steps]
        out[i, : len(recorded)] = recorded
    return out.astype(np.float32)


@torch.no_grad()
def roll_batch(
    world_model: WorldModel, episodes: list[Episode], starts: list[Start], seed: int
) -> np.ndarray:
    """Imagined frames uint8 [B, steps, H, W, 3] of one batch, from each start's real context
    (as the imagined env starts: `context_entry`), in the episodes' chunks."""
    chunk = episodes[0].chunk_size
    entries = [
        context_entry(e, s.t0, world_model.num_context_frames, s.episode_id)
        for e, s in zip(episodes, starts, strict=True)
    ]
    world_model.reset_context(
        np.stack([e.reference for e in entries]),
        np.stack([e.context for e in entries]),
        np.stack([e.context_actions for e in entries]),
    )
    steps = -(-max(s.steps for s in starts) // chunk) * chunk
    actions = torch.from_numpy(_batch_actions(episodes, starts, steps))
    gen = torch.Generator().manual_seed(seed)
    chunks = [
        world_model.predict(actions[:, i : i + chunk], gen).cpu() for i in range(0, steps, chunk)
    ]
    return torch.cat(chunks, dim=1).numpy()


def imagined_episode(
    source: Episode, start: Start, frames: np.ndarray, provenance: dict[str, str]
) -> Episode:
    """The source's steps t0 .. t0+steps with the predicted frames after its real frame t0."""
    span = slice(start.t0, start.t0 + start.steps)
    return replace(
        source,
        frames=np.concatenate([source.frames[start.t0 : start.t0 + 1], frames[: start.steps]]),
        actions=source.actions[span],
        rewards=source.rewards[span],
        success=source.success[span],
        perturbed=None if source.perturbed is None else source.perturbed[span],
        sim_states={},  # no state it does not have
        imagined={**provenance, "source_episode": start.episode_id, "t0": start.t0},
    )


def imagine_store(
    world_model: WorldModel,
    source: EpisodeStore,
    out: EpisodeStore,
    starts: list[Start],
    batch_size: int,
    world_model_name: str,
    seed: int = 0,
    progress: bool = True,
) -> int:
    """Roll `starts` in batches of `batch_size` and add one imagined episode per start to `out`
    (written batch by batch, atomically); the number written."""
    provenance = {
        "world_model": str(Path(world_model_name).resolve()),
        "source_store": str(source.root.resolve()),
    }
    world_model.eval()
    loaded: dict[int, Episode] = {}
    # A batch rolls as long as its longest start: batch starts of similar length together.
    starts = sorted(starts, key=lambda s: (-s.steps, s.episode_id, s.t0))
    batches = [starts[i : i + batch_size] for i in range(0, len(starts), batch_size)]
    with progress_task("imagined rollouts", len(batches), progress) as advance:
        for number, batch in enumerate(batches):
            # keep only the episodes this batch uses
            ids = {s.episode_id for s in batch}
            loaded = {i: loaded[i] if i in loaded else source.load(i) for i in sorted(ids)}
            episodes = [loaded[s.episode_id] for s in batch]
            frames = roll_batch(world_model, episodes, batch, seed + number * batch_size)
            out.add(
                [
                    imagined_episode(e, s, f, provenance)
                    for e, s, f in zip(episodes, batch, frames, strict=True)
                ]
            )
            advance()
    return len(starts)
