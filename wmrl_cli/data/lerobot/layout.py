"""LeRobotDataset v3.0 on disk: the paths, meta/ files, parquet tables and videos that wmrl reads
and writes, and the schema check of a dataset (docs/formats.md#lerobotdataset-v3).

The layout is the public one of the `lerobot` package, version 0.4.4
(lerobot/datasets/utils.py, lerobot_dataset.py, compute_stats.py); wmrl neither imports nor
copies that package (it pins an older torch), it reads and writes the same files:

    meta/info.json                       codebase_version "v3.0", fps, features, totals, paths
    meta/stats.json                      per feature: min, max, mean, std, count, q01 ... q99
    meta/tasks.parquet                   task_index, the task text as the (pandas) index
    meta/episodes/chunk-000/file-000.parquet   one row per episode: length, tasks, where its
                                         rows and video frames are, stats/<feature>/<stat>
    data/chunk-000/file-000.parquet      one row per frame
    videos/<camera>/chunk-000/file-000.mp4     the episodes' frames one after another
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from wmrl_cli.errors import ConfigError

CODEBASE_VERSION = "v3.0"
INFO = "meta/info.json"
STATS = "meta/stats.json"
TASKS = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE + ".parquet"
# The features every frame has (lerobot's DEFAULT_FEATURES).
INDEX_FEATURES = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}
STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def is_dataset(path: Path) -> bool:
    """Whether `path` is a LeRobot dataset folder (it has meta/info.json)."""
    return (path / INFO).is_file()


def read_info(root: Path) -> dict[str, Any]:
    """meta/info.json of a v3 dataset; one line for another version or a damaged file."""
    try:
        info = json.loads((root / INFO).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{root}: unreadable LeRobot {INFO} ({exc})") from None
    version = str(info.get("codebase_version", "?"))
    if not version.startswith("v3."):
        raise ConfigError(
            f"{root}: LeRobot dataset {version}; wmrl reads v3.0 (convert it with lerobot's "
            "lerobot/datasets/v30/convert_dataset_v21_to_v30.py)"
        )
    for key in ("fps", "features"):
        if key not in info:
            raise ConfigError(f"{root}: {INFO} has no '{key}'")
    return info


def read_stats(root: Path) -> dict[str, Any]:
    """meta/stats.json ({} where the dataset has none)."""
    path = root / STATS
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable ({exc})") from None


def parquet_files(root: Path, folder: str) -> list[Path]:
    """The chunk-*/file-*.parquet files under `folder`, in order."""
    return sorted((root / folder).glob("chunk-*/file-*.parquet"))


def read_table(paths: list[Path], columns: list[str] | None = None) -> dict[str, list[Any]]:
    """The rows of several parquet files as {column: values} (only `columns` where given)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(p, columns=columns) for p in paths]
    if not tables:
        return {}
    table = pa.concat_tables(tables, promote_options="default")
    return table.to_pydict()


def read_tasks(root: Path) -> dict[int, str]:
    """task_index -> task text from meta/tasks.parquet: the text is the pandas index lerobot
    writes (`__index_level_0__`, or a named index), else a `task` column."""
    import pyarrow.parquet as pq

    path = root / TASKS
    if not path.is_file():
        return {}
    table = pq.read_table(path)
    meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}") or b"{}")
    names = [c for c in meta.get("index_columns", []) if isinstance(c, str)] + ["task"]
    text = next((n for n in names if n in table.column_names), None)
    if text is None or "task_index" not in table.column_names:
        raise ConfigError(f"{path}: no task text or task_index column")
    rows = table.to_pydict()
    return {int(i): str(t) for i, t in zip(rows["task_index"], rows[text])}


def camera_keys(info: dict[str, Any]) -> list[str]:
    return [k for k, f in info["features"].items() if f.get("dtype") in ("video", "image")]


def decode_video(path: Path, size: int) -> Iterator[np.ndarray]:
    """Every frame of an mp4, in order, resized to size x size (RGB uint8): ffmpeg (imageio-
    ffmpeg's, which decodes LeRobot's AV1 as well as H.264) with no frame dropped or repeated."""
    import imageio_ffmpeg

    logging.getLogger("imageio_ffmpeg").setLevel(logging.ERROR)  # "size differs": we ask it to
    frames = imageio_ffmpeg.read_frames(
        str(path),
        output_params=["-vf", f"scale={size}:{size}:flags=area", "-fps_mode", "passthrough"],
    )
    next(frames)  # the stream's description
    for raw in frames:
        yield np.frombuffer(raw, dtype=np.uint8).reshape(size, size, 3)


def encode_video(path: Path, frames: Iterator[np.ndarray], size: tuple[int, int], fps: int) -> int:
    """Frames (RGB uint8, height x width) into an H.264 mp4 (yuv420p, a keyframe every 2 frames
    as lerobot's encoder sets); returns the number written."""
    import imageio_ffmpeg

    height, width = size
    if height % 2 or width % 2:
        raise ConfigError(f"H.264 needs even frame sides, the frames are {height}x{width}")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (width, height),
        fps=fps,
        codec="libx264",
        quality=None,
        macro_block_size=1,
        ffmpeg_log_level="error",
        output_params=["-g", "2", "-crf", "18", "-movflags", "+faststart"],
    )
    writer.send(None)
    count = 0
    for frame in frames:
        writer.send(np.ascontiguousarray(frame, dtype=np.uint8))
        count += 1
    writer.close()
    return count


def video_info(height: int, width: int, fps: int) -> dict[str, Any]:
    """The `info` of a video feature, as lerobot's get_video_info reads it from the file."""
    return {
        "video.height": height,
        "video.width": width,
        "video.codec": "h264",
        "video.pix_fmt": "yuv420p",
        "video.is_depth_map": False,
        "video.fps": fps,
        "video.channels": 3,
        "has_audio": False,
    }


def feature_stats(values: np.ndarray) -> dict[str, Any]:
    """compute_stats' entry of one feature over rows [N, ...]: per-dimension min, max, mean,
    std, count and quantiles (numpy's)."""
    x = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
    out: dict[str, Any] = {
        "min": x.min(0).tolist(),
        "max": x.max(0).tolist(),
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
        "count": [len(x)],
    }
    for name, q in QUANTILES.items():
        out[name] = np.quantile(x, q, axis=0).tolist()
    return out


def image_stats(frames: np.ndarray) -> dict[str, Any]:
    """Per-channel statistics of frames [N, H, W, 3] in [0, 1], shaped [3, 1, 1] as lerobot's."""
    pixels = frames.reshape(-1, 3).astype(np.float64) / 255.0
    flat = feature_stats(pixels)
    out: dict[str, Any] = {"count": [len(frames)]}
    for name in STAT_NAMES:
        if name != "count":
            out[name] = [[[v]] for v in flat[name]]
    return out
