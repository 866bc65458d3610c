"""An episode store as a LeRobotDataset v3 (`wmrl rollout --format lerobot`, `wmrl convert
STORE OUT --to lerobot`): one row per action (the observation it was taken from, the action,
next.reward, next.success, next.done), the frames in one H.264 video, the meta/ files LeRobot's
loader reads (docs/formats.md#lerobotdataset-v3). Written under a temporary name beside OUT,
checked against the format (check.py) and renamed."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.data.lerobot import layout
from wmrl_cli.errors import WmrlError

IMAGE_SAMPLES = 16  # frames per episode its image statistics are computed from


def write_dataset(
    store: EpisodeStore, out: Path, fps: int, camera: str, robot_type: str | None = None
) -> int:
    """Write the store's episodes as a v3 dataset at `out` (a new folder); returns the frames
    written."""
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        frames = _write(store, tmp, fps, f"observation.images.{camera}", robot_type)
        from wmrl_cli.data.lerobot.check import check_dataset

        problems = check_dataset(tmp)
        if problems:
            raise WmrlError(f"the LeRobot dataset written is not valid: {problems[0]}")
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return frames


class _Columns:
    """The frame rows, per-episode rows and statistics gathered while the video is encoded."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {
            k: [] for k in ("action", *_SCALARS, *layout.INDEX_FEATURES)
        }
        self.episodes: list[dict[str, Any]] = []
        self.tasks: dict[str, int] = {}
        self.samples: list[np.ndarray] = []


_SCALARS = {"next.reward": "float32", "next.success": "bool", "next.done": "bool"}


def _frames(store: EpisodeStore, columns: _Columns, fps: int, key: str) -> Iterator[np.ndarray]:
    """Every stored observation an action was taken from, in episode order; the rows and the
    episodes' metadata recorded as they pass."""
    rows = columns.rows
    for episode in store:
        steps = episode.length
        if steps == 0:
            continue
        number, start = len(columns.episodes), len(rows["index"])
        task = columns.tasks.setdefault(episode.instruction, len(columns.tasks))
        t = np.arange(steps)
        added = {
            "action": list(np.asarray(episode.actions, dtype=np.float32)),
            "next.reward": np.asarray(episode.rewards, dtype=np.float32).tolist(),
            "next.success": np.asarray(episode.success, dtype=bool).tolist(),
            "next.done": (t == steps - 1).tolist(),
            "timestamp": (t / fps).astype(np.float32).tolist(),
            "frame_index": t.tolist(),
            "episode_index": [number] * steps,
            "index": (start + t).tolist(),
            "task_index": [task] * steps,
        }
        for name, values in added.items():
            rows[name] += values
        frames = episode.frames[:steps]
        sample = frames[np.linspace(0, steps - 1, min(steps, IMAGE_SAMPLES)).astype(int)]
        columns.samples.append(sample[:2])
        stats = {name: layout.feature_stats(np.asarray(v)) for name, v in added.items()}
        stats[key] = layout.image_stats(sample)
        columns.episodes.append(
            {
                "episode_index": number,
                "tasks": [episode.instruction],
                "length": steps,
                "data/chunk_index": 0,
                "data/file_index": 0,
                "dataset_from_index": start,
                "dataset_to_index": start + steps,
                f"videos/{key}/chunk_index": 0,
                f"videos/{key}/file_index": 0,
                f"videos/{key}/from_timestamp": start / fps,
                f"videos/{key}/to_timestamp": (start + steps) / fps,
                "meta/episodes/chunk_index": 0,
                "meta/episodes/file_index": 0,
                **{f"stats/{f}/{s}": v for f, entry in stats.items() for s, v in entry.items()},
            }
        )
        yield from frames


def _write(store: EpisodeStore, root: Path, fps: int, key: str, robot_type: str | None) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if len(store) == 0:
        raise WmrlError(f"{store.root} holds no episodes to write")
    first = store.load(0)
    height, width = first.frames.shape[1:3]
    action_dim = int(first.actions.shape[1])
    columns = _Columns()
    video = root / layout.VIDEO_PATH.format(video_key=key, chunk_index=0, file_index=0)
    written = layout.encode_video(video, _frames(store, columns, fps, key), (height, width), fps)
    rows = columns.rows
    features = _features(key, height, width, fps, action_dim)
    # frame rows: the types datasets gives these features (a fixed-size list for a vector)
    arrays = {
        "action": pa.FixedSizeListArray.from_arrays(
            pa.array(np.concatenate(rows["action"]), pa.float32()), action_dim
        ),
        **{
            name: pa.array(rows[name], pa.from_numpy_dtype(np.dtype(dtype)))
            for name, dtype in {**_SCALARS, **layout.INDEX_FEATURES}.items()
        },
    }
    hf = {"info": {"features": {k: _hf_feature(f) for k, f in features.items() if k != key}}}
    table = pa.table(arrays).replace_schema_metadata({"huggingface": json.dumps(hf)})
    data = root / layout.DATA_PATH.format(chunk_index=0, file_index=0)
    data.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, data, compression="snappy")
    episodes = root / layout.EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(columns.episodes), episodes, compression="snappy")
    _write_tasks(root / layout.TASKS, columns.tasks)
    stats = {name: layout.feature_stats(np.asarray(values)) for name, values in rows.items()}
    stats[key] = layout.image_stats(np.concatenate(columns.samples))
    (root / layout.STATS).write_text(json.dumps(stats, indent=4))
    info = {
        "codebase_version": layout.CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": len(columns.episodes),
        "total_frames": written,
        "total_tasks": len(columns.tasks),
        "chunks_size": 1000,
        "data_files_size_in_mb": 100,
        "video_files_size_in_mb": 200,
        "fps": fps,
        "splits": {"train": f"0:{len(columns.episodes)}"},
        "data_path": layout.DATA_PATH,
        "video_path": layout.VIDEO_PATH,
        "features": features,
    }
    (root / layout.INFO).write_text(json.dumps(info, indent=4))
    return written


def _features(key: str, height: int, width: int, fps: int, action_dim: int) -> dict[str, Any]:
    scalar = {"shape": [1], "names": None}
    return {
        key: {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": layout.video_info(height, width, fps),
        },
        "action": {"dtype": "float32", "shape": [action_dim], "names": None},
        **{name: {"dtype": dtype, **scalar} for name, dtype in _SCALARS.items()},
        **{name: {"dtype": dtype, **scalar} for name, dtype in layout.INDEX_FEATURES.items()},
    }


def _hf_feature(feature: dict[str, Any]) -> dict[str, Any]:
    """The `datasets` description of a feature (the parquet's huggingface metadata)."""
    value = {"dtype": feature["dtype"], "_type": "Value"}
    if feature["shape"] == [1]:
        return value
    return {"feature": value, "length": feature["shape"][0], "_type": "List"}


def _write_tasks(path: Path, tasks: dict[str, int]) -> None:
    """meta/tasks.parquet as pandas writes lerobot's DataFrame: task_index, the text as the
    index (`__index_level_0__`, named in the pandas metadata so that pandas restores it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    index = "__index_level_0__"
    pandas = {
        "index_columns": [index],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": index,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = pa.table(
        {
            "task_index": pa.array(list(tasks.values()), pa.int64()),
            index: pa.array(list(tasks), pa.string()),
        }
    ).replace_schema_metadata({"pandas": json.dumps(pandas)})
    pq.write_table(table, path)
