"""A minimal Hugging Face Hub on 127.0.0.1, serving model repos from a local folder (tests only).

It answers exactly what huggingface_hub's `snapshot_download` / `hf_hub_download` ask for:

- `GET /api/models/{repo}[/revision/{rev}]`: repo info with the commit `sha`.
- `GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=...`: files with `size`, git `oid` and,
  for LFS files, `lfs: {oid: sha256, size, pointerSize}`; paginated with a `Link: rel="next"`.
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: regular files directly (ETag = git blob sha1); LFS
  files as the Hub does, a 302 to a "CDN" on a second loopback port with `X-Linked-Etag`
  (sha256) and `X-Linked-Size`. Every answer carries `X-Repo-Commit`; content answers support
  `Range` (206 + `Content-Range`).
- Errors as the client tells them apart: `X-Error-Code: RepoNotFound | RevisionNotFound |
  EntryNotFound | GatedRepo` (gated repos answer 401 without a token, 403 with a wrong one).

No Xet headers are ever sent (`X-Xet-Hash`, xet links, `xetHash` in the tree), so the client
never tries Xet storage. A repo is `root/<org>/<name>/`; its commit sha is a hash of its
content, so editing a file yields a new commit. Its other branches live in a scratch folder of
the server's. Every request lands in `server.log`. The write half (create_repo, create_branch,
upload_folder / create_commit) is in tests/helpers/hub_upload.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

from tests.helpers.hub_upload import UploadEndpoints

LFS_PATTERNS = ("*.safetensors", "*.pth", "*.pt", "*.bin", "*.npy", "*.model", "*.ckpt")
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass(frozen=True)
class RepoEntry:
    path: str
    size: int
    blob_id: str  # git blob sha1 (of the LFS pointer for LFS files, as on the Hub)
    sha256: str | None  # LFS files only


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    range: str | None
    authorization: str | None
    status: int = 0
    served: str | None = None  # repo path whose bytes this response carried
    cut: bool = False


@dataclass
class _Repo:
    folder: Path
    commit: str
    entries: dict[str, RepoEntry]
    blobs: dict[str, Path] = field(default_factory=dict)  # sha256 -> file
    branch: str = "main"


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_repo(root: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """Create (or overwrite) files of `repo_id` under the server root."""
    folder = root / repo_id
    for rel, data in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


class HubServer:
    """The hub (and its LFS "CDN") on two ephemeral loopback ports; see the module doc."""

    def __init__(
        self,
        root: Path,
        *,
        gated: Iterable[str] = (),
        tokens: Iterable[str] = (),
        page_size: int = 1000,
        lfs_patterns: Iterable[str] = LFS_PATTERNS,
        lfs_redirect: bool = True,
        writers: Iterable[str] = (),
    ) -> None:
        self.root = Path(root)
        self.gated = set(gated)
        self.tokens = set(tokens)
        self.page_size = page_size
        self.lfs_patterns = tuple(lfs_patterns)
        self.lfs_redirect = lfs_redirect
        # Listed in the tree but answered 404 by resolve: an inconsistent mirror, or a file
        # whose download fails (tests use it to interrupt a run after the other files).
        self.hidden: set[str] = set()
        # Uploads: tokens allowed to write (none: anyone may), private repos, and a scratch
        # folder for LFS objects uploaded before their commit and for branches besides main.
        self.writers = set(writers)
        self.private: set[str] = set()
        self.scratch = Path(tempfile.mkdtemp(prefix="wmrl-hub-"))
        self.log: list[LoggedRequest] = []
        self._lock = threading.Lock()
        self._cuts: dict[str, tuple[int, int | None]] = {}
        self._hub = _Server(self, cdn=False)
        self._cdn = _Server(self, cdn=True)
        self._threads: list[threading.Thread] = []

    # --- control ---------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def start(self) -> HubServer:
        for server in (self._hub, self._cdn):
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cut_once(self, path_in_repo: str, after: int | None = None, times: int = 1) -> None:
        """The next `times` content responses for this file stop after `after` bytes (default:
        half the body) and drop the connection."""
        with self._lock:
            self._cuts[path_in_repo] = (times, after)

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    def content_requests(self) -> list[LoggedRequest]:
        """Requests whose response carried file bytes (GETs of resolve or CDN blobs)."""
        with self._lock:
            return [r for r in self.log if r.served is not None]

    def commit_of(self, repo_id: str) -> str:
        repo = self.repo(repo_id)
        assert repo is not None, repo_id
        return repo.commit

    # --- repo model ------------------------------------------------------------------
    def folder_of(self, repo_id: str, branch: str = "main") -> Path:
        if branch == "main":
            return self.root / repo_id
        return self.scratch / "branches" / repo_id / quote(branch, safe="")

    def repo(self, repo_id: str, branch: str = "main") -> _Repo | None:
        folder = self.folder_of(repo_id, branch)
        if repo_id.count("/") != 1 or not folder.is_dir():
            return None
        entries: dict[str, RepoEntry] = {}
        blobs: dict[str, Path] = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            rel = path.relative_to(folder).as_posix()
            data = path.read_bytes()
            if any(fnmatchcase(rel, pattern) for pattern in self.lfs_patterns):
                sha256 = hashlib.sha256(data).hexdigest()
                pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\n"
                pointer += f"size {len(data)}\n"
                entries[rel] = RepoEntry(rel, len(data), _git_blob_sha1(pointer.encode()), sha256)
                blobs[sha256] = path
            else:
                entries[rel] = RepoEntry(rel, len(data), _git_blob_sha1(data), None)
        digest = hashlib.sha1((repo_id if branch == "main" else f"{repo_id}@{branch}").encode())
        for entry in entries.values():
            digest.update(f"{entry.path}\0{entry.blob_id}\0".encode())
        return _Repo(folder, digest.hexdigest(), entries, blobs, branch)

    def lookup(self, repo_id: str, revision: str) -> _Repo | None:
        """The repo at a branch name or a commit sha (main's, or a branch's)."""
        main = self.repo(repo_id)
        if main is None or revision in ("main", main.commit):
            return main
        branches = self.scratch / "branches" / repo_id
        names = [unquote(p.name) for p in branches.iterdir()] if branches.is_dir() else []
        for name in names:
            repo = self.repo(repo_id, name)
            if repo is not None and revision in (name, repo.commit):
                return repo
        return None

    def is_lfs(self, entry: RepoEntry) -> bool:
        return entry.sha256 is not None

    def _take_cut(self, path_in_repo: str, length: int) -> int | None:
        """Where to cut this response, if a cut is pending for the file."""
        with self._lock:
            left, after = self._cuts.get(path_in_repo, (0, None))
            if left <= 0 or length < 2:
                return None
            self._cuts[path_in_repo] = (left - 1, after)
            return min(after, length - 1) if after is not None else length // 2

    def _record(self, entry: LoggedRequest) -> None:
        with self._lock:
            self.log.append(entry)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, hub: HubServer, cdn: bool) -> None:
        self.hub = hub
        self.cdn = cdn
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(UploadEndpoints, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 5  # idle keep-alive connections end, so the server always stops promptly
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        pass

    # --- dispatch --------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._dispatch()

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch()

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch()

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        self.entry = LoggedRequest(
            method=self.command,
            path=unquote(split.path),
            query=parse_qs(split.query),
            range=self.headers.get("Range"),
            authorization=self.headers.get("Authorization"),
        )
        try:
            parts = [unquote(p) for p in split.path.strip("/").split("/")]
            if self.command in ("POST", "PUT"):
                self._write(parts)
            elif self.server.cdn:
                self._cdn(split.path)
            else:
                self._hub(split.path, self.entry.query)
        finally:
            self.server.hub._record(self.entry)

    def _hub(self, raw_path: str, query: dict[str, list[str]]) -> None:
        parts = [unquote(p) for p in raw_path.strip("/").split("/")]
        # a dataset repo's endpoints are a model repo's under /api/datasets/ and /datasets/
        if parts[:2] == ["api", "datasets"]:
            parts[1] = "models"
        elif parts[:1] == ["datasets"] and len(parts) >= 6:
            parts = parts[1:]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo_id = "/".join(parts[2:4])
            rest = parts[4:]
            if not rest or (rest[0] == "revision" and len(rest) == 2):
                return self._repo_info(repo_id, rest[1] if rest else "main", query)
            if rest[0] == "tree" and len(rest) >= 2:
                return self._tree(repo_id, rest[1], "/".join(rest[2:]), query)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        self._error(404, None, "Not found")

    # --- endpoints -------------------------------------------------------------------
    def _lookup(self, repo_id: str, revision: str) -> _Repo | None:
        main = self.server.hub.repo(repo_id)
        if main is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        repo = self.server.hub.lookup(repo_id, revision)
        if repo is None:
            self._error(404, "RevisionNotFound", "Invalid rev id: " + revision, main.commit)
        return repo

    def _repo_info(self, repo_id: str, revision: str, query: dict[str, list[str]]) -> None:
        repo = self._lookup(repo_id, revision)
        if repo is None:
            return
        with_blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for entry in repo.entries.values():
            sibling: dict[str, Any] = {"rfilename": entry.path}
            if with_blobs:
                sibling.update(size=entry.size, blobId=entry.blob_id)
                if entry.sha256:
                    sibling["lfs"] = {"sha256": entry.sha256, "size": entry.size}
            siblings.append(sibling)
        self._json(
            {
                "_id": repo.commit[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": repo.commit,
                "private": repo_id in self.server.hub.private,
                "gated": "manual" if repo_id in self.server.hub.gated else False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "lastModified": "2025-01-01T00:00:00.000Z",
                "createdAt": "2025-01-01T00:00:00.000Z",
                "siblings": siblings,
            }
        )

    def _tree(self, repo_id: str, revision: str, prefix: str, query: dict[str, list[str]]) -> None:
        repo = self._lookup(repo_id, revision)
        if repo is None:
            return
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        listing = _tree_listing(repo, prefix, recursive)
        if prefix and not listing:
            return self._error(404, "EntryNotFound", f"{prefix} does not exist", repo.commit)
        start = int(query.get("cursor", ["0"])[0])
        end = start + self.server.hub.page_size
        page = listing[start:end]
        headers = {}
        if end < len(listing):
            path = f"/api/models/{repo_id}/tree/{quote(revision, safe='')}"
            if prefix:
                path += "/" + quote(prefix, safe="")
            params = (
                f"recursive={str(recursive).lower()}&cursor={start + self.server.hub.page_size}"
            )
            headers["Link"] = f'<{self.server.hub.url}{path}?{params}>; rel="next"'
        self._json(page, headers)

    def _resolve(self, repo_id: str, revision: str, path_in_repo: str) -> None:
        hub = self.server.hub
        repo = self._lookup(repo_id, revision)
        if repo is None:
            return
        if repo_id in hub.gated:
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ").strip()
            if token not in hub.tokens:
                status = 403 if token else 401
                message = f"Access to model {repo_id} is restricted: you are not authorized."
                return self._error(status, "GatedRepo", message, repo.commit)
        entry = repo.entries.get(path_in_repo)
        if entry is None or path_in_repo in hub.hidden:
            return self._error(404, "EntryNotFound", "Entry not found", repo.commit)
        common = {"X-Repo-Commit": repo.commit}
        if entry.sha256 is not None and hub.lfs_redirect:
            location = f"{hub.cdn_url}/blobs/{entry.sha256}?repo={quote(repo_id, safe='')}"
            location += f"&branch={quote(repo.branch, safe='')}"
            headers = {
                **common,
                "Location": location,
                "X-Linked-Etag": f'"{entry.sha256}"',
                "X-Linked-Size": str(entry.size),
                "ETag": f'"{entry.blob_id}"',
            }
            return self._empty(302, headers)
        etag = entry.sha256 or entry.blob_id
        self._content(repo.folder / entry.path, entry.path, {**common, "ETag": f'"{etag}"'})

    def _cdn(self, raw_path: str) -> None:
        match = re.fullmatch(r"/blobs/([0-9a-f]{64})", raw_path)
        repo_id = unquote(self.entry.query.get("repo", [""])[0])
        branch = unquote(self.entry.query.get("branch", ["main"])[0])
        repo = self.server.hub.repo(repo_id, branch) if match else None
        if repo is None or match is None or match.group(1) not in repo.blobs:
            return self._error(404, None, "No such blob")
        blob = repo.blobs[match.group(1)]
        rel = blob.relative_to(repo.folder).as_posix()
        self._content(blob, rel, {"ETag": f'"{match.group(1)}"'})

    # --- responses -------------------------------------------------------------------
    def _content(self, file: Path, rel: str, headers: dict[str, str]) -> None:
        data = file.read_bytes()
        start, end, status = 0, len(data), 200
        range_header = self.headers.get("Range")
        if range_header:
            match = _RANGE_RE.match(range_header.strip())
            if match is None or int(match.group(1)) >= max(len(data), 1):
                self.entry.status = 416
                return self._empty(416, {"Content-Range": f"bytes */{len(data)}"})
            start = int(match.group(1))
            end = min(int(match.group(2)) + 1, len(data)) if match.group(2) else len(data)
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{end - 1}/{len(data)}"}
        body = data[start:end]
        self.entry.status = status
        self.send_response(status)
        for key, value in {
            **headers,
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "Content-Length": str(len(body)),
        }.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command == "HEAD":
            return
        self.entry.served = rel
        cut = self.server.hub._take_cut(rel, len(body))
        if cut is not None:
            # Part of the promised bytes, then a dropped connection: a broken stream.
            self.entry.cut = True
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def _json(self, payload: Any, headers: dict[str, str] | None = None, status: int = 200) -> None:
        body = json.dumps(payload).encode()
        self.entry.status = status
        self.send_response(status)
        for key, value in {**(headers or {}), "Content-Type": "application/json"}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _empty(self, status: int, headers: dict[str, str]) -> None:
        self.entry.status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _error(
        self, status: int, code: str | None, message: str, commit: str | None = None
    ) -> None:
        body = json.dumps({"error": message}).encode()
        self.entry.status = status
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def _tree_listing(repo: _Repo, prefix: str, recursive: bool) -> list[dict[str, Any]]:
    """Folders and files under `prefix` (direct children unless recursive), folders first."""
    base = prefix.strip("/") + "/" if prefix.strip("/") else ""
    folders: set[str] = set()
    files: list[RepoEntry] = []
    for entry in repo.entries.values():
        if not entry.path.startswith(base):
            continue
        rest = entry.path[len(base) :].split("/")
        for depth in range(1, len(rest) if recursive else min(2, len(rest))):
            folders.add(base + "/".join(rest[:depth]))
        if recursive or len(rest) == 1:
            files.append(entry)
    listing: list[dict[str, Any]] = [
        {"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0, "path": f}
        for f in sorted(folders)
    ]
    for entry in files:
        item: dict[str, Any] = {
            "type": "file",
            "oid": entry.blob_id,
            "size": entry.size,
            "path": entry.path,
        }
        if entry.sha256 is not None:
            item["lfs"] = {"oid": entry.sha256, "size": entry.size, "pointerSize": 134}
        listing.append(item)
    return listing


# --- pytest helpers (the `hub` fixture of tests/conftest.py) ------------------------------
@contextmanager
def serve_hub(root: Path, **options: Any) -> Iterator[HubServer]:
    with HubServer(root, **options) as server:
        yield server


def point_client_at(monkeypatch: pytest.MonkeyPatch, server: HubServer, hf_home: Path) -> None:
    """Send huggingface_hub to `server` only, with a throwaway HF_HOME and no token.

    huggingface_hub reads its environment once, at import: the module constants are patched
    too, as if the process had started with this environment, so that nothing (not even its
    agent-registry probe, nor a URL built from the import-time template) leaves loopback.
    """
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", server.url)
    # hf_hub_url builds from this template, then swaps the ENDPOINT prefix for `endpoint=`.
    template = server.url + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(hf_home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens"))
