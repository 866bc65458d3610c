"""`wmrl download` through huggingface_hub against a local hub server on 127.0.0.1."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from huggingface_hub import constants
from typer.testing import CliRunner

from tests.helpers.hub_server import HubServer, write_repo
from wmrl_cli.assets.download import asset_path, download_asset, fetch_asset
from wmrl_cli.cli.app import app
from wmrl_cli.errors import WmrlError

runner = CliRunner()
REPO = "RLinf/RLinf-Wan-LIBERO-Spatial"
NAME = "wan-libero-spatial"


def wan_files() -> dict[str, bytes]:
    """The published RLinf-Wan-LIBERO-Spatial layout with tiny random contents."""
    files = {
        "model-00001.safetensors": os.urandom(70_000),
        "Wan2.2_VAE.pth": os.urandom(20_000),
        "resnet_rm.pth": os.urandom(3_000),
        "README.md": b"# RLinf Wan world model\n" + b"lorem ipsum " * 800,
        ".gitattributes": b"*.npy filter=lfs diff=lfs merge=lfs -text\n",
    }
    for i in range(3):
        files[f"dataset/traj{i}.npy"] = os.urandom(500 + i)
        files[f"dataset/traj{i}_kir.npy"] = os.urandom(900 + i)
    return files


@pytest.fixture
def wan_repo(hub: HubServer) -> dict[str, bytes]:
    files = wan_files()
    write_repo(hub.root, REPO, files)
    hub.page_size = 4  # 14 entries: the tree listing needs several pages
    return files


def download(tmp_path: Path, *args: str):
    return runner.invoke(app, ["download", NAME, "--dir", str(tmp_path / "assets"), *args])


def local(tmp_path: Path, rel: str = "") -> Path:
    return tmp_path / "assets" / NAME / rel


def assert_one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_download_then_again_is_a_no_op(tmp_path: Path, hub: HubServer, wan_repo) -> None:
    result = download(tmp_path)
    assert result.exit_code == 0, result.output
    for rel, data in wan_repo.items():
        assert local(tmp_path, rel).read_bytes() == data
    served = {r.served for r in hub.content_requests()}
    assert served == set(wan_repo)
    assert any("cursor" in r.query for r in hub.log), "tree pagination was not exercised"
    assert NAME in result.stdout and hub.commit_of(REPO)[:12] in result.stdout
    assert all(r.path != "/api/agent-harnesses" or r.status == 404 for r in hub.log)

    hub.clear_log()
    again = download(tmp_path)
    assert again.exit_code == 0, again.output
    assert hub.content_requests() == []
    assert not [r for r in hub.log if "/resolve/" in r.path], "no file may even be HEADed"
    assert asset_path(NAME, tmp_path / "assets") == local(tmp_path)


def test_truncated_and_corrupted_files_are_refetched(
    tmp_path: Path,
    hub: HubServer,
    wan_repo,
) -> None:
    target = download_asset(NAME, tmp_path / "assets", progress=False)
    model, readme = target / "model-00001.safetensors", target / "README.md"
    model.write_bytes(wan_repo["model-00001.safetensors"][:1000])  # truncated
    readme.write_bytes(b"X" + wan_repo["README.md"][1:])  # same size, other content
    with pytest.raises(WmrlError, match="damaged files"):
        asset_path(NAME, tmp_path / "assets")

    hub.clear_log()
    result = fetch_asset(NAME, tmp_path / "assets", progress=False)
    assert result.repaired == ["README.md", "model-00001.safetensors"]
    assert {r.served for r in hub.content_requests()} == set(result.repaired)
    assert model.read_bytes() == wan_repo["model-00001.safetensors"]
    assert readme.read_bytes() == wan_repo["README.md"]


def test_recheck_catches_corruption_that_kept_size_and_mtime(
    tmp_path: Path,
    hub: HubServer,
    wan_repo,
) -> None:
    target = download_asset(NAME, tmp_path / "assets", progress=False)
    vae = target / "Wan2.2_VAE.pth"
    stat = vae.stat()
    vae.write_bytes(bytes(len(wan_repo["Wan2.2_VAE.pth"])))
    os.utime(vae, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    hub.clear_log()
    assert fetch_asset(NAME, tmp_path / "assets", progress=False).fetched == 0
    result = download(tmp_path, "--recheck")
    assert result.exit_code == 0, result.output
    assert "1 repaired" in result.stdout
    assert [r.served for r in hub.content_requests()] == ["Wan2.2_VAE.pth"]
    assert vae.read_bytes() == wan_repo["Wan2.2_VAE.pth"]


def test_broken_transfer_resumes_with_a_range_request(
    tmp_path: Path,
    hub: HubServer,
    wan_repo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # huggingface_hub resumes from the last whole chunk it received (10 MiB by default).
    chunk = 4096
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", chunk)
    hub.cut_once("model-00001.safetensors")  # LFS: served by the "CDN" after a redirect
    hub.cut_once("README.md")  # regular file: served by resolve itself
    result = download(tmp_path)
    assert result.exit_code == 0, result.output
    for rel in ("model-00001.safetensors", "README.md"):
        assert local(tmp_path, rel).read_bytes() == wan_repo[rel]
        first, second = [r for r in hub.content_requests() if r.served == rel]
        assert first.cut and first.range is None
        resumed_at = len(wan_repo[rel]) // 2 // chunk * chunk
        assert resumed_at > 0 and second.range == f"bytes={resumed_at}-"
        assert second.status == 206 and not second.cut


def test_interrupted_run_fetches_only_the_rest(tmp_path: Path, hub: HubServer, wan_repo) -> None:
    hub.hidden.add("Wan2.2_VAE.pth")  # its download fails while others are under way
    result = download(tmp_path)
    assert_one_line_error(result, "does not serve", "HF_ENDPOINT")
    kept = {rel for rel in wan_repo if local(tmp_path, rel).is_file()}
    assert kept and "Wan2.2_VAE.pth" not in kept

    hub.hidden.clear()
    hub.clear_log()
    result = download(tmp_path)
    assert result.exit_code == 0, result.output
    assert sorted(r.served for r in hub.content_requests()) == sorted(set(wan_repo) - kept)


def test_missing_repo_is_one_line(tmp_path: Path, hub: HubServer) -> None:
    assert_one_line_error(download(tmp_path), "repository RLinf/RLinf-Wan-LIBERO-Spatial not found")


def test_unknown_revision_is_one_line(tmp_path: Path, hub: HubServer, wan_repo) -> None:
    assert_one_line_error(download(tmp_path, "--revision", "v9"), "revision 'v9' not found")
    commit = hub.commit_of(REPO)
    assert download(tmp_path, "--revision", commit).exit_code == 0


def test_gated_repo_needs_hf_token(
    tmp_path: Path,
    hub: HubServer,
    wan_repo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub.gated.add(REPO)
    hub.tokens.add("hf_test_token")
    assert_one_line_error(download(tmp_path), "gated", "HF_TOKEN")
    assert hub.content_requests() == []
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    result = download(tmp_path)
    assert result.exit_code == 0, result.output
    assert local(tmp_path, "Wan2.2_VAE.pth").read_bytes() == wan_repo["Wan2.2_VAE.pth"]


def test_offline_uses_a_complete_copy_or_says_what_to_do(
    tmp_path: Path,
    hub: HubServer,
    wan_repo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert_one_line_error(download(tmp_path), "HF_HUB_OFFLINE", "HF_ENDPOINT")
    assert hub.log == []

    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert download(tmp_path).exit_code == 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.clear_log()
    result = download(tmp_path)
    assert result.exit_code == 0, result.output
    assert "offline" in result.stdout and hub.log == []
    local(tmp_path, "dataset/traj1.npy").unlink()
    assert_one_line_error(download(tmp_path), "dataset/traj1.npy", "unset HF_HUB_OFFLINE")


def test_unreachable_hub_points_at_hf_endpoint(
    tmp_path: Path,
    hub: HubServer,
    wan_repo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert_one_line_error(download(tmp_path), "cannot reach", "HF_ENDPOINT", "wmrl download")

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert download(tmp_path).exit_code == 0
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    result = download(tmp_path)  # a complete copy is good enough without the hub
    assert result.exit_code == 0 and "offline" in result.stdout, result.output


def test_layout_check_names_the_missing_file(tmp_path: Path, hub: HubServer) -> None:
    files = wan_files()
    del files["Wan2.2_VAE.pth"]
    write_repo(hub.root, REPO, files)
    assert_one_line_error(download(tmp_path), "lacks files", "Wan2.2_VAE.pth")
    # the files that exist were downloaded all the same
    assert local(tmp_path, "model-00001.safetensors").is_file()


def test_unverified_layout_says_so(tmp_path: Path, hub: HubServer) -> None:
    write_repo(hub.root, "Haozhan72/Openvla-oft-SFT-libero-goal-traj1", {"config.json": b"{}"})
    name = "openvla-oft-libero-goal-traj1"
    result = runner.invoke(app, ["download", name, "--dir", str(tmp_path), "--no-progress"])
    assert_one_line_error(result, "model*.safetensors", "tokenizer.*", "unverified")


def test_include_downloads_a_part(tmp_path: Path, hub: HubServer, wan_repo) -> None:
    result = download(tmp_path, "--include", "dataset/*", "-i", "README.md")
    assert result.exit_code == 0, result.output
    served = {r.served for r in hub.content_requests()}
    assert served == {p for p in wan_repo if p.startswith("dataset/")} | {"README.md"}
    with pytest.raises(WmrlError, match="missing: model-00001.safetensors"):
        asset_path(NAME, tmp_path / "assets")
    assert_one_line_error(download(tmp_path, "--include", "*.gguf"), "matches no file")
