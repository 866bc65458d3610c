"""The seeds' LIBERO setup end to end on the published layouts.

Tiny files in the exact published layouts (tests/helpers/published_layouts.py) are served by a local
HF-compatible hub on 127.0.0.1; `wmrl download` fetches them through huggingface_hub's own
client, then `wmrl train-policy --preset wan-spatial-grpo` (and `opensora-spatial-grpo`) runs
one full iteration on them. The overrides shrink only the run length and batch: the preset's
256x256 frames, sampling steps, bf16, optimizer and GRPO settings stay as published. Real
LIBERO evaluation is turned off (algorithm.eval_trials=0): eval_every=0 still evaluates once at
the end, and the LIBERO simulator is not part of this test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tests.helpers.hub_server import HubServer, write_repo
from tests.helpers.published_layouts import (
    LIBERO_INSTRUCTIONS,
    directory_files,
    write_opensora_libero,
    write_openvla_oft_sft,
    write_rlinf_reset_set,
    write_wan_libero,
)
from wmrl_cli.cli.app import app
from wmrl_cli.errors import WmrlError

runner = CliRunner()

POLICY = ("openvla-oft-libero-spatial-traj1", "Haozhan72/Openvla-oft-SFT-libero-spatial-traj1")
WORLDS = {
    "wan-spatial-grpo": ("wan-libero-spatial", "RLinf/RLinf-Wan-LIBERO-Spatial", write_wan_libero),
    "opensora-spatial-grpo": (
        "opensora-libero-spatial",
        "RLinf/RLinf-OpenSora-LIBERO-Spatial",
        write_opensora_libero,
    ),
}
# Run length and batch only; never a size or a code path.
SHRINK = {
    "training.steps": 1,
    "algorithm.num_envs": 4,
    "algorithm.group_size": 2,
    "algorithm.max_episode_steps": 16,
    "algorithm.eval_trials": 0,
    "num_threads": 1,
}
METRICS = (
    "train/actor/policy_loss",
    "train/actor/approx_kl",
    "train/actor/grad_norm",
    "train/actor/lr",
    "train/loss",
    "rollout/rewards",
    "rollout/advantages_mean",
    "env/success_once",
    "env/episode_len",
    "time/world_model",
)


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    """The presets train with bf16 autocast; Accelerate keeps one process-wide state, which a
    later in-process run without mixed precision could not change."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def sets(overrides: dict) -> list[str]:
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]


def train(preset: str, assets: Path, out: Path):
    args = ["train-policy", "--preset", preset, "--assets-dir", str(assets), "--out", str(out)]
    return runner.invoke(app, [*args, *sets(SHRINK)])


def assert_one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# The OpenSora preset in the slow variant (the suite's 15-minute budget); its published layout
# loads in tests/training/test_published_finetune.py and tests/rl/test_rlinf_parity.py too.
@pytest.mark.parametrize(
    "preset",
    [
        pytest.param(name, marks=pytest.mark.slow) if name.startswith("opensora") else name
        for name in WORLDS
    ],
)
def test_download_then_one_grpo_iteration_on_published_layouts(
    preset: str,
    tmp_path: Path,
    hub: HubServer,
) -> None:
    world, world_repo, write_world = WORLDS[preset]
    write_repo(hub.root, world_repo, directory_files(write_world(tmp_path / "src" / "world")))
    write_repo(
        hub.root, POLICY[1], directory_files(write_openvla_oft_sft(tmp_path / "src" / "vla"))
    )
    assets, run = tmp_path / "assets", tmp_path / "run"

    # Before the download: one line naming both assets and the command, nothing written.
    missing = train(preset, assets, run)
    assert_one_line_error(
        missing, f"asset '{world}' is not downloaded", f"asset '{POLICY[0]}' is not downloaded"
    )
    assert f"run: wmrl download {world} {POLICY[0]} --dir {assets}" in missing.stderr
    assert not run.exists()

    fetched = runner.invoke(
        app, ["download", world, POLICY[0], "--dir", str(assets), "--no-progress"]
    )
    assert fetched.exit_code == 0, fetched.output
    assert {r.served for r in hub.content_requests()} >= {"dataset/traj0.npy", "config.json"}

    # --plan reads the downloaded layouts (sizes from their files) and writes nothing
    plan = ["train-policy", "--preset", preset, "--assets-dir", str(assets), "--plan"]
    planned = runner.invoke(app, [*plan, *sets(SHRINK)])
    assert planned.exit_code == 0, planned.output
    assert "memory plan per GPU" in planned.output and "published size" not in planned.output
    assert not run.exists()

    result = train(preset, assets, run)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    logged = {key for row in rows for key in row}
    assert not [m for m in METRICS if m not in logged], sorted(logged)
    assert rows[-1]["step"] == 1 and not any(k.startswith("eval/") for k in logged)
    assert (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir())
    saved = json.loads((run / "policy" / "config.json").read_text())
    assert saved["policy"]["unnorm_key"] == "libero_spatial_no_noops"

    # The published settings ran unchanged; only the run length and batch were shrunk.
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["simulator"]["name"] == "libero" and cfg["simulator"]["image_size"] == 256
    assert cfg["training"]["bf16"] and cfg["training"]["lr"] == 2e-5
    assert cfg["policy"]["temperature"] == 1.6
    assert cfg["world_model"]["path"] == world and cfg["policy"]["name"] == POLICY[0]


