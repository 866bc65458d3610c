"""A LeRobotDataset v3 folder as a wmrl episode store (`--data` of sft, train-wm and
train-reward): converted once into a cached store, which the commands then read like any other.
The mapping of keys and the alignment of frames, actions and success: docs/formats.md
(#lerobotdataset-v3)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.config.lerobot import LerobotConfig
from wmrl_cli.data.episodes import STATISTICS_FILE, Episode, EpisodeStore
from wmrl_cli.data.lerobot import layout
from wmrl_cli.errors import ConfigError
from wmrl_cli.files import atomic_write_text

# Raise when the conversion changes, so that cached stores are made anew.
CONVERTER_VERSION = 1
SUCCESS_COLUMNS = ("next.success", "success", "next.reward", "reward")
REWARD_COLUMNS = ("next.reward", "reward")
BATCH = 32  # episodes written to the store at a time


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "wmrl" / "lerobot"


def cached_store(
    root: Path, options: LerobotConfig, image_size: int, chunk_size: int
) -> EpisodeStore:
    """The store converted from the dataset at `root` with these settings: the cached one, or a
    new conversion (into a temporary folder, renamed when complete)."""
    settings = {
        **options.model_dump(exclude={"cache_dir", "revision"}),
        "image_size": options.image_size or image_size,
        "chunk_size": chunk_size,
        "converter": CONVERTER_VERSION,
    }
    key = _fingerprint(root, settings)
    cache = Path(options.cache_dir).expanduser() if options.cache_dir else default_cache_dir()
    target = cache / f"{root.resolve().name}-{key[:16]}"
    if (target / "index.json").is_file():
        return EpisodeStore.open(target)
    tmp = cache / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        convert(root, tmp, options, options.image_size or image_size, chunk_size)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return EpisodeStore.open(target)


def _fingerprint(root: Path, settings: dict[str, Any]) -> str:
    """sha256 of the settings, the dataset's meta/ files and the names, sizes and modification
    times of its data and video files."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    digest.update(str(root.resolve()).encode())
    for path in sorted(p for p in root.rglob("*") if p.is_file() and ".cache" not in p.parts):
        rel = path.relative_to(root).as_posix()
        stat = path.stat()
        digest.update(f"{rel}:{stat.st_size}:{stat.st_mtime_ns}".encode())
        if rel.startswith("meta/") and stat.st_size < 2**22:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def convert(
    root: Path, out: Path, options: LerobotConfig, image_size: int, chunk_size: int
) -> EpisodeStore:
    """Write the dataset at `root` as an episode store at `out`; one line naming what the
    dataset lacks, before anything is written."""
    info = layout.read_info(root)
    features = info["features"]
    camera = _camera(root, info, options.camera)
    action = _feature(root, features, options.action_key, "lerobot.action_key")
    state = options.state_key or "observation.state"
    if options.state_key is not None:
        _feature(root, features, options.state_key, "lerobot.state_key")
    episodes_meta = layout.read_table(layout.parquet_files(root, layout.EPISODES_DIR))
    success = _success_source(root, features, episodes_meta, options.success)
    reward = next((c for c in REWARD_COLUMNS if c in features), None)
    fps = int(info["fps"])
    step = _frame_step(root, fps, options.fps)
    data_files = layout.parquet_files(root, "data")
    if not data_files:
        raise ConfigError(f"{root}: no data/chunk-*/file-*.parquet")
    if not episodes_meta:
        raise ConfigError(f"{root}: no {layout.EPISODES_DIR}/chunk-*/file-*.parquet")
    columns = {"episode_index", "frame_index", "timestamp", "task_index", action}
    columns |= {c for c in (success[1] if success[0] == "frame" else None, reward) if c}
    rows = layout.read_table(data_files, sorted(columns))
    tasks = layout.read_tasks(root)
    by_episode = _rows_by_episode(rows)
    meta = {int(e): i for i, e in enumerate(episodes_meta["episode_index"])}
    store = EpisodeStore(out)
    pending: list[Episode] = []
    frames = _episode_frames(root, info, camera, episodes_meta, rows, by_episode, image_size, step)
    for index, images in frames:
        order = by_episode[index]
        kept = np.arange(0, len(order), step)
        if len(kept) < 2:
            continue  # a single frame: no action to learn from
        acts = np.asarray([rows[action][i] for i in order[kept[:-1]]], dtype=np.float32)
        flags = _success_flags(rows, order, kept, success, episodes_meta, meta[index], options)
        if reward is not None:
            values = np.asarray([rows[reward][i] for i in order], dtype=np.float32)
            rewards = _labels(values, kept, reward.startswith("next.")).astype(np.float32)
        else:
            rewards = flags.astype(np.float32)
        task_index = int(rows["task_index"][order[0]])
        text = options.task or tasks.get(task_index)
        if text is None:
            raise ConfigError(f"{root}: task_index {task_index} is not in {layout.TASKS}")
        pending.append(
            Episode(
                task_id=0 if options.task else task_index,
                task_name=text,
                instruction=text,
                seed=0,
                init_id=index,
                frames=images,
                actions=acts.reshape(len(acts), -1),
                rewards=rewards,
                success=flags,
                chunk_size=chunk_size,
                policy="lerobot",
                suite="lerobot",
            )
        )
        if len(pending) >= BATCH:
            store.add(pending)
            pending = []
    store.add(pending)
    if len(store) == 0:
        raise ConfigError(f"{root}: no episode with two frames or more")
    _write_statistics(root, out, action, state, rows, len(store))
    atomic_write_text(
        out / "lerobot_source.json",
        json.dumps({"dataset": str(root.resolve()), "camera": camera, "fps": fps // step}),
    )
    return store


def _camera(root: Path, info: dict[str, Any], wanted: str | None) -> str:
    cameras = layout.camera_keys(info)
    if wanted is not None:
        for key in (wanted, f"observation.images.{wanted}"):
            if key in cameras:
                return key
        raise ConfigError(
            f"{root}: no camera '{wanted}' (cameras: {', '.join(cameras) or 'none'}); set "
            "lerobot.camera"
        )
    if len(cameras) == 1:
        return cameras[0]
    if not cameras:
        raise ConfigError(f"{root}: no camera (no video or image feature) in {layout.INFO}")
    raise ConfigError(
        f"{root}: {len(cameras)} cameras ({', '.join(cameras)}): choose one with "
        "--set lerobot.camera=KEY"
    )


def _feature(root: Path, features: dict[str, Any], key: str, option: str) -> str:
    if key not in features:
        names = ", ".join(k for k in features if k not in layout.INDEX_FEATURES)
        raise ConfigError(f"{root}: no feature '{key}' (features: {names}); set {option}")
    return key


def _success_source(
    root: Path, features: dict[str, Any], episodes: dict[str, list], wanted: str
) -> tuple[str, str | None]:
    """(kind, column): ("frame", a column of data/), ("episode", a column of meta/episodes/) or
    ("last_frame", None)."""
    if wanted == "last_frame":
        return "last_frame", None
    if wanted.startswith("episode:"):
        column = wanted.removeprefix("episode:")
        if column not in episodes:
            raise ConfigError(f"{root}: no episode column '{column}' in {layout.EPISODES_DIR}")
        return "episode", column
    if wanted != "auto":
        _feature(root, features, wanted, "lerobot.success")
        return "frame", wanted
    for column in SUCCESS_COLUMNS:
        if column in features:
            return "frame", column
    if "success" in episodes:
        return "episode", "success"
    raise ConfigError(
        f"{root}: no success in the dataset (no column {', '.join(SUCCESS_COLUMNS)}, no "
        "episode column success); name one with --set lerobot.success=COLUMN, or "
        "lerobot.success=last_frame if every episode is a successful demonstration"
    )


def _frame_step(root: Path, fps: int, wanted: int | None) -> int:
    if wanted is None or wanted == fps:
        return 1
    if wanted > fps or fps % wanted:
        raise ConfigError(f"lerobot.fps={wanted} must divide the dataset's fps ({fps}) at {root}")
    return fps // wanted


def _rows_by_episode(rows: dict[str, list]) -> dict[int, np.ndarray]:
    """Each episode's row numbers, in frame order."""
    episodes = np.asarray(rows["episode_index"], dtype=np.int64)
    frame = np.asarray(rows["frame_index"], dtype=np.int64)
    order = np.lexsort((frame, episodes))
    out: dict[int, np.ndarray] = {}
    for index in np.unique(episodes):
        out[int(index)] = order[episodes[order] == index]
    return out


def _labels(values: np.ndarray, kept: np.ndarray, after_action: bool) -> np.ndarray:
    """Per-row values [N] -> one label per kept action [len(kept) - 1]: the largest over the
    frames after the action up to the next kept frame. A `next.*` column holds the value after
    each row's action (the frame of the next row); its last row's, whose frame is not stored,
    counts for the last frame."""
    per_frame = values.astype(np.float64)
    if after_action:
        per_frame = np.concatenate([per_frame[:1], per_frame[:-1]])
        per_frame[-1] = max(per_frame[-1], float(values[-1]))
    return np.maximum.reduceat(per_frame, kept[:-1] + 1)


def _success_flags(
    rows: dict[str, list],
    order: np.ndarray,
    kept: np.ndarray,
    source: tuple[str, str | None],
    episodes: dict[str, list],
    meta_row: int,
    options: LerobotConfig,
) -> np.ndarray:
    kind, column = source
    flags = np.zeros(len(kept) - 1, dtype=bool)
    if kind == "frame" and column is not None:
        values = np.asarray([rows[column][i] for i in order])
        if values.dtype != bool:
            values = values.astype(np.float64) >= options.success_threshold
        return _labels(values, kept, column.startswith("next.")) > 0
    if kind == "episode" and column is not None:
        flags[-1] = bool(episodes[column][meta_row])
    else:  # last_frame: every episode succeeded at its end
        flags[-1] = True
    return flags


def _episode_frames(
    root: Path,
    info: dict[str, Any],
    camera: str,
    episodes: dict[str, list],
    rows: dict[str, list],
    by_episode: dict[int, np.ndarray],
    size: int,
    step: int,
) -> Iterator[tuple[int, np.ndarray]]:
    """(episode index, its kept frames [N, size, size, 3]) for every episode, in the order
    their frames are stored."""
    if info["features"][camera]["dtype"] == "image":
        yield from _image_frames(root, camera, by_episode, size, step)
        return
    prefix = f"videos/{camera}/"
    needed = [f"{prefix}{k}" for k in ("chunk_index", "file_index", "from_timestamp")]
    missing = [k for k in needed if k not in episodes]
    if missing:
        raise ConfigError(f"{root}: no {missing[0]} in {layout.EPISODES_DIR}")
    fps = float(info["features"][camera].get("info", {}).get("video.fps") or info["fps"])
    files: dict[tuple[int, int], list[int]] = {}
    for row, index in enumerate(episodes["episode_index"]):
        file = (int(episodes[needed[0]][row]), int(episodes[needed[1]][row]))
        if int(index) in by_episode:
            files.setdefault(file, []).append(row)
    template = info.get("video_path") or layout.VIDEO_PATH
    for (chunk, file), meta_rows in sorted(files.items()):
        path = root / template.format(video_key=camera, chunk_index=chunk, file_index=file)
        if not path.is_file():
            raise ConfigError(f"{root}: missing video {path.relative_to(root)}")
        # frame number in the file -> (episode, position among its kept frames)
        wanted: dict[int, list[tuple[int, int]]] = {}
        counts: dict[int, int] = {}
        for row in meta_rows:
            index = int(episodes["episode_index"][row])
            start = float(episodes[needed[2]][row])
            order = by_episode[index][::step]
            counts[index] = len(order)
            for position, i in enumerate(order):
                number = round((start + float(rows["timestamp"][i])) * fps)
                wanted.setdefault(number, []).append((index, position))
        buffers = {index: np.zeros((n, size, size, 3), np.uint8) for index, n in counts.items()}
        filled = dict.fromkeys(counts, 0)
        for number, frame in enumerate(layout.decode_video(path, size)):
            for index, position in wanted.pop(number, ()):
                buffers[index][position] = frame
                filled[index] += 1
                if filled[index] == counts[index]:
                    yield index, buffers.pop(index)
            if not wanted:
                break
        if wanted:
            raise ConfigError(
                f"{path}: ends before frame {min(wanted)} that episode {wanted[min(wanted)][0][0]} "
                "needs"
            )


def _image_frames(
    root: Path, camera: str, by_episode: dict[int, np.ndarray], size: int, step: int
) -> Iterator[tuple[int, np.ndarray]]:
    """Frames of an `image` feature: PNG (or JPEG) bytes in the data files' rows."""
    from PIL import Image

    images = layout.read_table(layout.parquet_files(root, "data"), [camera])[camera]
    for index, order in sorted(by_episode.items()):
        frames = []
        for i in order[::step]:
            cell = images[i]
            raw = cell.get("bytes") if isinstance(cell, dict) else None
            if raw is None:
                raise ConfigError(f"{root}: a frame of {camera} holds no image bytes")
            image = Image.open(io.BytesIO(raw)).convert("RGB").resize((size, size), Image.BOX)
            frames.append(np.asarray(image, dtype=np.uint8))
        yield index, np.stack(frames)


def _write_statistics(
    root: Path, out: Path, action: str, state: str, rows: dict[str, list], episodes: int
) -> None:
    """The dataset's action statistics (meta/stats.json; computed from the actions where it
    has no q01/q99) in the layout of a policy's dataset_statistics.json entry."""
    stats = layout.read_stats(root)
    entry = dict(stats.get(action) or {})
    if not {"q01", "q99"} <= entry.keys():
        entry = layout.feature_stats(np.asarray(rows[action], dtype=np.float64))
    dims = len(entry["q01"])
    summary = {k: entry[k] for k in ("mean", "std", "min", "max", "q01", "q99") if k in entry}
    proprio = stats.get(state) or {"mean": [0.0], "std": [0.0], "min": [0.0], "max": [0.0]}
    body = {
        "action": {**summary, "mask": [True] * dims},
        "proprio": {
            k: proprio[k] for k in ("mean", "std", "min", "max", "q01", "q99") if k in proprio
        },
        "num_transitions": int(np.ravel(entry.get("count", [len(rows[action])]))[0]),
        "num_trajectories": episodes,
        "source": f"{root.resolve()}/{layout.STATS}",
    }
    atomic_write_text(out / STATISTICS_FILE, json.dumps(body, indent=1))
