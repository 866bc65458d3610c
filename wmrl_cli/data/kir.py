"""Keyframe selection for keyframe-initialized rollouts (KIR, WoVR).

Imagined rollouts that start from the first frame must survive the whole horizon before the
task resolves; starting some of them from keyframes near the decisive moment shortens the
error depth. The rule (documented in docs/formats.md#kir):

* successful episodes: the chunk boundaries k chunks before the chunk in which success first
  holds, for every k in `chunks_before_success` (k=1: the start of that chunk);
* failed episodes: chunk boundaries where the robot stalls, i.e. the mean absolute pixel change
  over the preceding chunk is below `stall_threshold`; the earliest `max_stall_keyframes`;
* a keyframe needs `min_context` frames before it (the world model's context window) and a
  stored simulator state (chunk boundaries have one), so it can also reset the real simulator.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wmrl_cli.config.schema import KirConfig
from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.files import atomic_write_text

KIR_FILE = "kir.json"  # a store's keyframes, beside its index


@dataclass(frozen=True)
class Keyframe:
    episode_id: int
    step: int  # index into the episode's frames; a chunk boundary
    reason: str  # "before_success:k" or "stall"


def select_keyframes(episode: Episode, episode_id: int, cfg: KirConfig) -> list[Keyframe]:
    c = episode.chunk_size
    usable = {s for s in episode.sim_states if cfg.min_context <= s < episode.length and s > 0}
    out: list[Keyframe] = []
    if episode.succeeded:
        success_chunk = (episode.success_step - 1) // c  # chunk in which success first holds
        for k in sorted(set(cfg.chunks_before_success)):
            step = (success_chunk - k + 1) * c
            if k >= 1 and step in usable:
                out.append(Keyframe(episode_id, step, f"before_success:{k}"))
        return out
    frames = episode.frames.astype(np.int16)
    for step in sorted(usable):
        if step < c or len(out) >= cfg.max_stall_keyframes:
            continue
        change = float(np.abs(frames[step] - frames[step - c]).mean())
        if change < cfg.stall_threshold:
            out.append(Keyframe(episode_id, step, "stall"))
    return out


def read_keyframes(store_dir: Path) -> list[Keyframe]:
    """The keyframes recorded beside a store (none where it has no kir.json)."""
    path = store_dir / KIR_FILE
    if not path.is_file():
        return []
    return [Keyframe(**item) for item in json.loads(path.read_text())["keyframes"]]


def write_keyframes(store: EpisodeStore, rule: KirConfig) -> list[Keyframe]:
    """Every episode's keyframes under `rule`, written to the store's kir.json with the rule."""
    keys = [k for i, ep in enumerate(store) for k in select_keyframes(ep, i, rule)]
    body = {"rule": rule.model_dump(), "keyframes": [asdict(k) for k in keys]}
    atomic_write_text(store.root / KIR_FILE, json.dumps(body, indent=1))
    return keys
