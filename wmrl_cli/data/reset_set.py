"""Initial states for envs: from an episode store or from RLinf's reset layout.

A reset entry is what a world model needs to start an imagined episode: the reference frame
(the episode's first frame, never updated), the last K context frames with the actions that
produced them, the instruction and task id; and, where known, the exact simulator state so the
real simulator can start from the same place.

RLinf layout (docs/formats.md#rlinf-reset-layout):
    dataset/trajN.npy        the initial frame of episode N (object array of 1 frame dict)
    dataset/trajN_kir.npy    a keyframe of episode N: reference frame, then the keyframe's
                             preceding frames and the keyframe itself (further keyframes of
                             the same episode: trajN_kir1.npy, trajN_kir2.npy, ...)
Each frame dict: image uint8 [H,W,3], instruction str, delta_action float32 [A] (the action
that produced this frame; zeros with the gripper open (-1) for a first frame), plus wmrl's
extras task_id, seed, step and, for the last frame, sim_state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.data.kir import Keyframe
from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_bytes
from wmrl_cli.files.safe_npy import load_npy

GRIPPER_OPEN = -1.0


def rest_action(action_dim: int) -> np.ndarray:
    """The action assigned to a frame no action produced: no motion, gripper open."""
    action = np.zeros(action_dim, dtype=np.float32)
    action[-1] = GRIPPER_OPEN
    return action


@dataclass
class ResetEntry:
    reference: np.ndarray  # uint8 [H,W,3]
    context: np.ndarray  # uint8 [K,H,W,3]; context[-1] is the current observation
    context_actions: np.ndarray  # float32 [K,A]; the action that produced each context frame
    instruction: str
    task_id: int
    seed: int | None = None
    step: int = 0
    sim_state: np.ndarray | None = None
    source: str = ""

    @property
    def is_keyframe(self) -> bool:
        return self.step > 0


def _frame_dict(
    image: np.ndarray, action: np.ndarray, instruction: str, task_id: int, seed: int, step: int
) -> dict:
    return {
        "image": np.ascontiguousarray(image, dtype=np.uint8),
        "instruction": instruction,
        "delta_action": np.asarray(action, dtype=np.float32),
        "task_id": int(task_id),
        "seed": int(seed),
        "step": int(step),
    }


def export_rlinf(
    store: EpisodeStore, out_dir: str | Path, keyframes: list[Keyframe], history: int = 4
) -> list[Path]:
    """Write `out_dir/dataset/trajN.npy` (+ `_kir` files); returns the paths written."""
    dataset = Path(out_dir) / "dataset"
    written: list[Path] = []
    by_episode: dict[int, list[Keyframe]] = {}
    for key in keyframes:
        by_episode.setdefault(key.episode_id, []).append(key)
    for meta in store.index:
        n = int(meta["id"])
        episode = store.load(n)
        a_dim = episode.actions.shape[1]
        args = (episode.instruction, episode.task_id, episode.seed)

        def frame(step: int, ep=episode, a_dim=a_dim, args=args) -> dict:
            action = ep.actions[step - 1] if step > 0 else rest_action(a_dim)
            return _frame_dict(ep.frames[step], action, *args, step)

        first = frame(0)
        if 0 in episode.sim_states:
            first["sim_state"] = episode.sim_states[0]
        written.append(_save_object_array(dataset / f"traj{n}.npy", [first]))
        for j, key in enumerate(sorted(by_episode.get(n, []), key=lambda k: k.step)):
            steps = [0] + list(range(max(key.step - history, 1), key.step + 1))
            frames = [frame(s) for s in steps]
            frames[-1]["sim_state"] = episode.sim_states[key.step]
            suffix = "_kir" if j == 0 else f"_kir{j}"
            written.append(_save_object_array(dataset / f"traj{n}{suffix}.npy", frames))
    return written


def _save_object_array(path: Path, frames: list[dict]) -> Path:
    array = np.empty(len(frames), dtype=object)
    for i, item in enumerate(frames):
        array[i] = item
    atomic_write_bytes(path, lambda handle: np.save(handle, array, allow_pickle=True))
    return path


def _natural_key(path: Path) -> list:
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", path.name)]


KirContext = Literal["pad", "last_frames"]


def context_indices(n_frames: int, context_frames: int, rule: KirContext = "pad") -> list[int]:
    """Which frames of an n-frame reset file fill the K context slots (oldest first); frame 0
    is the reference frame. -1 marks a slot that repeats the reference frame at rest (its
    action is the rest action).

    pad          the frames after the reference, the last K of them; a file with fewer than K
                 repeats its oldest one in front (wmrl's reading)
    last_frames  the last K frames of the file when it holds at least K, the reference included
                 when it holds exactly K; otherwise the reference frame in every slot (RLinf's
                 reset: the dataset's `last_n_frames` are used only when there are K of them)

    A 1-frame file (an initial state) gives [-1] * K under both rules.
    """
    if n_frames < 1 or context_frames < 1:
        raise ValueError(f"need a frame and a context slot (got {n_frames}, {context_frames})")
    if rule == "last_frames":
        if n_frames < context_frames:
            return [-1] * context_frames
        return list(range(n_frames - context_frames, n_frames))
    if n_frames == 1:
        return [-1] * context_frames
    history = list(range(1, n_frames))[-context_frames:]
    return [history[0]] * (context_frames - len(history)) + history


def read_rlinf_file(
    path: str | Path, context_frames: int = 4, kir_context: KirContext = "pad"
) -> ResetEntry:
    """One RLinf reset file -> ResetEntry, through the safe unpickler; `kir_context` picks the
    context frames (`context_indices`)."""
    path = Path(path)
    frames = load_npy(path)
    if frames.ndim != 1 or len(frames) == 0 or not all(isinstance(f, dict) for f in frames):
        raise WmrlError(f"{path}: expected a 1-D object array of frame dicts")
    for key in ("image",):
        if key not in frames[0]:
            raise WmrlError(f"{path}: frame dict has no '{key}' (keys: {sorted(frames[0])})")
    images = [np.asarray(f["image"], dtype=np.uint8) for f in frames]
    a_dim = len(np.asarray(frames[0].get("delta_action", rest_action(7))))
    actions = [
        np.asarray(f.get("delta_action", rest_action(a_dim)), dtype=np.float32) for f in frames
    ]
    instruction = frames[0].get("instruction", frames[0].get("task", ""))
    if isinstance(instruction, bytes):
        instruction = instruction.decode()
    last = frames[-1]
    slots = context_indices(len(frames), context_frames, kir_context)
    # A padded slot repeats the frame after it, which no action turned into the next: it gets
    # the rest action (the last copy keeps the frame's own action).
    padded = [i < 0 or (j + 1 < len(slots) and slots[j + 1] == i) for j, i in enumerate(slots)]
    context = np.stack([images[max(i, 0)] for i in slots])
    context_actions = np.stack(
        [rest_action(a_dim) if pad else actions[i] for i, pad in zip(slots, padded)]
    )
    sim_state = last.get("sim_state")
    return ResetEntry(
        reference=images[0],
        context=context,
        context_actions=context_actions,
        instruction=str(instruction),
        task_id=int(frames[0].get("task_id", 0)),
        seed=int(frames[0]["seed"]) if "seed" in frames[0] else None,
        step=int(last.get("step", 0 if len(frames) == 1 else len(frames) - 1)),
        sim_state=None if sim_state is None else np.asarray(sim_state, dtype=np.float64),
        source=path.name,
    )


def load_rlinf_reset_set(
    root: str | Path,
    enable_kir: bool = True,
    context_frames: int = 4,
    kir_context: KirContext = "pad",
) -> list[ResetEntry]:
    """All reset files of an RLinf `dataset/` folder (or its parent), sorted by name.
    Without KIR, files whose name contains `_kir` are excluded (RLinf's rule)."""
    root = Path(root)
    folder = root / "dataset" if (root / "dataset").is_dir() else root
    files = sorted(folder.glob("*.npy"), key=_natural_key)
    if not enable_kir:
        files = [f for f in files if "_kir" not in f.name]
    if not files:
        raise WmrlError(f"{folder}: no reset files (expected dataset/trajN.npy)")
    return [read_rlinf_file(f, context_frames, kir_context) for f in files]


def reset_frame_size(path: Path) -> tuple[int, int] | None:
    """(height, width) of a reset set's frames, from its first entry alone (an episode store or
    RLinf's layout): what the memory plan sizes imagination by before anything loads. None where
    it cannot be read; `load_reset_set` names the problem when the run loads it."""
    try:
        if (path / "index.json").is_file():
            store = EpisodeStore.open(path, verify=False)
            height, width = store.load(int(store.index[0]["id"])).frames.shape[1:3]
        else:
            folder = path / "dataset" if (path / "dataset").is_dir() else path
            first = min(folder.glob("*.npy"), key=_natural_key)
            height, width = np.asarray(load_npy(first)[0]["image"]).shape[:2]
    except (WmrlError, OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    return int(height), int(width)


def reset_set_from_store(
    store: EpisodeStore,
    episode_ids: list[int],
    keyframes: list[Keyframe],
    context_frames: int = 4,
) -> list[ResetEntry]:
    """Initial frames of the given episodes, then their keyframes."""
    entries: list[ResetEntry] = []
    wanted = set(episode_ids)
    keys = sorted((k for k in keyframes if k.episode_id in wanted), key=lambda k: k.episode_id)
    by_episode: dict[int, list[Keyframe]] = {}
    for key in keys:
        by_episode.setdefault(key.episode_id, []).append(key)
    for episode_id in sorted(wanted):
        episode = store.load(episode_id)
        for step in [0] + [k.step for k in by_episode.get(episode_id, [])]:
            entries.append(context_entry(episode, step, context_frames, episode_id))
    return entries


def context_entry(
    episode: Episode, step: int, context_frames: int, episode_id: int | None = None
) -> ResetEntry:
    """The world model's start at `step` of a stored episode: its first frame as reference, the
    `context_frames` frames up to `step` and the actions that produced them."""
    a_dim = episode.actions.shape[1]
    window = range(step - context_frames + 1, step + 1)
    # Before the episode start the first frame stands in, produced by no action.
    idx = [max(s, 0) for s in window]
    acts = [episode.actions[s - 1] if s > 0 else rest_action(a_dim) for s in window]
    return ResetEntry(
        reference=episode.frames[0],
        context=episode.frames[idx],
        context_actions=np.stack(acts).astype(np.float32),
        instruction=episode.instruction,
        task_id=episode.task_id,
        seed=episode.seed,
        step=step,
        sim_state=episode.sim_states.get(step),
        source=f"episode {episode_id} step {step}",
    )
