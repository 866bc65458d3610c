"""The asset registry, layout checks and `wmrl download --list` (no hub involved)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from wmrl_cli.assets.layout import asset_path, check_layout, default_assets_dir
from wmrl_cli.assets.registry import ROLES, download_target, get_asset, list_assets
from wmrl_cli.cli.app import app
from wmrl_cli.errors import ConfigError, WmrlError

runner = CliRunner()

# docs/assets.md: short name -> hub repo (and unnorm key for policies).
SECTION_1 = {
    "wan-libero-spatial": ("RLinf/RLinf-Wan-LIBERO-Spatial", None),
    "wan-libero-object": ("RLinf/RLinf-Wan-LIBERO-Object", None),
    "wan-libero-goal": ("RLinf/RLinf-Wan-LIBERO-Goal", None),
    "opensora-libero-spatial": ("RLinf/RLinf-OpenSora-LIBERO-Spatial", None),
    "opensora-libero-object": ("RLinf/RLinf-OpenSora-LIBERO-Object", None),
    "openvla-oft-libero-spatial-traj1": (
        "Haozhan72/Openvla-oft-SFT-libero-spatial-traj1",
        "libero_spatial_no_noops",
    ),
    "openvla-oft-libero-object-traj1": (
        "Haozhan72/Openvla-oft-SFT-libero-object-traj1",
        "libero_object_no_noops",
    ),
    "openvla-oft-libero-goal-traj1": (
        "Haozhan72/Openvla-oft-SFT-libero-goal-traj1",
        "libero_goal_no_noops",
    ),
    "openvla-oft-libero10-traj1": (
        "Haozhan72/Openvla-oft-SFT-libero10-traj1",
        "libero_10_no_noops",
    ),
    "openvla-oft-libero90-base-lora": (
        "RLinf/RLinf-OpenVLAOFT-LIBERO-90-Base-Lora",
        "libero_90_no_noops_trajall",
    ),
    "openvla-oft-libero130-base-lora": (
        "RLinf/RLinf-OpenVLAOFT-LIBERO-130-Base-Lora",
        "libero_130_no_noops_trajall",
    ),
    "wmpo-checkpoints": ("fangqi/WMPO", None),
    "wmpo-data": ("fangqi/WMPO", None),
}

WAN_SPATIAL = {
    "model-00001.safetensors": b"dit",
    "Wan2.2_VAE.pth": b"vae",
    "resnet_rm.pth": b"rm",
    "dataset/traj0.npy": b"t0",
    "dataset/traj0_kir.npy": b"k0",
}


def _write(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_registry_covers_reference_section_1() -> None:
    assert {a.name: (a.repo_id, a.unnorm_key) for a in list_assets()} == SECTION_1
    for asset in list_assets():
        assert asset.files and asset.description
        assert set(asset.roles) <= set(ROLES)
        if not asset.layout_verified:
            assert asset.layout_note, asset.name
    wan = get_asset("wan-libero-spatial")
    assert wan.layout_verified
    assert {"world_model", "vae", "reward_model", "reset_set"} == set(wan.roles)
    goal = {f.pattern for f in get_asset("wan-libero-goal").files}
    assert "taskemb_resnet_rm.pth" in goal and "resnet_rm.pth" not in goal
    opensora = {f.role for f in get_asset("opensora-libero-object").files}
    assert {"statistics", "config", "vae"} <= opensora


def test_unknown_asset_lists_known_names() -> None:
    with pytest.raises(ConfigError, match="known assets: wan-libero-spatial, wan-libero-object"):
        get_asset("wan-libero-long")


def test_download_takes_any_hub_repo_id_too() -> None:
    assert download_target("wan-libero-spatial") is get_asset("wan-libero-spatial")
    pushed = download_target("me/tiny-policy")  # what `wmrl push` made: no expected files
    assert pushed.repo_id == pushed.name == "me/tiny-policy" and pushed.files == ()
    for bad in ("me/a/b", "me/..", "me/a--b", "/x"):
        with pytest.raises(ConfigError, match="not a Hub repo id"):
            download_target(bad)


def test_check_layout_names_missing_files(tmp_path: Path) -> None:
    wan = get_asset("wan-libero-spatial")
    assert check_layout(wan, tmp_path / "absent") == [f.pattern for f in wan.files]
    _write(tmp_path, WAN_SPATIAL)
    assert check_layout(wan, tmp_path) == []
    (tmp_path / "Wan2.2_VAE.pth").unlink()
    (tmp_path / "dataset/traj0.npy").unlink()
    # the _kir file alone does not satisfy the plain reset files
    assert check_layout(wan, tmp_path) == ["Wan2.2_VAE.pth", "dataset/traj*.npy"]
    # bookkeeping folders never count as content
    _write(tmp_path, {".cache/huggingface/Wan2.2_VAE.pth": b"x"})
    assert "Wan2.2_VAE.pth" in check_layout(wan, tmp_path)


def test_asset_path_says_what_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(WmrlError) as err:
        asset_path("wan-libero-spatial", tmp_path)
    message = str(err.value)
    assert "\n" not in message and "Wan2.2_VAE.pth" in message
    assert message.endswith(f"run: wmrl download wan-libero-spatial --dir {tmp_path}")

    monkeypatch.setenv("WMRL_ASSETS", str(tmp_path))
    assert default_assets_dir() == tmp_path
    _write(tmp_path / "wan-libero-spatial", WAN_SPATIAL)
    assert asset_path("wan-libero-spatial") == tmp_path / "wan-libero-spatial"
    (tmp_path / "wan-libero-spatial" / "resnet_rm.pth").unlink()
    with pytest.raises(WmrlError, match=r"missing: resnet_rm.pth\); run: wmrl download wan-"):
        asset_path("wan-libero-spatial")


def test_download_list_shows_every_asset() -> None:
    result = runner.invoke(app, ["download", "--list"])
    assert result.exit_code == 0, result.output
    for name, (repo_id, unnorm_key) in SECTION_1.items():
        assert name in result.stdout and repo_id in result.stdout
        if unnorm_key:
            assert f"unnorm key {unnorm_key}" in result.stdout
    assert "reward_model" in result.stdout and "unverified" in result.stdout


def test_download_without_names_or_with_unknown_name_is_a_usage_error() -> None:
    result = runner.invoke(app, ["download"])
    assert result.exit_code == 2 and "wmrl download --list" in result.stderr
    result = runner.invoke(app, ["download", "wan-libero-spatial", "nope"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "unknown asset 'nope'" in result.stderr


def test_download_help_documents_every_option() -> None:
    result = runner.invoke(app, ["download", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in ("--dir", "--revision", "--include", "--list", "--recheck", "--no-progress"):
        assert option in result.stdout
    assert "WMRL_ASSETS" in result.stdout
