"""huggingface_hub settings read at call time, and its errors turned into one-line WmrlErrors."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import httpx2
from huggingface_hub import constants
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from wmrl_cli.errors import WmrlError

# Every way a hub call fails at run time (hub errors and LocalEntryNotFoundError are OSErrors).
HUB_FAILURES: tuple[type[BaseException], ...] = (OSError, httpx2.TransportError)
MIRROR_HINT = "set HF_ENDPOINT to a reachable mirror (e.g. HF_ENDPOINT=https://hf-mirror.com)"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class HubSettings:
    """HF_ENDPOINT, HF_HUB_OFFLINE and the cache folder as the environment says *now*.

    huggingface_hub snapshots its environment at import; reading it again here lets a caller
    (or a test) that changes the environment afterwards still be obeyed.
    """

    endpoint: str
    offline: bool
    cache_dir: Path

    @classmethod
    def from_environ(cls) -> HubSettings:
        endpoint = os.environ.get("HF_ENDPOINT") or constants.ENDPOINT
        offline = (
            _truthy(os.environ.get("HF_HUB_OFFLINE"))
            or _truthy(os.environ.get("TRANSFORMERS_OFFLINE"))
            or constants.HF_HUB_OFFLINE
        )
        if os.environ.get("HF_HUB_CACHE"):
            cache = Path(os.environ["HF_HUB_CACHE"])
        elif os.environ.get("HF_HOME"):
            cache = Path(os.environ["HF_HOME"]) / "hub"
        else:
            cache = Path(constants.HF_HUB_CACHE)
        return cls(endpoint.rstrip("/"), offline, cache.expanduser())


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def is_connection_problem(exc: BaseException) -> bool:
    return isinstance(exc, (httpx2.TransportError, OfflineModeIsEnabled)) and not isinstance(
        exc, httpx2.ProxyError
    )


def hub_error(exc: BaseException, repo_id: str, revision: str | None, endpoint: str) -> WmrlError:
    """A one-line explanation of a failed hub call, saying what the user can do."""
    where = f"{endpoint}/{repo_id}"
    if isinstance(exc, GatedRepoError):
        return WmrlError(
            f"{repo_id} is a gated repository: accept its terms at {where} and set HF_TOKEN "
            "to a token of an account that has access"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return WmrlError(
            f"repository {repo_id} not found at {endpoint} (if it is private, set HF_TOKEN "
            "to a token with access)"
        )
    if isinstance(exc, RevisionNotFoundError):
        return WmrlError(f"revision '{revision}' not found in {repo_id} at {endpoint}")
    if isinstance(exc, RemoteEntryNotFoundError):
        return WmrlError(
            f"{endpoint} lists a file of {repo_id} that it does not serve ({first_line(exc)}); "
            f"the mirror may be incomplete: retry, or {MIRROR_HINT}"
        )
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            return WmrlError(
                f"access to {repo_id} denied by {endpoint} (HTTP {status}): set HF_TOKEN to a "
                "token with read access"
            )
        return WmrlError(
            f"{endpoint} failed for {repo_id} (HTTP {status}); retry later, or {MIRROR_HINT}"
        )
    if isinstance(exc, OfflineModeIsEnabled):
        return WmrlError(f"HF_HUB_OFFLINE is set, so {repo_id} cannot be downloaded")
    if is_connection_problem(exc):
        return WmrlError(
            f"cannot reach the Hugging Face Hub at {endpoint} ({first_line(exc)}): check the "
            f"network, or {MIRROR_HINT}"
        )
    if isinstance(exc, LocalEntryNotFoundError):
        return WmrlError(
            f"download of {repo_id} from {endpoint} failed ({first_line(exc)}): check the "
            f"network, or {MIRROR_HINT}"
        )
    return WmrlError(f"download of {repo_id} failed: {first_line(exc)}")
