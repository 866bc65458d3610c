"""The local hub test server speaks enough of the Hub for huggingface_hub's own client."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    HfHubHTTPError,
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


def test_uploads_as_huggingface_hub_makes_them(hub: HubServer, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    for rel, data in FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    api = HfApi(endpoint=hub.url)
    assert api.create_repo("me/up", private=True).repo_id == "me/up"
    assert api.create_repo("me/up", exist_ok=True).repo_id == "me/up"
    first = api.upload_folder(repo_id="me/up", folder_path=folder)
    assert first.oid == hub.commit_of("me/up") and api.repo_info("me/up").private
    assert {p: e.size for p, e in hub.repo("me/up").entries.items()} == {
        p: len(d) for p, d in FILES.items()
    }
    lfs = {e.sha256 for e in hub.repo("me/up").entries.values() if e.sha256}
    assert {r.path for r in hub.log if r.method == "PUT"} == {f"/upload/{oid}" for oid in lfs}
    assert len(lfs) == 2  # weights.safetensors and sub/x.npy went by LFS
    assert api.upload_folder(repo_id="me/up", folder_path=folder).oid == first.oid  # unchanged

    api.create_branch("me/up", branch="v1", exist_ok=True)
    (folder / "config.json").write_bytes(b'{"a": 2}')
    on_branch = api.upload_folder(repo_id="me/up", folder_path=folder, revision="v1")
    assert api.repo_info("me/up", revision="v1").sha == on_branch.oid != first.oid
    got = hf_hub_download("me/up", "config.json", revision="v1", cache_dir=tmp_path / "c")
    assert Path(got).read_bytes() == b'{"a": 2}'
    assert (hub.root / "me" / "up" / "config.json").read_bytes() == FILES["config.json"]

    hub.writers = {"secret"}
    with pytest.raises(HfHubHTTPError) as denied:
        api.create_repo("me/other")
    assert denied.value.response.status_code == 401
    assert HfApi(endpoint=hub.url, token="secret").create_repo("me/other").repo_id == "me/other"
