"""mp4 writing (imageio + ffmpeg) and tiling several episodes into one grid video."""

from __future__ import annotations

import math
import os
from pathlib import Path

import imageio.v2 as imageio
import numpy as np

from wmrl_cli.files import write_failed


def upscale(frames: np.ndarray, min_side: int = 128) -> np.ndarray:
    """Nearest-neighbour upscale so that small simulator frames stay legible in a player."""
    factor = max(1, math.ceil(min_side / frames.shape[-2]))
    return frames if factor == 1 else frames.repeat(factor, axis=-3).repeat(factor, axis=-2)


MACRO_BLOCK = 16  # what H.264 players expect frame sides to be a multiple of


def pad_to_block(frames: np.ndarray, block: int = MACRO_BLOCK) -> np.ndarray:
    """frames [T,H,W,3] padded with white at the bottom and right to multiples of `block`
    (rather than imageio's resize, which blurs every pixel and warns once per video)."""
    h, w = frames.shape[1:3]
    pad_h, pad_w = -h % block, -w % block
    if not (pad_h or pad_w):
        return frames
    return np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)), constant_values=255)


def write_mp4(path: str | Path, frames: np.ndarray, fps: int = 20) -> Path:
    """frames uint8 [T,H,W,3]; written to a temp file, then renamed."""
    path = Path(path)
    frames = pad_to_block(np.asarray(frames))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    try:
        with imageio.get_writer(tmp, fps=fps, codec="libx264", macro_block_size=16) as writer:
            for frame in frames:
                writer.append_data(np.ascontiguousarray(frame))
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:  # ffmpeg's pipe on a full disk, among others
        raise write_failed(path, exc) from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def label_panes(frames: np.ndarray, labels: list[str], band: int = 14) -> np.ndarray:
    """Frames [T,H,W,3] holding len(labels) panes side by side -> [T,band+H,W,3] with each
    pane's label written in a white band above it (real | imagined, say)."""
    from PIL import Image, ImageDraw

    t, _, w, _ = frames.shape
    header = Image.new("RGB", (w, band), "white")
    draw = ImageDraw.Draw(header)
    pane = w // len(labels)
    for i, label in enumerate(labels):
        left, _, right, bottom = draw.textbbox((0, 0), label)
        draw.text((i * pane + (pane - (right - left)) // 2, (band - bottom) // 2), label,
                  fill="black")  # fmt: skip
    strip = np.repeat(np.asarray(header)[None], t, axis=0)
    return np.concatenate([strip, frames], axis=1)


def tile(videos: list[np.ndarray], columns: int | None = None, pad: int = 2) -> np.ndarray:
    """Videos [T_i,H,W,3] -> one grid video; shorter ones hold their last frame."""
    n = len(videos)
    columns = columns or math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    length = max(v.shape[0] for v in videos)
    h, w = videos[0].shape[1:3]
    grid = np.full((length, rows * (h + pad) + pad, columns * (w + pad) + pad, 3), 255, np.uint8)
    for i, video in enumerate(videos):
        r, c = divmod(i, columns)
        held = np.concatenate([video, np.repeat(video[-1:], length - video.shape[0], axis=0)])
        y, x = pad + r * (h + pad), pad + c * (w + pad)
        grid[:, y : y + h, x : x + w] = held
    return grid
