"""`push_model`: a policy, world model or reward model to the Hugging Face Hub, with its card.

The model folder (model_source.py) is staged in a temporary folder of links to its files, with
the generated model card as README.md unless the folder holds a README.md of its own (the
user's wins); nothing in the run changes. Then huggingface_hub: `create_repo(exist_ok=True)`,
`create_branch` for a `--revision` other than main, `upload_folder` (files the repo already
holds unchanged are left out of the commit). The endpoint is `--endpoint`, else HF_ENDPOINT;
the token is the one huggingface_hub finds (HF_TOKEN, or `hf auth login`'s). Every failure is
one WmrlError line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi
from huggingface_hub.errors import (
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import (
    are_progress_bars_disabled,
    disable_progress_bars,
    enable_progress_bars,
)

from wmrl_cli.assets.hub import HUB_FAILURES, HubSettings, first_line, is_connection_problem
from wmrl_cli.assets.model_card import build_card
from wmrl_cli.assets.model_source import PushSource, files_to_push, find_model
from wmrl_cli.assets.registry import check_repo_id
from wmrl_cli.errors import ConfigError, WmrlError

REPO_TYPES = ("model", "dataset")
DEFAULT_LICENSE = "apache-2.0"  # wmrl's own
_TOKEN_HINT = "set HF_TOKEN (or run `hf auth login`) to a token with write access"


@dataclass(frozen=True)
class PushResult:
    source: PushSource
    repo_id: str
    url: str
    revision: str
    commit: str
    changed: bool  # False: the repo already held these files; no commit was made
    files: int
    size: int
    card: str  # "generated", or the user's README.md that was pushed instead


def push_model(
    path: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    repo_type: str = "model",
    endpoint: str | None = None,
    license_id: str = DEFAULT_LICENSE,
    evaluation: Path | None = None,
    message: str | None = None,
    progress: bool = True,
) -> PushResult:
    """Push the model `path` names (a run directory or a model folder) to `repo_id`."""
    check_repo_id(repo_id)
    if repo_type not in REPO_TYPES:
        raise ConfigError(f"--repo-type {repo_type}: one of {', '.join(REPO_TYPES)}")
    if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
        raise ConfigError("--revision names the branch to push to, not a commit")
    branch = revision or "main"
    source = find_model(path)
    files = files_to_push(source.model_dir)
    own_card = "README.md" in files
    card = None if own_card else str(build_card(source, repo_id, license_id, evaluation))
    settings = HubSettings.from_environ()
    endpoint = (endpoint or settings.endpoint).rstrip("/")
    if settings.offline:
        raise WmrlError(f"HF_HUB_OFFLINE is set, so nothing can be pushed to {repo_id}")
    message = message or f"Upload a {source.kind_name} with wmrl push"
    api = HfApi(endpoint=endpoint)
    with _staged(source.model_dir, files, card) as folder, _quiet(progress):
        try:
            url = str(
                api.create_repo(
                    repo_id, private=private or None, repo_type=repo_type, exist_ok=True
                )
            )
            if branch != "main":
                api.create_branch(repo_id, branch=branch, repo_type=repo_type, exist_ok=True)
            info = api.repo_info(repo_id, repo_type=repo_type, revision=branch)
            if private and not info.private:
                raise WmrlError(
                    f"{repo_id} exists and is public, so --private would not make it private: "
                    f"make it private in its settings at {endpoint}/{repo_id}, or push without "
                    "--private"
                )
            commit = api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                repo_type=repo_type,
                revision=branch,
                commit_message=message,
            )
        except (*HUB_FAILURES, ValueError, RuntimeError) as exc:
            raise push_error(exc, repo_id, branch, endpoint) from None
    if branch != "main":
        url += f"/tree/{branch}"
    return PushResult(
        source,
        repo_id,
        url,
        branch,
        commit.oid,
        changed=commit.oid != info.sha,
        files=len(files) + (0 if own_card else 1),
        size=sum((source.model_dir / f).stat().st_size for f in files) + len((card or "").encode()),
        card=str(source.model_dir / "README.md") if own_card else "generated",
    )


@contextlib.contextmanager
def _staged(model_dir: Path, files: list[str], card: str | None) -> Iterator[Path]:
    """A temporary folder of links to `files` (copies where links fail), plus README.md."""
    with tempfile.TemporaryDirectory(prefix="wmrl-push-") as tmp:
        folder = Path(tmp)
        for rel in files:
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.symlink((model_dir / rel).absolute(), target)
            except OSError:
                shutil.copy2(model_dir / rel, target)
        if card is not None:
            (folder / "README.md").write_text(card, encoding="utf-8")
        yield folder


@contextlib.contextmanager
def _quiet(progress: bool) -> Iterator[None]:
    """huggingface_hub's own lines ("No files have been modified ...") left out, and its
    progress bars too without `progress`; both as they were afterwards."""
    logger = logging.getLogger("huggingface_hub")
    level, bars_off = logger.level, are_progress_bars_disabled()
    logger.setLevel(logging.ERROR)
    if not progress:
        disable_progress_bars()
    try:
        yield
    finally:
        logger.setLevel(level)
        if not progress and not bars_off:
            enable_progress_bars()


def push_error(exc: BaseException, repo_id: str, revision: str, endpoint: str) -> WmrlError:
    """A one-line explanation of a failed push, saying what the user can do."""
    if isinstance(exc, RuntimeError) and exc.__cause__ is not None:
        exc = exc.__cause__  # "Error while uploading 'x' to the Hub." around the cause
    response = exc.response if isinstance(exc, HfHubHTTPError) else None
    status = response.status_code if response is not None else None
    if isinstance(exc, RevisionNotFoundError):
        return WmrlError(f"branch '{revision}' of {repo_id} not found at {endpoint}")
    if isinstance(exc, RepositoryNotFoundError) or status in (401, 403):
        return WmrlError(
            f"{endpoint} does not let you write to {repo_id} (HTTP {status}): {_TOKEN_HINT} "
            f"to {repo_id.split('/')[0]}"
        )
    if is_connection_problem(exc):
        return WmrlError(
            f"cannot reach the Hugging Face Hub at {endpoint} ({first_line(exc)}): check the "
            "network, or --endpoint / HF_ENDPOINT"
        )
    if not isinstance(exc, (ValueError, *HUB_FAILURES)):
        raise exc  # not the hub's, nor the user's: a bug, with its traceback
    http = f"HTTP {status}: " if status else ""
    return WmrlError(f"push to {endpoint}/{repo_id} failed ({http}{first_line(exc)})")
