"""What `--data` names: a wmrl episode store, a LeRobotDataset v3 folder, or a LeRobot dataset
on the Hugging Face Hub (OWNER/NAME or hf://datasets/OWNER/NAME, fetched with huggingface_hub
into its cache: meta/ first, then the data and the chosen camera's videos only). A LeRobot
dataset is read through its converted, cached episode store (data/lerobot/reader.py)."""

from __future__ import annotations

import re
from pathlib import Path

from wmrl_cli.config import RunConfig
from wmrl_cli.data.episodes import EpisodeStore, open_stores
from wmrl_cli.data.lerobot import layout
from wmrl_cli.errors import WmrlError
from wmrl_cli.logging import console

HUB_PREFIX = "hf://datasets/"
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def open_episode_data(paths: list[str | Path], cfg: RunConfig) -> EpisodeStore:
    """One store (several pooled) from what `--data` named, converting LeRobot datasets."""
    return open_stores([store_root(p, cfg) for p in paths])


def store_root(source: str | Path, cfg: RunConfig) -> Path:
    """The episode store behind `source`: itself, or a LeRobot dataset's converted store."""
    path, text = Path(source), str(source)
    if (path / "index.json").is_file():
        return path
    if layout.is_dataset(path) or _hub_id(text) or path.is_dir():
        return _converted(lerobot_root(source, cfg), cfg)
    return path  # EpisodeStore.open says it is none


def lerobot_root(source: str | Path, cfg: RunConfig) -> Path:
    """The LeRobot dataset folder `source` names: itself, or a Hub dataset's snapshot."""
    path, text = Path(source), str(source)
    if layout.is_dataset(path):
        return path
    if _hub_id(text):
        return fetch_dataset(text.removeprefix(HUB_PREFIX), cfg)
    raise WmrlError(
        f"{path}: neither an episode store (no index.json) nor a LeRobot dataset (no {layout.INFO})"
    )


def _hub_id(text: str) -> bool:
    return text.startswith(HUB_PREFIX) or (not Path(text).exists() and bool(_REPO_ID.match(text)))


def _converted(root: Path, cfg: RunConfig) -> Path:
    from wmrl_cli.data.lerobot.reader import cached_store

    store = cached_store(root, cfg.lerobot, cfg.simulator.image_size, cfg.simulator.chunk_size)
    console.print(f"LeRobot dataset {root}: {len(store)} episodes, read from {store.root}")
    return store.root


def fetch_dataset(repo_id: str, cfg: RunConfig) -> Path:
    """A LeRobot dataset repository's snapshot: meta/ first (to choose the camera), then the
    data files and that camera's videos. Hub failures are one line."""
    from huggingface_hub import snapshot_download

    from wmrl_cli.assets.hub import HUB_FAILURES, HubSettings, hub_error

    hub = HubSettings.from_environ()
    revision = cfg.lerobot.revision

    def fetch(patterns: list[str]) -> Path:
        try:
            return Path(
                snapshot_download(
                    repo_id,
                    repo_type="dataset",
                    revision=revision,
                    cache_dir=hub.cache_dir,
                    endpoint=hub.endpoint,
                    allow_patterns=patterns,
                )
            )
        except HUB_FAILURES as exc:
            raise hub_error(exc, repo_id, revision, hub.endpoint) from None

    root = fetch(["meta/*", "meta/**"])
    if not layout.is_dataset(root):
        raise WmrlError(f"{repo_id}: not a LeRobot dataset (no {layout.INFO})")
    info = layout.read_info(root)
    cameras = layout.camera_keys(info)
    wanted = cfg.lerobot.camera
    chosen = [c for c in cameras if wanted in (None, c, c.removeprefix("observation.images."))]
    videos = [f"videos/{c}/**" for c in chosen]
    return fetch(["meta/*", "meta/**", "data/**", *videos])
