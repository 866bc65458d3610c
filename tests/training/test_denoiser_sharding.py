"""A world model's denoiser sharded over CPU ranks (gloo; training/denoiser_sharding.py,
`world_model.sharding: fsdp`): `train-wm --init` on 2 sharded ranks trains the model 2
replicated ranks train, to float tolerance, and a sharded run resumed from its checkpoint
continues as the uninterrupted one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import process_output
from wmrl_cli.config import resolve_config
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.world_models.factory import MODEL_DIR, build_world_model

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TWO_RANKS = ["--num-processes", "2"]
SHARDING = ["--set", "world_model.sharding=fsdp"]  # on one rank: the replicated path
FSDP = [*SHARDING, *TWO_RANKS]


@pytest.fixture(scope="module")
def store(tmp_path_factory, expert_episodes):
    root = tmp_path_factory.mktemp("wm-data")
    EpisodeStore(root).add(expert_episodes)
    return root


def init_model(root, backend: str):
    cfg = resolve_config(overrides=[f"world_model.backend={backend}", "simulator.image_size=32"])
    torch.manual_seed(0)
    return build_world_model(cfg, action_dim=4).save_pretrained(root / f"init-{backend}")


def train(store, init, out, steps: int, *extra: str) -> subprocess.CompletedProcess:
    sets = {
        "world_model.batch_size": 2,
        "world_model.lr": 1e-3,
        "world_model.warmup_steps": 0,
        "world_model.ema_decay": 0.5,  # the saved EMA model moves with the weights
        "world_model.save_every": 2,
        "world_model.val_every": 2,
        "world_model.val_episodes": 1,
        "world_model.val_horizon": 4,
        "world_model.window_stride": 16,
        "world_model.num_inference_steps": 1,
        "num_threads": 1,
        "logging.progress": "false",
    }
    cmd = [sys.executable, "-m", "wmrl_cli", "train-wm", "--data", str(store), "--init", str(init)]
    cmd += ["--out", str(out), "--steps", str(steps), *extra]
    cmd += [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    assert proc.returncode == 0, process_output(proc.stdout, proc.stderr)
    return proc


def weights(run) -> dict[str, torch.Tensor]:
    return load_file(str(run / MODEL_DIR / "model.safetensors"))


def logged(run, key: str) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    return [row[key] for row in rows if key in row]


def losses(run) -> list[float]:
    return logged(run, "train/wm/loss")


@pytest.mark.parametrize("backend", ["wan", pytest.param("opensora", marks=pytest.mark.slow)])
def test_two_sharded_ranks_train_the_model_two_replicas_train(store, tmp_path, backend) -> None:
    """The same windows and noise on each rank as data parallel (each rank draws its own noise
    seed, so one process would train on other noise): the same model to float tolerance."""
    init = init_model(tmp_path, backend)
    train(store, init, tmp_path / "one", 2, *TWO_RANKS)
    train(store, init, tmp_path / "fsdp", 2, *FSDP)
    one, fsdp = weights(tmp_path / "one"), weights(tmp_path / "fsdp")
    assert one.keys() == fsdp.keys()
    moved = [k for k in one if k.startswith("transformer.")]
    initial = load_file(str(init / "model.safetensors"))
    assert max((one[k] - initial[k]).abs().max() for k in moved) > 1e-4  # training moved it
    for key, weight in one.items():
        torch.testing.assert_close(fsdp[key], weight, rtol=0, atol=2e-5, msg=key)
    assert losses(tmp_path / "fsdp") == pytest.approx(losses(tmp_path / "one"), rel=1e-5)
    # the whole gradient's norm, not one rank's part of it
    assert logged(tmp_path / "fsdp", "train/wm/grad_norm") == pytest.approx(
        logged(tmp_path / "one", "train/wm/grad_norm"), rel=1e-4
    )
    # each rank held half of the denoiser: the ranks' shards differ
    ranks = [
        json.loads((tmp_path / "fsdp" / "ranks" / f"rank_{r}.json").read_text()) for r in (0, 1)
    ]  # noqa: E501
    assert ranks[0]["weights_sha256"] != ranks[1]["weights_sha256"]
    checkpoint = tmp_path / "fsdp" / "checkpoints" / "step_000002"
    assert (checkpoint / "training_state" / "sharded" / ".metadata").is_file()
    if backend != "wan":
        return
    # Each continued on one process (a co-evolve stage rerun without --num-processes): the
    # sharded checkpoint's optimizer and EMA shards read whole, the replicated one's as saved;
    # the same state, so the same step 3.
    for run, settings in (("one", []), ("fsdp", SHARDING)):
        resumed = train(store, init, tmp_path / run, 3, *settings)
        assert "resuming world-model training from step 2" in resumed.stdout, run
    one, fsdp = weights(tmp_path / "one"), weights(tmp_path / "fsdp")
    for key, weight in one.items():
        torch.testing.assert_close(fsdp[key], weight, rtol=0, atol=4e-5, msg=key)
    assert losses(tmp_path / "fsdp")[-1] == pytest.approx(losses(tmp_path / "one")[-1], rel=1e-5)


# three 2-rank runs, about a minute on a 2-core CPU: slow (the suite's budget); the sharded
# checkpoint is written and checked in CI by the test above
@pytest.mark.slow
def test_a_sharded_run_resumed_from_its_checkpoint_continues_as_uninterrupted(
    store, tmp_path
) -> None:
    init = init_model(tmp_path, "wan")
    train(store, init, tmp_path / "whole", 4, *FSDP)
    train(store, init, tmp_path / "resumed", 2, *FSDP)
    resumed = train(store, init, tmp_path / "resumed", 4, *FSDP)
    assert "resuming world-model training from step 2" in resumed.stdout
    # (the first run logged its last step, 2, too)
    assert losses(tmp_path / "resumed")[-1] == losses(tmp_path / "whole")[-1]
    whole, again = weights(tmp_path / "whole"), weights(tmp_path / "resumed")
    for key, weight in whole.items():
        assert torch.equal(again[key], weight), key


@pytest.mark.slow  # the suite's 15-minute budget
def test_a_replicated_checkpoints_states_load_into_the_ranks_shards(tmp_path) -> None:
    """A co-evolve refinement saved on one process and resumed on several sharded ranks: each
    rank keeps its rows of the whole AdamW moments and EMA (FSDP2 shards dimension 0)."""
    from tests.helpers import ROOT, process_output

    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    cmd = [*launch, "-m", "tests.helpers.denoiser_state_worker", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, process_output(proc.stdout, proc.stderr)
    for rank in (0, 1):
        rows = torch.load(tmp_path / f"rank_{rank}.pt")
        assert len(rows) > 10
        for name, parts in rows.items():
            for part, (mine, whole) in parts.items():
                torch.testing.assert_close(mine, whole, msg=f"{name} {part}")
