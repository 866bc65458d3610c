"""Where downloaded assets live and whether a directory holds an asset's expected files.

An asset NAME downloads to `<assets dir>/<NAME>/`; the assets dir is `--dir`, else
`$WMRL_ASSETS`, else `./assets`. Presets resolve asset paths through `asset_path`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

from wmrl_cli.assets.registry import Asset, AssetFile, get_asset
from wmrl_cli.errors import WmrlError

ASSETS_ENV = "WMRL_ASSETS"
# Bookkeeping of huggingface_hub (and wmrl) inside a download directory; never asset content.
PRIVATE_DIRS = (".cache/", ".git/")


def default_assets_dir() -> Path:
    return Path(os.environ.get(ASSETS_ENV) or "assets")


def asset_dir(name: str, assets_dir: str | Path | None = None) -> Path:
    """Where asset `name` is (or would be) downloaded: `assets_dir`, else the default."""
    return Path(assets_dir if assets_dir is not None else default_assets_dir()) / name


def local_files(directory: Path) -> list[str]:
    """Files under `directory` as repo-relative posix paths, bookkeeping folders left out."""
    if not directory.is_dir():
        return []
    files = (p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
    return sorted(f for f in files if not f.startswith(PRIVATE_DIRS))


def matches(expected: AssetFile, path: str) -> bool:
    """huggingface_hub's pattern rules: fnmatch, and a trailing `/` means the whole folder."""
    pattern = expected.pattern + "*" if expected.pattern.endswith("/") else expected.pattern
    if not fnmatchcase(path, pattern):
        return False
    return expected.exclude is None or not fnmatchcase(path, expected.exclude)


def missing_entries(expected: Iterable[AssetFile], paths: Iterable[str]) -> list[AssetFile]:
    present = list(paths)
    return [e for e in expected if e.required and not any(matches(e, p) for p in present)]


def check_layout(
    asset: Asset, path: str | Path, expected: Iterable[AssetFile] | None = None
) -> list[str]:
    """Patterns of the asset's required files (or of `expected`) that match no file in `path`."""
    entries = asset.files if expected is None else tuple(expected)
    return [e.pattern for e in missing_entries(entries, local_files(Path(path)))]


def download_command(name: str, assets_dir: Path | None) -> str:
    """The exact command that fetches `name` into `assets_dir` (None: the default dir)."""
    return f"wmrl download {name}" + (f" --dir {assets_dir}" if assets_dir is not None else "")


def asset_path(name: str, assets_dir: str | Path | None = None) -> Path:
    """The directory of a downloaded asset, after a layout and size check.

    Raises a one-line WmrlError naming what is missing or damaged and the command to run.
    """
    from wmrl_cli.assets.integrity import DownloadState, size_mismatches

    asset = get_asset(name)
    explicit = Path(assets_dir) if assets_dir is not None else None
    target = asset_dir(asset.name, assets_dir)
    command = download_command(asset.name, explicit)
    missing = check_layout(asset, target)
    if missing:
        state = "is not downloaded" if not target.is_dir() else "is incomplete"
        raise WmrlError(
            f"asset '{asset.name}' {state} in {target} (missing: {', '.join(missing)}); "
            f"run: {command}"
        )
    saved = DownloadState.load(target)
    damaged = size_mismatches(target, saved.files.values()) if saved is not None else []
    if damaged:
        raise WmrlError(
            f"asset '{asset.name}' in {target} has damaged files ({', '.join(damaged[:5])}); "
            f"run: {command}"
        )
    return target
