"""`train-wm --init` and `train-reward --init` from the published layouts, and the export back.

Tiny files in the exact published layouts (tests/helpers/published_layouts.py) are fine-tuned on a
tiny LIBERO-like episode store (7-dimensional actions, suite libero_spatial) for a few steps, saved
in wmrl's format and exported with `--export-rlinf`. The exported files must have the source's file
names, shards and key names, and load again the way `train-policy` loads them
(world_models/loading.py: load_any_world_model; rewards/loading.py: reward_model_source;
jobs/inputs.py: reward_task_ids) to the very model that was fine-tuned: the same sampled frames for
the same inputs and noise seed, the same scores.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from typer.testing import CliRunner

from tests.helpers.published_layouts import (
    write_opensora_libero,
    write_resnet_rm,
    write_taskemb_resnet_rm,
    write_wan_libero,
)
from wmrl_cli.cli.app import app
from wmrl_cli.config import resolve_config
from wmrl_cli.data.episodes import Episode, EpisodeStore
from wmrl_cli.jobs.inputs import reward_task_ids
from wmrl_cli.rewards.loading import load_reward_model, reward_model_source, save_reward_model
from wmrl_cli.world_models.factory import load_world_model
from wmrl_cli.world_models.loading import load_any_world_model

runner = CliRunner()
SIZE = 64
WORLDS = {"wan": (write_wan_libero, "wan-spatial-grpo"), "opensora": (write_opensora_libero,
          "opensora-spatial-grpo")}  # fmt: skip
WM_SETS = {
    "world_model.batch_size": 2,
    "world_model.val_episodes": 1,
    "world_model.val_horizon": 8,
    "world_model.window_stride": 8,
    "world_model.num_inference_steps": 1,
    "num_threads": 1,
}


def sets(overrides: dict) -> list[str]:
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]


def libero_episode(i: int, action_dim: int = 7, length: int = 24) -> Episode:
    """Noise frames; episodes with i % 3 != 0 succeed from step 16 on, shown by a bright square
    (a success the reward model can learn)."""
    rng = np.random.default_rng(i)
    frames = rng.integers(0, 60, (length + 1, SIZE, SIZE, 3), dtype=np.uint8)
    success = np.zeros(length, dtype=bool)
    if i % 3:
        success[16:] = True
        frames[17:, 16:48, 16:48] = 230
    return Episode(
        task_id=i % 3,
        task_name=f"task{i % 3}",
        instruction="x",
        seed=i,
        init_id=i,
        frames=frames,
        actions=rng.uniform(-1, 1, (length, action_dim)).astype(np.float32),
        rewards=np.zeros(length, np.float32),
        success=success,
        chunk_size=8,
        suite="libero_spatial",
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("libero-store")
    EpisodeStore(root).add([libero_episode(i) for i in range(12)])
    return root


def file_keys(directory: Path) -> dict[str, set[str]]:
    out = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            out[path.name] = set(handle.keys())
    return out


def in_fresh_memory(model: torch.nn.Module) -> None:
    """Copy the weights out of the files they were loaded from. safetensors maps a file, so a
    loaded tensor sits wherever it lies in the file, and CPU kernels sum in another order for
    memory aligned otherwise: the same weights at other offsets differ in the last bits (a GPU
    run copies them to the device anyway)."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.data = tensor.data.clone()


