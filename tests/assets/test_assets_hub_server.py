"""The local hub test server speaks enough of the Hub for huggingface_hub's own client."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder

from tests.helpers.hub_server import HubServer, write_repo

REPO = "org/tiny"
FILES = {"config.json": b'{"a": 1}', "weights.safetensors": b"\x00" * 300, "sub/x.npy": b"np"}


@pytest.fixture
def tiny(hub: HubServer) -> HubServer:
    write_repo(hub.root, REPO, FILES)
    return hub


def test_cache_mode_download_and_listing(tiny: HubServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for rel, data in FILES.items():
        path = hf_hub_download(REPO, rel, cache_dir=cache, endpoint=tiny.url)
        assert Path(path).read_bytes() == data
    assert {r.served for r in tiny.content_requests()} == set(FILES)

    api = HfApi(endpoint=tiny.url)
    info = api.repo_info(REPO)
    assert info.sha == tiny.commit_of(REPO)
    top = {e.path: e for e in api.list_repo_tree(REPO)}
    assert isinstance(top["sub"], RepoFolder)
    assert set(top) == {"config.json", "sub", "weights.safetensors"}
    deep = {e.path: e for e in api.list_repo_tree(REPO, recursive=True) if isinstance(e, RepoFile)}
    assert deep["weights.safetensors"].lfs.size == 300 and deep["config.json"].lfs is None
    only_sub = [e.path for e in api.list_repo_tree(REPO, path_in_repo="sub")]
    assert only_sub == ["sub/x.npy"]


def test_errors_are_typed_as_on_the_hub(tiny: HubServer, tmp_path: Path) -> None:
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "nope.json", cache_dir=tmp_path, endpoint=tiny.url)
    with pytest.raises(RepositoryNotFoundError):
        HfApi(endpoint=tiny.url).repo_info("org/absent")
    with pytest.raises(RevisionNotFoundError):
        HfApi(endpoint=tiny.url).repo_info(REPO, revision="v2")


def test_editing_a_repo_changes_its_commit(tiny: HubServer) -> None:
    before = tiny.commit_of(REPO)
    write_repo(tiny.root, REPO, {"config.json": b'{"a": 2}'})
    assert tiny.commit_of(REPO) != before