def test_incomplete_asset_is_a_one_line_error_and_writes_nothing(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    write_wan_libero(assets / "wan-libero-spatial")
    (assets / "wan-libero-spatial" / "Wan2.2_VAE.pth").unlink()
    write_openvla_oft_sft(assets / POLICY[0])
    result = train("wan-spatial-grpo", assets, tmp_path / "run")
    line = assert_one_line_error(
        result, "asset 'wan-libero-spatial' is incomplete", "missing: Wan2.2_VAE.pth"
    )
    assert line.endswith(f"run: wmrl download wan-libero-spatial --dir {assets}")
    assert not (tmp_path / "run").exists()


def test_world_model_backend_must_match_the_published_layout(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    write_opensora_libero(assets / "opensora-libero-spatial")
    write_openvla_oft_sft(assets / POLICY[0])
    args = ["train-policy", "--preset", "wan-spatial-grpo", "--assets-dir", str(assets)]
    opensora = str(assets / "opensora-libero-spatial")
    world = ["--world-model", opensora, "--reward-model", opensora, "--reset-set", opensora]
    result = runner.invoke(app, [*args, *world, "--out", str(tmp_path / "run"), *sets(SHRINK)])
    assert_one_line_error(result, "world_model.backend is wan", "RLinf's opensora world model")
    assert not (tmp_path / "run").exists()


def test_wan_vae_sizes_come_from_the_weights() -> None:
    from diffusers import AutoencoderKLWan

    from wmrl_cli.world_models.published import infer_wan_vae_config
    from wmrl_cli.world_models.wan import tiny_vae_config, wan22_vae_config

    with torch.device("meta"):
        full = AutoencoderKLWan(**wan22_vae_config())
    assert infer_wan_vae_config(full.state_dict()) == wan22_vae_config()
    tiny = tiny_vae_config(z_dim=16)
    with torch.device("meta"):
        small = AutoencoderKLWan(**tiny)
    assert infer_wan_vae_config(small.state_dict()) == tiny  # identity latent statistics


def test_reset_instructions_give_libero_task_ids(tmp_path: Path) -> None:
    from wmrl_cli.config import resolve_config
    from wmrl_cli.jobs.inputs import load_reset_set

    stove = "Pick up the black bowl on the stove and place it on the plate."  # case, period
    write_rlinf_reset_set(tmp_path, [*LIBERO_INSTRUCTIONS[:2], stove], size=16, kir=False)
    cfg = resolve_config("wan-spatial-grpo")
    entries, names = load_reset_set(cfg, tmp_path)
    assert [e.task_id for e in entries] == [0, 1, 7]  # LIBERO-Spatial's task order
    assert len(names) == 10 and "on_the_stove" in names[7]

    write_rlinf_reset_set(tmp_path, ["open the top drawer"], size=16, kir=False)
    with pytest.raises(WmrlError, match="no libero_spatial task: 'open the top drawer'"):
        load_reset_set(cfg, tmp_path)


def test_unavailable_evaluation_simulator_stops_before_writing(tmp_path: Path, monkeypatch) -> None:
    import wmrl_cli.jobs.inputs as job_inputs

    def unavailable(cfg):
        raise WmrlError("LIBERO is not installed: run `pip install wmrl[libero]`")

    monkeypatch.setattr(job_inputs, "simulator_class", unavailable)
    assets = tmp_path / "assets"
    write_wan_libero(assets / "wan-libero-spatial")
    write_openvla_oft_sft(assets / POLICY[0])
    shrink = {k: v for k, v in SHRINK.items() if k != "algorithm.eval_trials"}
    args = ["train-policy", "--preset", "wan-spatial-grpo", "--assets-dir", str(assets)]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "run"), *sets(shrink)])
    assert_one_line_error(result, "LIBERO is not installed", "set algorithm.eval_trials=0")
    assert not (tmp_path / "run").exists()