def assert_one_line_error(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- (a) world models ----------------------------------------------------------------------------


@pytest.mark.parametrize("backend", list(WORLDS))
def test_train_wm_from_published_layout_and_export_back(backend, store, tmp_path) -> None:
    write, preset = WORLDS[backend]
    source = write(tmp_path / "published", frame_size=SIZE)
    run, export = tmp_path / "run", tmp_path / "export"
    args = ["train-wm", "--data", str(store), "--init", str(source), "--steps", "2"]
    args += ["--out", str(run), "--export-rlinf", str(export), "--gradient-checkpointing"]
    result = runner.invoke(app, [*args, *sets(WM_SETS)])
    assert result.exit_code == 0, result.output
    assert f"exported in the layout of {source} to {export}" in result.output

    # The source's files, shards and key names; the DiT in float32, what it never uses unchanged.
    assert file_keys(export) == file_keys(source)
    files = {p.relative_to(source) for p in source.rglob("*") if p.is_file()}
    assert {p.relative_to(export) for p in export.rglob("*") if p.is_file()} == files
    if (source / "model.safetensors.index.json").is_file():
        index = json.loads((export / "model.safetensors.index.json").read_text())
        before = json.loads((source / "model.safetensors.index.json").read_text())
        assert index["weight_map"] == before["weight_map"]
    unused = (
        "model.text_embedding.0.weight" if backend == "wan" else "model.fps_embedder.mlp.0.weight"
    )
    shard = next(n for n, keys in file_keys(source).items() if unused in keys)
    with safe_open(str(source / shard), "pt") as a, safe_open(str(export / shard), "pt") as b:
        assert torch.equal(a.get_tensor(unused), b.get_tensor(unused))
        keys = b.keys()  # a safetensors handle is not iterable
        moved = [k for k in keys if not torch.equal(a.get_tensor(k).float(), b.get_tensor(k))]
        assert moved and all(b.get_tensor(k).dtype == torch.float32 for k in moved)

    # The export loads as train-policy loads it, to the model that was fine-tuned.
    cfg = resolve_config(preset)
    reloaded = load_any_world_model(export, SIZE, SIZE, cfg, "cpu").eval()
    tuned = load_world_model(run).eval()
    assert type(reloaded) is type(tuned)
    assert tuned.config.num_target_frames == cfg.simulator.chunk_size
    for a, b in zip(tuned.state_dict().items(), reloaded.state_dict().items()):
        assert a[0] == b[0] and torch.equal(a[1], b[1]), a[0]
    episode = libero_episode(100)
    k = cfg.world_model.context_frames
    inputs = (
        episode.frames[None, 0],
        episode.frames[None, 1 : k + 1],
        episode.actions[None, :k],
        episode.actions[None, k : k + 8],
    )
    frames = []
    for model in (tuned, reloaded):
        in_fresh_memory(model)
        model.config.num_inference_steps = 2
        frames.append(model.generate(*inputs, generator=torch.Generator().manual_seed(3)))
    assert frames[0].shape == (1, 8, SIZE, SIZE, 3) and torch.equal(frames[0], frames[1])


# -- (b) reward models ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["resnet", "taskemb_resnet"])
def test_train_reward_from_published_pth_and_export_back(kind, store, tmp_path) -> None:
    assets = tmp_path / "assets"
    if kind == "resnet":  # by asset name: the Wan asset's resnet_rm.pth
        write_wan_libero(assets / "wan-libero-spatial", frame_size=SIZE)
        init, name = "wan-libero-spatial", "resnet_rm.pth"
        source = assets / "wan-libero-spatial" / name
    else:  # a folder holding RLinf's task-embedding model (LIBERO-Goal's file name)
        name = "taskemb_resnet_rm.pth"
        source = tmp_path / "published" / name
        source.parent.mkdir()
        write_taskemb_resnet_rm(source)
        init = str(source.parent)
    published = torch.load(source, weights_only=True)
    run, export = tmp_path / "run", tmp_path / "export"
    args = ["train-reward", "--data", str(store), "--init", init, "--steps", "4"]
    args += ["--assets-dir", str(assets), "--out", str(run), "--export-rlinf", str(export)]
    result = runner.invoke(app, [*args, "--set", "reward_model.batch_size=8"])
    assert result.exit_code == 0, result.output
    assert load_reward_model(run / "reward_model").kind == kind

    exported = torch.load(export / name, weights_only=True)
    assert list(exported) == list(published)  # the same keys, in the same order
    assert all(exported[k].dtype == published[k].dtype for k in published)
    assert any(not torch.equal(exported[k], published[k]) for k in published)
    assert sorted(p.name for p in export.iterdir()) == [name]

    # Loaded as train-policy loads it (RLinf's task order on LIBERO): the fine-tuned scores.
    cfg = resolve_config("wan-spatial-grpo")
    reloaded = load_reward_model(reward_model_source(export))
    tuned = load_reward_model(run / "reward_model")
    frames = np.stack([libero_episode(200 + i).frames[14:20] for i in range(3)])
    env_ids = np.array([0, 1, 2])
    order = reward_task_ids(cfg, reloaded.kind, reward_model_source(export))
    assert (order is None) == (kind == "resnet")
    ids = env_ids if order is None else np.array([order[t] for t in env_ids])
    assert order is None or list(ids) != list(env_ids)  # the orders differ: the test can tell
    assert torch.equal(tuned.predict(frames, env_ids), reloaded.predict(frames, ids))


def test_reward_export_keeps_a_wrapped_prefixed_container(tmp_path) -> None:
    from wmrl_cli.rewards.loading import export_reward_pth

    write_resnet_rm(tmp_path / "plain.pth")
    state = torch.load(tmp_path / "plain.pth", weights_only=True)
    wrapped = {"state_dict": {f"module.{k}": v for k, v in state.items()}, "threshold": 0.5}
    torch.save(wrapped, tmp_path / "resnet_rm.pth")
    model = load_reward_model(tmp_path / "resnet_rm.pth")
    model.config.threshold = 0.7
    with torch.no_grad():
        model.net[-1].bias.add_(1.0)
    out = export_reward_pth(model, tmp_path / "resnet_rm.pth", tmp_path / "out" / "resnet_rm.pth")
    saved = torch.load(out, weights_only=True)
    assert set(saved) == {"state_dict", "threshold"} and saved["threshold"] == 0.7
    assert list(saved["state_dict"]) == list(wrapped["state_dict"])
    assert torch.equal(load_reward_model(out).net[-1].bias, model.net[-1].bias)


# -- (c) bad input: one line, an exit code, nothing left behind ---------------------------------


def _bad_world_inputs(tmp_path: Path, store: Path) -> dict[str, tuple[list[str], int, str]]:
    wan = write_wan_libero(tmp_path / "wan", frame_size=SIZE)
    damaged = write_wan_libero(tmp_path / "damaged", frame_size=SIZE)
    weights = damaged / "model-00001.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    wmrl = tmp_path / "wmrl-model"
    wmrl.mkdir()
    (wmrl / "config.json").write_text("{}")
    small = tmp_path / "mw-store"
    EpisodeStore(small).add([libero_episode(i, action_dim=4) for i in range(3)])
    (tmp_path / "taken").mkdir()
    return {
        "missing": (["--init", str(tmp_path / "nope")], 1, "does not exist"),
        "not a model": (["--init", str(store)], 1, "is not a world model"),
        "asset not downloaded": (
            ["--init", "wan-libero-spatial", "--assets-dir", str(tmp_path / "assets")],
            1,
            "run: wmrl download wan-libero-spatial",
        ),
        "damaged weights": (["--init", str(damaged)], 1, "unreadable"),
        "action size": (["--init", str(wan), "--data", str(small)], 1, "7-dimensional actions"),
        "backend": (["--init", str(wan), "--backend", "opensora"], 2, "holds a wan world model"),
        "export without init": (["--export-rlinf", str(tmp_path / "x")], 2, "needs --init"),
        "export of a wmrl model": (
            ["--init", str(wmrl), "--export-rlinf", str(tmp_path / "x")],
            2,
            "is not in one",
        ),
        "export folder exists": (
            ["--init", str(wan), "--export-rlinf", str(tmp_path / "taken")],
            2,
            "exists",
        ),
    }


def test_bad_train_wm_init_is_one_line_and_leaves_nothing(store, tmp_path) -> None:
    for case, (extra, code, needle) in _bad_world_inputs(tmp_path, store).items():
        run = tmp_path / f"run-{case.replace(' ', '-')}"
        data = [] if "--data" in extra else ["--data", str(store)]
        args = ["train-wm", *data, *extra, "--steps", "1", "--out", str(run), *sets(WM_SETS)]
        result = runner.invoke(app, args)
        assert_one_line_error(result, code, needle)
        assert not run.exists(), case
        assert not (tmp_path / "x").exists(), case
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temporary folders


def test_bad_train_reward_init_is_one_line_and_leaves_nothing(store, tmp_path) -> None:
    write_resnet_rm(tmp_path / "resnet_rm.pth")
    damaged = tmp_path / "damaged" / "resnet_rm.pth"
    damaged.parent.mkdir()
    damaged.write_bytes((tmp_path / "resnet_rm.pth").read_bytes()[:300])
    wmrl = save_reward_model(load_reward_model(tmp_path / "resnet_rm.pth"), tmp_path / "wmrl-rm")
    empty = tmp_path / "empty"
    empty.mkdir()
    rm = str(tmp_path / "resnet_rm.pth")
    cases = {
        "missing": (["--init", str(tmp_path / "nope")], 1, "does not exist"),
        "not a reward model": (["--init", str(empty)], 1, "config.json is missing"),
        "damaged": (["--init", str(damaged.parent)], 1, "not a readable PyTorch checkpoint"),
        "kind": (["--init", rm, "--kind", "taskemb_resnet"], 2, "--kind taskemb_resnet"),
        "width": (["--init", rm, "--width", "8"], 2, "--width 8, but"),
        "export of a wmrl model": (
            ["--init", str(wmrl), "--export-rlinf", str(tmp_path / "x")],
            2,
            "not a published reward model",
        ),
        "export over the source": (["--init", rm, "--export-rlinf", str(tmp_path)], 2, "overwrite"),
        "export without init": (["--export-rlinf", str(tmp_path / "x")], 2, "needs --init"),
    }
    for case, (extra, code, needle) in cases.items():
        run = tmp_path / f"run-{case.replace(' ', '-')}"
        args = ["train-reward", "--data", str(store), *extra, "--steps", "1", "--out", str(run)]
        assert_one_line_error(runner.invoke(app, args), code, needle)
        assert not run.exists() and not (tmp_path / "x").exists(), case
