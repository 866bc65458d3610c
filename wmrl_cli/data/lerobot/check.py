"""The schema check of a LeRobotDataset v3 folder, written against the format (lerobot 0.4.4's
layout, docs/formats.md#lerobotdataset-v3): the files, info.json's fields and features, the
parquet columns and their types, the indices' continuity, the episodes' rows and video spans,
the tasks, the statistics and every video's frame count and size. `check_dataset` returns the
problems found, one line each ([] for a valid dataset)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.data.lerobot import layout

INFO_KEYS = (
    "codebase_version", "robot_type", "total_episodes", "total_frames", "total_tasks",
    "chunks_size", "data_files_size_in_mb", "video_files_size_in_mb", "fps", "splits",
    "data_path", "video_path", "features",
)  # fmt: skip
EPISODE_COLUMNS = (
    "episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
    "dataset_from_index", "dataset_to_index", "meta/episodes/chunk_index",
    "meta/episodes/file_index",
)  # fmt: skip
VIDEO_INFO = ("video.height", "video.width", "video.codec", "video.pix_fmt", "video.fps")
ARROW_TYPES = {"float32": "float", "float64": "double", "int64": "int64", "bool": "bool"}


def check_dataset(root: Path) -> list[str]:
    import json

    problems: list[str] = []
    for name in (layout.INFO, layout.STATS, layout.TASKS):
        if not (root / name).is_file():
            problems.append(f"no {name}")
    if problems:
        return problems
    info = json.loads((root / layout.INFO).read_text())
    problems += _check_info(info)
    if problems:
        return problems
    data_files = layout.parquet_files(root, "data")
    episode_files = layout.parquet_files(root, layout.EPISODES_DIR)
    if not data_files or not episode_files:
        return ["no data/ or meta/episodes/ parquet files"]
    problems += _check_data(root, info, data_files)
    problems += _check_episodes(root, info, episode_files)
    problems += _check_stats(info, json.loads((root / layout.STATS).read_text()))
    return problems


def _check_info(info: dict[str, Any]) -> list[str]:
    out = [f"info.json has no '{k}'" for k in INFO_KEYS if k not in info]
    if out:
        return out
    if info["codebase_version"] != layout.CODEBASE_VERSION:
        out.append(f"codebase_version {info['codebase_version']}, not {layout.CODEBASE_VERSION}")
    if info["data_path"] != layout.DATA_PATH or info["video_path"] != layout.VIDEO_PATH:
        out.append("data_path or video_path differs from lerobot's")
    if info["splits"] != {"train": f"0:{info['total_episodes']}"}:
        out.append(f"splits {info['splits']} do not cover the {info['total_episodes']} episodes")
    features = info["features"]
    for name, dtype in layout.INDEX_FEATURES.items():
        feature = features.get(name, {})
        if feature.get("dtype") != dtype or list(feature.get("shape", [])) != [1]:
            out.append(f"feature {name} is not {dtype} of shape [1]")
    for name, feature in features.items():
        if "/" in name:
            out.append(f"feature name {name} holds '/'")
        if not {"dtype", "shape", "names"} <= feature.keys():
            out.append(f"feature {name} lacks dtype, shape or names")
        elif feature["dtype"] == "video":
            video = feature.get("info") or {}
            if len(feature["shape"]) != 3 or feature["names"][2] not in ("channel", "channels"):
                out.append(f"video {name}: shape {feature['shape']} is not [height, width, 3]")
            missing = [k for k in VIDEO_INFO if k not in video]
            if missing:
                out.append(f"video {name}: info lacks {', '.join(missing)}")
    return out


def _check_data(root: Path, info: dict[str, Any], files: list[Path]) -> list[str]:
    import pyarrow.parquet as pq

    out = []
    features = info["features"]
    expected = sorted(k for k, f in features.items() if f["dtype"] != "video")
    schema = pq.read_schema(files[0])
    if sorted(schema.names) != expected:
        out.append(f"data columns {sorted(schema.names)}, features say {expected}")
    for name in set(expected) & set(schema.names):
        want = _arrow_type(features[name])
        if want is not None and str(schema.field(name).type) != want:
            out.append(f"data column {name} is {schema.field(name).type}, expected {want}")
    rows = layout.read_table(files, list(layout.INDEX_FEATURES))
    index = np.asarray(rows["index"])
    if len(index) != info["total_frames"]:
        out.append(f"{len(index)} frame rows, info.json says {info['total_frames']}")
    if not np.array_equal(index, np.arange(len(index))):
        out.append("index is not 0, 1, 2, ... over the frame rows")
    episodes = np.asarray(rows["episode_index"])
    starts = np.flatnonzero(np.diff(episodes, prepend=-1))
    if (
        not np.array_equal(episodes[starts], np.arange(len(starts)))
        or len(starts) != info["total_episodes"]
    ):
        out.append("episode_index does not run 0, 1, 2, ... in contiguous blocks")
    frame = np.asarray(rows["frame_index"])
    expected_frame = np.arange(len(frame)) - np.repeat(starts, np.diff([*starts, len(frame)]))
    if not np.array_equal(frame, expected_frame):
        out.append("frame_index does not restart at 0 and count up in every episode")
    timestamp = np.asarray(rows["timestamp"], dtype=np.float64)
    if np.abs(timestamp - frame / info["fps"]).max(initial=0) > 1e-4:
        out.append("timestamp is not frame_index / fps")
    tasks = layout.read_tasks(root)
    if sorted(tasks) != list(range(info["total_tasks"])):
        out.append(f"tasks.parquet's task_index is not 0..{info['total_tasks'] - 1}")
    if not set(np.unique(rows["task_index"]).tolist()) <= set(tasks):
        out.append("a frame's task_index is not in tasks.parquet")
    return out


def _arrow_type(feature: dict[str, Any]) -> str | None:
    base = ARROW_TYPES.get(feature["dtype"])
    if base is None:
        return None
    shape = list(feature["shape"])
    if shape == [1]:
        return base
    if len(shape) == 1:
        return f"fixed_size_list<element: {base}>[{shape[0]}]"
    return None


def _check_episodes(root: Path, info: dict[str, Any], files: list[Path]) -> list[str]:
    out = []
    episodes = layout.read_table(files)
    missing = [c for c in EPISODE_COLUMNS if c not in episodes]
    videos = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    for key in videos:
        missing += [
            f"videos/{key}/{c}"
            for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
            if f"videos/{key}/{c}" not in episodes
        ]
    if missing:
        return [f"meta/episodes lacks {', '.join(missing)}"]
    number = len(episodes["episode_index"])
    if episodes["episode_index"] != list(range(number)) or number != info["total_episodes"]:
        out.append("meta/episodes' episode_index is not 0..total_episodes-1")
    rows = layout.read_table(layout.parquet_files(root, "data"), ["episode_index"])
    counts = np.bincount(np.asarray(rows["episode_index"]), minlength=number)
    if episodes["length"] != counts[:number].tolist():
        out.append("meta/episodes' length differs from the episodes' frame rows")
    ends = np.cumsum(episodes["length"]).tolist()
    if episodes["dataset_to_index"] != ends or episodes["dataset_from_index"] != [0, *ends[:-1]]:
        out.append("dataset_from_index / dataset_to_index do not span the episodes' rows")
    tasks = set(layout.read_tasks(root).values())
    if any(not set(t) <= tasks for t in episodes["tasks"]):
        out.append("an episode's tasks are not in tasks.parquet")
    fps = info["fps"]
    for key in videos:
        out += _check_video(root, info, key, episodes, fps)
    return out


def _check_video(
    root: Path, info: dict[str, Any], key: str, episodes: dict[str, list], fps: int
) -> list[str]:
    import imageio_ffmpeg

    out = []
    files: dict[tuple[int, int], list[int]] = {}
    for row in range(len(episodes["episode_index"])):
        file = (
            episodes[f"videos/{key}/chunk_index"][row],
            episodes[f"videos/{key}/file_index"][row],
        )
        files.setdefault(file, []).append(row)
    height, width = info["features"][key]["shape"][:2]
    for (chunk, file), rows in files.items():
        path = root / layout.VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
        if not path.is_file():
            out.append(f"no {path.relative_to(root)}")
            continue
        frames, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
        lengths = [episodes["length"][r] for r in rows]
        if frames != sum(lengths):
            out.append(f"{path.relative_to(root)} has {frames} frames, its episodes {sum(lengths)}")
        reader = imageio_ffmpeg.read_frames(str(path))
        size = next(reader)["size"]
        reader.close()
        if tuple(size) != (width, height):
            out.append(f"{path.relative_to(root)} is {size[0]}x{size[1]}, not {width}x{height}")
        start = 0.0
        for row in sorted(rows, key=lambda r: episodes[f"videos/{key}/from_timestamp"][r]):
            begin = episodes[f"videos/{key}/from_timestamp"][row]
            end = episodes[f"videos/{key}/to_timestamp"][row]
            if abs(begin - start) > 1e-4 or abs(end - begin - episodes["length"][row] / fps) > 1e-4:
                out.append(f"episode {row}: video span {begin}..{end} s does not follow on")
            start = end
    return out


def _check_stats(info: dict[str, Any], stats: dict[str, Any]) -> list[str]:
    out = []
    for name, feature in info["features"].items():
        entry = stats.get(name)
        if entry is None:
            out.append(f"stats.json has no {name}")
            continue
        shape = [3, 1, 1] if feature["dtype"] in ("video", "image") else list(feature["shape"])
        for stat in ("min", "max", "mean", "std"):
            if list(np.shape(entry.get(stat))) != shape:
                out.append(f"stats.json {name}/{stat} is not of shape {shape}")
        if "count" not in entry:
            out.append(f"stats.json {name} has no count")
    return out
