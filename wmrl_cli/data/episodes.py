"""The canonical episode store: one `.npz` per episode (numeric arrays only, never pickle)
and an `index.json` describing every episode. Layout in docs/formats.md.

    store/
      index.json                {"format": "wmrl-episodes", "version": 1, "episodes": [...]}
      episodes/ep_000000.npz    frames, actions, rewards, success, sim_state_steps, sim_state_*,
                                [perturbed]
"""

from __future__ import annotations

import json
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_bytes, atomic_write_text

FORMAT = "wmrl-episodes"
VERSION = 1

# `imagined.labels` of imagined episodes whose actions the real simulator executed to label them
# (jobs/imagine_policy.py): their steps are real steps.
SIMULATOR_LABELS = "simulator"
# ... and of verified imagination's calls (envs/verified.py), labelled by a replay up to the
# call whose steps RL's `env/real_steps` already counted: not counted again.
VERIFIED_CALL_LABELS = "verified_call"
# The action statistics of the dataset a store was converted from (a LeRobot dataset's
# meta/stats.json), which a policy trained on the store normalizes its actions with.
STATISTICS_FILE = "action_statistics.json"


@dataclass
class Episode:
    """One episode. frames[t] is the observation before action t; frames[-1] is the last one.

    frames uint8 [T+1,H,W,3]; actions float32 [T,A] (as executed); rewards float32 [T];
    success bool [T] (the simulator's flag after each step). sim_states maps a step index
    (a chunk boundary) to the flat simulator state at that step, so the episode can be
    replayed from any chunk. perturbed bool [T]: the steps whose actions were perturbed
    (noise or random actions, `rollout.perturbation`); None where the collecting policy did not
    report it (stores written before it existed). imagined: for an episode whose frames a world
    model predicted (`wmrl rollout --world-model`), where they came from (docs/formats.md); such
    an episode has no simulator states.
    """

    task_id: int
    task_name: str
    instruction: str
    seed: int
    init_id: int
    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    success: np.ndarray
    chunk_size: int
    sim_states: dict[int, np.ndarray] = field(default_factory=dict)
    policy: str = ""
    suite: str = ""
    perturbed: np.ndarray | None = None
    imagined: dict[str, Any] | None = None

    @property
    def length(self) -> int:
        return int(self.actions.shape[0])

    @property
    def succeeded(self) -> bool:
        return bool(self.success.any())

    @property
    def success_step(self) -> int | None:
        """Number of actions taken when success first held (None if never)."""
        hits = np.flatnonzero(self.success)
        return int(hits[0]) + 1 if hits.size else None

    def meta(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "task_name": self.task_name,
            "instruction": self.instruction,
            "seed": self.seed,
            "init_id": self.init_id,
            "length": self.length,
            "success": self.succeeded,
            "success_step": self.success_step,
            "chunk_size": self.chunk_size,
            "policy": self.policy,
            "suite": self.suite,
            **({"imagined": self.imagined} if self.imagined is not None else {}),
        }


