"""`download_asset`: fetch a published asset with huggingface_hub, check it, report it.

Steps: resolve the revision to a commit and list the repo's files (two hub API calls);
check files already present against that listing and delete damaged ones; let
`snapshot_download(local_dir=...)` fetch whatever is missing (it honours HF_ENDPOINT, HF_TOKEN
and the huggingface cache, and resumes a broken transfer with an HTTP Range request); hash
what was fetched; check the asset's expected layout. Nothing missing and nothing damaged means
no file request at all. An interrupted run keeps every file it completed; the next run fetches
the rest. Offline (HF_HUB_OFFLINE, or the hub unreachable) a complete local copy is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from huggingface_hub import HfApi, snapshot_download
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import filter_repo_objects
from rich.progress import Progress

from wmrl_cli.assets.hub import (
    HUB_FAILURES,
    MIRROR_HINT,
    HubSettings,
    first_line,
    hub_error,
    is_connection_problem,
)
from wmrl_cli.assets.integrity import (
    DownloadState,
    RemoteFile,
    bytes_to_hash,
    find_damaged,
    size_mismatches,
)
from wmrl_cli.assets.layout import (
    asset_dir,
    asset_path,
    check_layout,
    download_command,
    matches,
)
from wmrl_cli.assets.progress import make_download_progress, rich_tqdm_class
from wmrl_cli.assets.registry import Asset, AssetFile, download_target
from wmrl_cli.errors import WmrlError

__all__ = ["DownloadResult", "asset_path", "check_layout", "download_asset", "fetch_asset"]


@dataclass(frozen=True)
class DownloadResult:
    name: str
    repo_id: str
    commit: str | None
    path: Path
    files: int
    size: int
    fetched: int
    repaired: list[str] = field(default_factory=list)
    offline: bool = False


def download_asset(
    name: str,
    dir: str | Path | None = None,  # noqa: A002 - the CLI's --dir
    revision: str | None = None,
    include: Sequence[str] | None = None,
    token: str | None = None,
    progress: bool = True,
    recheck: bool = False,
) -> Path:
    """Download asset `name` into `<dir>/<name>` and return that directory."""
    return fetch_asset(name, dir, revision, include, token, progress, recheck).path


def fetch_asset(
    name: str,
    assets_dir: str | Path | None = None,
    revision: str | None = None,
    include: Sequence[str] | None = None,
    token: str | None = None,
    progress: bool = True,
    recheck: bool = False,
) -> DownloadResult:
    """As `download_asset`, with what was found, fetched and repaired.

    include: globs restricting the download (default: the whole repo, or the asset's subset).
    recheck: hash every file again, even those whose last check still holds.
    """
    asset = download_target(name)
    target = asset_dir(asset.name, assets_dir)
    patterns = list(include) if include else (list(asset.subset) if asset.subset else None)
    hub = HubSettings.from_environ()
    command = download_command(asset.name, Path(assets_dir) if assets_dir is not None else None)
    if hub.offline:
        hint = f"unset HF_HUB_OFFLINE and run: {command} (HF_ENDPOINT can point at a mirror)"
        return _local_copy(asset, target, revision, patterns, "HF_HUB_OFFLINE is set", hint)

    api = HfApi(endpoint=hub.endpoint, token=token)
    try:
        commit = api.repo_info(asset.repo_id, revision=revision).sha
        listing = [
            RemoteFile(f.path, f.size, f.blob_id, f.lfs.sha256 if f.lfs else None)
            for f in api.list_repo_tree(asset.repo_id, revision=commit, recursive=True)
            if isinstance(f, RepoFile)
        ]
    except HUB_FAILURES as exc:
        if is_connection_problem(exc):
            reason = f"cannot reach the Hugging Face Hub at {hub.endpoint} ({first_line(exc)})"
            hint = f"check the network, or {MIRROR_HINT}, then run: {command}"
            return _local_copy(asset, target, revision, patterns, reason, hint)
        raise hub_error(exc, asset.repo_id, revision, hub.endpoint) from None
    assert commit is not None, "the hub answered repo info without a commit sha"

    selected = list(filter_repo_objects(listing, allow_patterns=patterns, key=lambda f: f.path))
    if include and not selected:
        raise WmrlError(
            f"--include {' '.join(include)} matches no file of {asset.repo_id} at {commit[:12]}"
        )
    state = DownloadState.load(target)
    if state is None or state.repo_id != asset.repo_id:
        state = DownloadState(asset.name, asset.repo_id, revision or "main", commit)
    state.revision, state.commit = revision or "main", commit
    state.files = {f.path: f for f in listing}

    try:
        with make_download_progress(progress) as bar:
            damaged = _check(target, selected, state, recheck, bar, f"{asset.name}: checking")
            for path in damaged:
                (target / path).unlink()
            to_fetch = [f for f in selected if not (target / f.path).is_file()]
            if to_fetch:
                try:
                    snapshot_download(
                        asset.repo_id,
                        revision=commit,
                        local_dir=target,
                        cache_dir=hub.cache_dir,
                        allow_patterns=patterns,
                        token=token,
                        endpoint=hub.endpoint,
                        tqdm_class=rich_tqdm_class(bar, asset.name),  # type: ignore[arg-type]
                    )
                except HUB_FAILURES as exc:
                    raise hub_error(exc, asset.repo_id, revision, hub.endpoint) from None
            bad = _check(target, to_fetch, state, True, bar, f"{asset.name}: verifying")
    finally:
        if target.is_dir():  # even after a failure: spares re-hashing the files in place
            state.save(target)
    if bad:
        for path in bad:
            (target / path).unlink(missing_ok=True)
        raise WmrlError(
            f"{len(bad)} downloaded file(s) of {asset.repo_id} fail the hub's checksums "
            f"({', '.join(sorted(bad)[:5])}); deleted them: run again, and if it repeats the "
            f"mirror at {hub.endpoint} or the cache at {hub.cache_dir} is corrupt"
        )
    still_missing = [f.path for f in selected if not (target / f.path).is_file()]
    if still_missing:
        raise WmrlError(f"download incomplete, missing: {', '.join(still_missing[:5])}")
    _require_layout(asset, target, _expected_for(asset, selected, bool(include)), commit)
    return DownloadResult(
        asset.name,
        asset.repo_id,
        commit,
        target,
        files=len(selected),
        size=sum(f.size for f in selected),
        fetched=len(to_fetch),
        repaired=sorted(damaged),
    )


def _check(
    target: Path,
    files: list[RemoteFile],
    state: DownloadState,
    recheck: bool,
    bar: Progress,
    label: str,
) -> dict[str, str]:
    total = bytes_to_hash(target, files, state, recheck)
    advance: Callable[[int], None] | None = None
    if total:
        task = bar.add_task(label, total=total, unit="B")
        advance = lambda n: bar.advance(task, n)  # noqa: E731
    return find_damaged(target, files, state, recheck, advance)


def _expected_for(asset: Asset, selected: list[RemoteFile], narrowed: bool) -> list[AssetFile]:
    """With --include only the expected files the selection covers are checked."""
    if not narrowed:
        return list(asset.files)
    return [e for e in asset.files if any(matches(e, f.path) for f in selected)]


def _require_layout(
    asset: Asset, target: Path, expected: list[AssetFile], commit: str | None
) -> None:
    missing = check_layout(asset, target, expected)
    if not missing:
        return
    at = f" at {commit[:12]}" if commit else ""
    note = ""
    if not asset.layout_verified:
        note = f" (wmrl's expected layout is unverified: {asset.layout_note})"
    raise WmrlError(
        f"{asset.repo_id}{at} lacks files wmrl expects for '{asset.name}': "
        f"{', '.join(missing)}{note}"
    )


def _local_copy(
    asset: Asset,
    target: Path,
    revision: str | None,
    patterns: list[str] | None,
    reason: str,
    hint: str,
) -> DownloadResult:
    """Without the hub: accept `target` if it holds a complete, undamaged copy."""
    state = DownloadState.load(target)
    usable = state is not None and revision in (None, state.revision, state.commit)
    selected: list[RemoteFile] = []
    problems: list[str] = []
    if state is not None and usable:
        selected = list(
            filter_repo_objects(state.files.values(), allow_patterns=patterns, key=lambda f: f.path)
        )
        problems = [f.path for f in selected if not (target / f.path).is_file()]
        problems += size_mismatches(target, selected)
    problems += [p for p in check_layout(asset, target) if p not in problems]
    if problems or not target.is_dir():
        shown = ", ".join(problems[:5]) or "nothing downloaded"
        raise WmrlError(
            f"{reason} and {target} holds no complete copy of '{asset.name}' "
            f"(missing or damaged: {shown}); {hint}"
        )
    return DownloadResult(
        asset.name,
        asset.repo_id,
        state.commit if state is not None and usable else None,
        target,
        files=len(selected),
        size=sum(f.size for f in selected),
        fetched=0,
        offline=True,
    )
