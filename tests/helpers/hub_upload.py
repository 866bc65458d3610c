"""The write half of the loopback hub of tests/helpers/hub_server.py (tests only).

What huggingface_hub's `create_repo`, `create_branch` and `upload_folder` / `create_commit`
send with Xet off (`HF_HUB_DISABLE_XET=1`, as `point_client_at` sets it), so uploads take the
regular and LFS paths:

- `POST /api/repos/create` (`{name, organization, type, visibility}`): 200 with the repo's
  `url`; 409 (with the `url` too) when it exists. A private repo's info says `private: true`.
- `POST /api/models/{repo}/branch/{branch}`: a branch from main; 409 when it exists.
- `POST /api/validate-yaml` (`{content}`): 400 with `errors` when the README's metadata block is
  not a YAML mapping.
- `POST /api/models/{repo}/preupload/{rev}` (`{files: [{path, sample, size}]}`): each file's
  `uploadMode` (`lfs` for the server's LFS patterns, else `regular`), `shouldIgnore` and, for a
  file already there, its `oid` (the client then leaves an unchanged file out of the commit).
- `POST /{repo}.git/info/lfs/objects/batch`: an `upload` action (a PUT to the "CDN" port) for
  each object the server does not hold yet; none for one it holds.
- `PUT {cdn}/upload/{sha256}`: the object's bytes (plain or chunked), checked against its name.
- `POST /api/models/{repo}/commit/{rev}` (ndjson: `header`, `file` (base64), `lfsFile`,
  `deletedFile`, `deletedFolder`): applied to the branch's folder; 412 on a stale
  `parentCommit`; answers `commitOid` and `commitUrl`.

With `writers` given to the server, every write but the CDN's PUT needs one of those tokens
(401 without a token, 403 with another), as the Hub wants a token with write access.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml


class UploadEndpoints:
    """Mixed into the server's request handler, whose `_json`, `_error` and `_empty` it uses."""

    server: Any
    headers: Any
    rfile: Any
    command: str
    entry: Any
    _json: Any
    _error: Any
    _empty: Any

    def _write(self, parts: list[str]) -> None:
        hub = self.server.hub
        body = self._body()  # read whatever the answer: the connection is kept alive
        if self.server.cdn:
            if self.command == "PUT" and len(parts) == 2 and parts[0] == "upload":
                return self._put_object(parts[1], body)
            return self._error(404, None, "Not found")
        if not self._may_write():
            return None
        if parts == ["api", "repos", "create"]:
            return self._create_repo(json.loads(body))
        if parts == ["api", "validate-yaml"]:
            return self._validate_yaml(json.loads(body).get("content", ""))
        if parts[-4:] == ["info", "lfs", "objects", "batch"] and len(parts) == 6:
            return self._lfs_batch(json.loads(body))
        if parts[:2] == ["api", "models"] and len(parts) >= 6:
            repo_id, action, revision = "/".join(parts[2:4]), parts[4], "/".join(parts[5:])
            if hub.repo(repo_id) is None:
                return self._error(404, "RepoNotFound", "Repository not found")
            if action == "branch":
                return self._create_branch(repo_id, revision)
            repo = hub.lookup(repo_id, revision)
            if repo is None:
                return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision)
            if action == "preupload":
                return self._preupload(repo, json.loads(body))
            if action == "commit":
                return self._commit(repo_id, repo, body)
        return self._error(404, None, "Not found")

    # --- requests ----------------------------------------------------------------------
    def _may_write(self) -> bool:
        writers = self.server.hub.writers
        token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not writers or token in writers:
            return True
        status = 403 if token else 401
        self._error(status, None, "You are not authorized to write to this namespace")
        return False

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline().strip():  # trailers, then the blank line
                    pass
                return data
            data += self.rfile.read(size)
            self.rfile.readline()

    def _objects(self) -> Path:
        folder = self.server.hub.scratch / "lfs"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # --- endpoints ---------------------------------------------------------------------
    def _create_repo(self, payload: dict[str, Any]) -> None:
        hub = self.server.hub
        if payload.get("type") not in (None, "model"):
            return self._error(400, None, "this test hub holds model repos only")
        if not payload.get("organization"):
            return self._error(400, None, "a repo id needs its namespace: OWNER/NAME")
        repo_id = f"{payload['organization']}/{payload['name']}"
        url = f"{hub.url}/{repo_id}"
        if hub.repo(repo_id) is not None:
            message = "You already created this model repo"
            return self._json({"error": message, "url": url}, status=409)
        hub.folder_of(repo_id).mkdir(parents=True)
        if payload.get("visibility") == "private":
            hub.private.add(repo_id)
        self._json({"url": url, "name": repo_id, "id": repo_id})

    def _create_branch(self, repo_id: str, branch: str) -> None:
        hub = self.server.hub
        if branch == "main" or hub.repo(repo_id, branch) is not None:
            return self._error(409, None, f"Reference refs/heads/{branch} already exists")
        shutil.copytree(hub.folder_of(repo_id), hub.folder_of(repo_id, branch))
        self._json({})

    def _validate_yaml(self, content: str) -> None:
        metadata: Any = {}
        if content.startswith("---"):
            block, _, _ = content[3:].partition("\n---")
            try:
                metadata = yaml.safe_load(block)
            except yaml.YAMLError as exc:
                metadata = f"not YAML ({exc})"
        if metadata is not None and not isinstance(metadata, dict):
            errors = [{"message": f"the metadata block is not a mapping: {metadata}"}]
            return self._json({"errors": errors, "warnings": []}, status=400)
        self._json({"errors": [], "warnings": []})

    def _preupload(self, repo: Any, payload: dict[str, Any]) -> None:
        patterns = self.server.hub.lfs_patterns
        files = []
        for item in payload["files"]:
            path = item["path"]
            lfs = any(fnmatchcase(path, pattern) for pattern in patterns)
            entry = repo.entries.get(path)
            oid = None if entry is None else (entry.sha256 or entry.blob_id)
            mode = "lfs" if lfs else "regular"
            files.append({"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        self._json({"files": files, "commitOid": repo.commit})

    def _lfs_batch(self, payload: dict[str, Any]) -> None:
        hub = self.server.hub
        answer = []
        for item in payload["objects"]:
            oid, size = str(item["oid"]), int(item["size"])
            obj: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if not (self._objects() / oid).is_file():
                obj["actions"] = {"upload": {"href": f"{hub.cdn_url}/upload/{oid}"}}
            answer.append(obj)
        self._json({"transfer": "basic", "objects": answer, "hash_algo": "sha256"})

    def _put_object(self, oid: str, data: bytes) -> None:
        if hashlib.sha256(data).hexdigest() != oid:
            return self._error(400, None, f"the uploaded bytes do not hash to {oid}")
        (self._objects() / oid).write_bytes(data)
        self._empty(200, {})

    def _commit(self, repo_id: str, repo: Any, body: bytes) -> None:
        hub = self.server.hub
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next((line["value"] for line in lines if line["key"] == "header"), {})
        parent = header.get("parentCommit")
        if parent is not None and parent != repo.commit:
            return self._error(412, None, f"parent commit {parent} is not the head")
        for line in lines:
            value = line["value"]
            if line["key"] in ("lfsFile",) and not (self._objects() / value["oid"]).is_file():
                return self._error(400, None, f"LFS object {value['oid']} was never uploaded")
        folder = repo.folder
        for line in lines:
            key, value = line["key"], line["value"]
            target = folder / value.get("path", "")
            if key == "file":
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(base64.b64decode(value["content"]))
            elif key == "lfsFile":
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self._objects() / value["oid"], target)
            elif key == "deletedFile":
                target.unlink(missing_ok=True)
            elif key == "deletedFolder":
                shutil.rmtree(target, ignore_errors=True)
        commit = hub.repo(repo_id, repo.branch).commit
        url = f"{hub.url}/{repo_id}/commit/{commit}"
        branch = quote(repo.branch, safe="")
        self._json({"success": True, "commitOid": commit, "commitUrl": url, "branch": branch})