class EpisodeStore:
    """An episode directory: append episodes, list them, stream them back."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._index: list[dict[str, Any]] = []
        index = self.root / "index.json"
        if index.exists():
            self._index = self._read_index(index)

    @staticmethod
    def _read_index(path: Path) -> list[dict[str, Any]]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:  # ValueError: bad JSON or bytes that are not UTF-8
            raise WmrlError(
                f"{path}: unreadable episode index ({exc}); restore it or rerun `wmrl rollout`"
            ) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise WmrlError(f"{path}: not a wmrl episode index (expected format '{FORMAT}')")
        episodes = data.get("episodes")
        if not isinstance(episodes, list) or not all(
            isinstance(e, dict) and e.keys() >= _INDEX_KEYS for e in episodes
        ):
            needed = ", ".join(sorted(_INDEX_KEYS))
            raise WmrlError(
                f"{path}: damaged episode index (every episode needs {needed}); restore it or "
                "rerun `wmrl rollout`"
            )
        return list(episodes)

    @classmethod
    def open(cls, root: str | Path, verify: bool = True) -> EpisodeStore:
        """An existing store; a clear error if `root` is not one. `verify`: every episode file
        is read once and its checksums compared (`verify`), so that a damaged file stops the
        command before it writes anything."""
        if not (Path(root) / "index.json").is_file():
            raise WmrlError(
                f"{root}: not an episode store (no index.json); create one with "
                "`wmrl rollout --out DIR`"
            )
        store = cls(root)
        if verify:
            store.verify()
        return store

    def verify(self) -> None:
        """Every episode file is present and whole (its zip checksums match); one line naming
        the first damaged file otherwise."""
        import zipfile

        for meta in self._index:
            path = self.root / meta["file"]
            try:
                with zipfile.ZipFile(path) as archive:
                    bad = archive.testzip()
                if bad is not None:
                    raise zipfile.BadZipFile(f"checksum mismatch in {bad}")
            except (OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
                raise _damaged(path, exc) from None

    def __len__(self) -> int:
        return len(self._index)

    @property
    def index(self) -> list[dict[str, Any]]:
        return list(self._index)

    def first_per_task(self, per_task: int | None) -> list[int]:
        """The ids of the first `per_task` episodes of every task (all with None), in store
        order."""
        taken: dict[int, int] = {}
        ids = []
        for episode_id, entry in enumerate(self._index):
            task = int(entry["task_id"])
            if per_task is None or taken.get(task, 0) < per_task:
                taken[task] = taken.get(task, 0) + 1
                ids.append(episode_id)
        return ids

    def real_steps(self) -> int:
        """Real environment steps behind the store: the sum of its real episodes' lengths and
        of the imagined episodes whose actions the simulator executed to label them
        (`imagined.labels == "simulator"`); other imagined episodes took none."""
        return sum(int(m["length"]) for m in self._index if _executed(m))

    @property
    def roots(self) -> list[Path]:
        """The store directories behind this store: itself (several for a pool)."""
        return [self.root]

    @property
    def imagined(self) -> bool:
        """Whether the store holds episodes a world model imagined (`wmrl rollout
        --world-model`)."""
        return any(m.get("imagined") for m in self._index)

    def action_statistics(self) -> dict[str, Any] | None:
        """The source dataset's action statistics (`STATISTICS_FILE`: a dataset_statistics.json
        entry), where the store was converted from a dataset that has them; else None."""
        path = self.root / STATISTICS_FILE
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise WmrlError(f"{path}: unreadable action statistics ({exc})") from None

    def require_simulator_states(self, purpose: str) -> None:
        """One line for a use that needs the simulator's states, which imagined episodes lack."""
        if self.imagined:
            raise WmrlError(
                f"{self.root} holds imagined episodes (wmrl rollout --world-model), which have "
                f"no simulator states {purpose}; use the store they were imagined from"
            )

    def add(self, episodes: list[Episode]) -> None:
        """Write episode files, then the index (atomically), so a crash never leaves the index
        pointing at a missing or partial file."""
        for episode in episodes:
            number = len(self._index)
            name = f"episodes/ep_{number:06d}.npz"
            arrays = {
                "frames": episode.frames,
                "actions": episode.actions.astype(np.float32),
                "rewards": episode.rewards.astype(np.float32),
                "success": episode.success.astype(bool),
            }
            steps = sorted(episode.sim_states)
            arrays["sim_state_steps"] = np.asarray(steps, dtype=np.int64)
            if steps:
                arrays["sim_states"] = np.stack([episode.sim_states[s] for s in steps])
            if episode.perturbed is not None:
                if np.shape(episode.perturbed) != (episode.length,):
                    raise WmrlError(
                        f"episode {number}: perturbed has shape {np.shape(episode.perturbed)}, "
                        f"expected ({episode.length},)"
                    )
                arrays["perturbed"] = np.asarray(episode.perturbed, dtype=bool)
            atomic_write_bytes(self.root / name, lambda h, a=arrays: np.savez_compressed(h, **a))
            self._index.append({"id": number, "file": name, **episode.meta()})
        self._write_index()

    def _write_index(self) -> None:
        body = {"format": FORMAT, "version": VERSION, "episodes": self._index}
        atomic_write_text(self.root / "index.json", json.dumps(body, indent=1))

    def load(self, episode_id: int) -> Episode:
        meta = self._index[episode_id]
        path = self.root / meta["file"]
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in data.files}
            missing = [k for k in _REQUIRED if k not in arrays]
            if missing:
                raise ValueError(f"no {', '.join(missing)}")
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise _damaged(path, exc) from None
        steps = arrays.get("sim_state_steps", np.zeros(0, dtype=np.int64))
        states = arrays.get("sim_states")
        return Episode(
            task_id=int(meta["task_id"]),
            task_name=meta["task_name"],
            instruction=meta["instruction"],
            seed=int(meta["seed"]),
            init_id=int(meta["init_id"]),
            frames=arrays["frames"],
            actions=arrays["actions"],
            rewards=arrays["rewards"],
            success=arrays["success"],
            chunk_size=int(meta["chunk_size"]),
            sim_states={int(s): states[i] for i, s in enumerate(steps)},
            policy=meta.get("policy", ""),
            suite=meta.get("suite", ""),
            perturbed=arrays.get("perturbed"),
            imagined=meta.get("imagined"),
        )

    def __iter__(self) -> Iterator[Episode]:
        """Streams episodes one at a time (only one is in memory)."""
        for i in range(len(self._index)):
            yield self.load(i)

    def iter_ids(self, ids: list[int]) -> Iterator[Episode]:
        for i in ids:
            yield self.load(i)

    def split(
        self, val_fraction: float = 0.1, seed: int = 0, stratify: tuple[str, ...] = ("task_id",)
    ) -> tuple[list[int], list[int]]:
        """Split by episode, stratified by the index fields in `stratify` (task by default),
        deterministically: (train_ids, val_ids). Every stratum with at least two episodes
        contributes at least one validation episode."""
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
        rng = np.random.default_rng(seed)
        strata: dict[tuple, list[int]] = {}
        for meta in self._index:
            strata.setdefault(tuple(meta[k] for k in stratify), []).append(int(meta["id"]))
        train, val = [], []
        for key in sorted(strata):
            ids = list(rng.permutation(strata[key]))
            n_val = int(round(val_fraction * len(ids)))
            if val_fraction > 0 and len(ids) >= 2:
                n_val = min(max(n_val, 1), len(ids) - 1)
            val += [int(i) for i in ids[:n_val]]
            train += [int(i) for i in ids[n_val:]]
        return sorted(train), sorted(val)


