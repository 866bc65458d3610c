"""Behaviour-cloning samples cut from stored episodes (`wmrl sft`, and RL's real-success anchor).

A sample is (frame t, its instruction, the C actions from t on); a chunk running past the
episode's end repeats its last action, as the policy's own chunks are executed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError


@dataclass
class BCDataset:
    frames: np.ndarray  # uint8 [N,H,W,3]
    chunks: np.ndarray  # float32 [N,C,A]
    prompt_ids: np.ndarray  # int [N] -> instructions
    instructions: list[str]

    def __len__(self) -> int:
        return len(self.frames)


def build_bc_dataset(
    store: EpisodeStore,
    chunk: int,
    only_success: bool = True,
    tasks: Sequence[str] | None = None,
) -> BCDataset:
    """Every step of the store's episodes (its successful ones only, by default; of the tasks
    named in `tasks` only, where given) as a sample."""
    frames, chunks, prompt_ids, instructions = [], [], [], []
    # the other tasks' episodes are left out by the index, unread
    ids = [i for i, entry in enumerate(store.index) if tasks is None or entry["task_name"] in tasks]
    for episode in store.iter_ids(ids):
        if only_success and not episode.succeeded:
            continue
        if episode.instruction not in instructions:
            instructions.append(episode.instruction)
        t_len = episode.length
        idx = np.minimum(np.arange(t_len)[:, None] + np.arange(chunk)[None], t_len - 1)
        frames.append(episode.frames[:t_len])
        chunks.append(episode.actions[idx])
        prompt_ids.append(np.full(t_len, instructions.index(episode.instruction)))
    if not frames:
        among = f" of tasks {', '.join(tasks)}" if tasks is not None else ""
        raise WmrlError(f"{store.root}: no successful episodes{among} to clone")
    return BCDataset(
        np.concatenate(frames),
        np.concatenate(chunks).astype(np.float32),
        np.concatenate(prompt_ids),
        instructions,
    )
