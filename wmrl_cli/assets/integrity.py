"""Integrity of downloaded files against the hub's tree listing.

huggingface_hub trusts a file in a `local_dir` once its download metadata matches the commit,
so a file truncated or overwritten afterwards would be kept. wmrl checks every selected file
itself: size always; content against the hub's hash (LFS sha256, else the git blob sha1) unless
an earlier check already covered the file and its size and mtime have not changed since.
The listing and those earlier checks live in `<asset dir>/.cache/wmrl/download.json`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from wmrl_cli.files import atomic_write_text

STATE_FILE = Path(".cache") / "wmrl" / "download.json"
STATE_FORMAT = 1
_CHUNK = 8 << 20


@dataclass(frozen=True)
class RemoteFile:
    """One file of the hub's tree listing at a commit."""

    path: str
    size: int
    blob_id: str
    sha256: str | None = None

    @property
    def expected_digest(self) -> str:
        # LFS files: the blob id hashes the pointer, the content hash is the LFS sha256.
        return f"sha256:{self.sha256}" if self.sha256 else f"git-sha1:{self.blob_id}"


def file_digest(path: Path, algorithm: str, advance: Callable[[int], None] | None = None) -> str:
    """`sha256:<hex>` or `git-sha1:<hex>` (sha1 of "blob <size>\\0" + content, as git does)."""
    if algorithm == "sha256":
        digest = hashlib.sha256()
    elif algorithm == "git-sha1":
        digest = hashlib.sha1()
        digest.update(b"blob %d\0" % path.stat().st_size)
    else:
        raise ValueError(f"unknown digest algorithm {algorithm}")
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            if advance is not None:
                advance(len(chunk))
    return f"{algorithm}:{digest.hexdigest()}"


@dataclass
class DownloadState:
    """What wmrl knows about an asset directory: its commit, listing and checked files."""

    name: str
    repo_id: str
    revision: str
    commit: str
    files: dict[str, RemoteFile] = field(default_factory=dict)
    # path -> [size, mtime_ns, digest] of the last successful content check
    checked: dict[str, list[Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, directory: Path) -> DownloadState | None:
        try:
            data = json.loads((directory / STATE_FILE).read_text())
            if data.get("format") != STATE_FORMAT:
                return None
            files = {p: RemoteFile(**f) for p, f in data["files"].items()}
            return cls(
                data["name"], data["repo_id"], data["revision"], data["commit"], files,
                dict(data.get("checked", {})),
            )  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return None  # unreadable bookkeeping only costs a re-check

    def save(self, directory: Path) -> None:
        payload = {
            "format": STATE_FORMAT,
            "name": self.name,
            "repo_id": self.repo_id,
            "revision": self.revision,
            "commit": self.commit,
            "files": {p: asdict(f) for p, f in sorted(self.files.items())},
            "checked": dict(sorted(self.checked.items())),
        }
        atomic_write_text(directory / STATE_FILE, json.dumps(payload, indent=1) + "\n")

    def is_checked(self, path: Path, remote: RemoteFile) -> bool:
        st = path.stat()
        return self.checked.get(remote.path) == [st.st_size, st.st_mtime_ns, remote.expected_digest]

    def mark_checked(self, path: Path, remote: RemoteFile) -> None:
        st = path.stat()
        self.checked[remote.path] = [st.st_size, st.st_mtime_ns, remote.expected_digest]


def size_mismatches(directory: Path, remote: Iterable[RemoteFile]) -> list[str]:
    """Present files whose size differs from the listing (cheap: no hashing)."""
    bad = []
    for f in remote:
        local = directory / f.path
        if local.is_file() and local.stat().st_size != f.size:
            bad.append(f.path)
    return bad


def bytes_to_hash(
    directory: Path, remote: Iterable[RemoteFile], state: DownloadState, recheck: bool
) -> int:
    total = 0
    for f in remote:
        local = directory / f.path
        if local.is_file() and local.stat().st_size == f.size:
            total += f.size if recheck or not state.is_checked(local, f) else 0
    return total


def find_damaged(
    directory: Path,
    remote: Iterable[RemoteFile],
    state: DownloadState,
    recheck: bool = False,
    advance: Callable[[int], None] | None = None,
) -> dict[str, str]:
    """Present files that do not match the listing -> reason; good ones are marked checked.

    recheck: hash even files whose earlier check still holds (size and mtime unchanged).
    """
    damaged: dict[str, str] = {}
    for f in remote:
        local = directory / f.path
        if not local.is_file():
            continue
        size = local.stat().st_size
        if size != f.size:
            damaged[f.path] = f"size {size}, expected {f.size}"
            state.checked.pop(f.path, None)
            continue
        if not recheck and state.is_checked(local, f):
            continue
        actual = file_digest(local, f.expected_digest.split(":")[0], advance)
        if actual != f.expected_digest:
            damaged[f.path] = "content hash differs"
            state.checked.pop(f.path, None)
        else:
            state.mark_checked(local, f)
    return damaged