class PooledStore(EpisodeStore):
    """Several stores read as one (read-only): ids 0..N-1 run through the stores in order, so
    that splits, labels and training see one list of episodes (`train-reward --data A --data
    B`: real and imagined episodes together)."""

    def __init__(self, stores: list[EpisodeStore]) -> None:
        self.stores = stores
        # A label for messages: a pool has no directory of its own.
        self.root = Path(" + ".join(str(s.root) for s in stores))
        self._index = []
        self._where: list[tuple[EpisodeStore, int]] = []
        for store in stores:
            for meta in store.index:
                self._index.append({**meta, "id": len(self._where), "store": str(store.root)})
                self._where.append((store, int(meta["id"])))

    @property
    def roots(self) -> list[Path]:
        return [s.root for s in self.stores]

    def add(self, episodes: list[Episode]) -> None:
        raise WmrlError(f"{self.root}: a pool of stores is read-only")

    def load(self, episode_id: int) -> Episode:
        store, local_id = self._where[episode_id]
        return store.load(local_id)


def open_stores(paths: list[str | Path]) -> EpisodeStore:
    """One store, or several pooled (`PooledStore`); each path must be a store, each named
    once, and their frames of one size."""
    if not paths:
        raise WmrlError("no episode store given")
    stores = [EpisodeStore.open(p) for p in paths]
    if len(stores) == 1:
        return stores[0]
    roots = [s.root.resolve() for s in stores]
    twice = sorted({str(r) for r in roots if roots.count(r) > 1})
    if twice:
        raise WmrlError(f"{twice[0]}: the same episode store is given twice")
    shapes = {s.root: s.load(0).frames.shape[1:] for s in stores if len(s)}
    if len(set(shapes.values())) > 1:
        sizes = ", ".join(f"{root}: {'x'.join(map(str, shape))}" for root, shape in shapes.items())
        raise WmrlError(f"the stores' frames differ in size ({sizes})")
    return PooledStore(stores)


_REQUIRED = ("frames", "actions", "rewards", "success")
_INDEX_KEYS = {"id", "file", "task_id", "task_name", "length"}


def _damaged(path: Path, exc: BaseException) -> WmrlError:
    """The one line for an episode file that cannot be read."""
    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return WmrlError(
        f"{path}: damaged episode file ({reason}); restore it, rerun `wmrl rollout` to rebuild "
        f"the store, or remove the episode (its file and its entry in {path.parent.parent.name}"
        "/index.json)"
    )


def _executed(meta: dict[str, Any]) -> bool:
    """Whether an episode's actions ran in the real simulator (real, or replayed to label it)."""
    imagined = meta.get("imagined")
    return not imagined or imagined.get("labels") == SIMULATOR_LABELS
