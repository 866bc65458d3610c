"""Sharded policy training (training/sharding.py, `training.sharding: fsdp`) on CPU ranks
(gloo): the same update as one rank, a 2-step `train-policy` end to end whose export `eval`
loads, and a run killed with SIGKILL that resumes to the uninterrupted run's metrics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.helpers import ROOT, process_output
from tests.helpers.train_policy import args, metrics
from wmrl_cli.cli.app import app
from wmrl_cli.training.sharding import MixedStateAdamW, clip_gradients, global_grad_norm

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl"}
FSDP = ["--set", "training.sharding=fsdp"]
runner = CliRunner()


VARIANTS = ["full", "bf16", "lora"]


def _worker(out: Path, ranks: int) -> dict[str, dict]:
    launch = ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}"] if ranks > 1 else []
    cmd = [sys.executable, *launch, "-m", "tests.helpers.sharding_worker", str(out), *VARIANTS]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, process_output(proc.stdout, proc.stderr)
    return {v: torch.load(out / f"result_{ranks}_{v}.pt") for v in VARIANTS}


@pytest.fixture(scope="module")
def updates(tmp_path_factory) -> dict[int, dict[str, dict]]:
    """Each variant's update on one process and on 2 FSDP ranks (one start of each)."""
    out = tmp_path_factory.mktemp("sharding")
    return {ranks: _worker(out, ranks) for ranks in (1, 2)}


@pytest.mark.parametrize("variant", VARIANTS)
def test_two_sharded_ranks_update_as_one_rank(updates, variant) -> None:
    """The same batch split over 2 FSDP ranks: the mean of their losses is one rank's loss, the
    gradient and its global norm are one rank's (each rank's clipped norm is the whole
    gradient's, not its shard's), and after an AdamW step (lr 1e-2) the gathered weights are
    one rank's. Afterwards the gathered policy decodes the same actions on both ranks although
    rank 0 calls it three times and rank 1 once. bf16: FSDP's mixed precision on two ranks
    against autocast on one, to bf16's rounding. lora: adapters over a bf16 base, activation
    checkpointing and float32 moments."""
    one, two = updates[1][variant], updates[2][variant]
    exact = variant == "full"
    rel = 1e-6 if exact else 2e-2
    assert sum(two["losses"]) / 2 == pytest.approx(one["losses"][0], rel=rel)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=rel)
    assert one["grads"].keys() == two["grads"].keys() and one["grads"]
    gap = torch.cat([(two["grads"][k] - g).flatten() for k, g in one["grads"].items()])
    whole = torch.cat([g.flatten() for g in one["grads"].values()])
    assert gap.norm() <= (1e-5 if exact else 3e-2) * whole.norm()
    assert one["weights"].keys() == two["weights"].keys()
    moved = max((one["weights"][k] - w).abs().max() for k, w in _initial(variant).items())
    assert moved > 1e-3  # the step moved the weights
    if exact:  # (bf16: a gradient near 0 may change sign, and AdamW's first step is lr x sign)
        for key, weight in one["weights"].items():
            torch.testing.assert_close(two["weights"][key], weight, rtol=0, atol=1e-4, msg=key)
    assert two["tokens"][:2] == two["tokens"][2:]
    if exact:
        assert two["tokens"][:2] == one["tokens"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_kl_reference_computes_as_the_policy_at_initialisation(updates, variant) -> None:
    """The KL reference (a frozen copy of the starting policy) gives the policy's own
    log-probs before the first step, bit for bit, replicated (bf16 autocast) and sharded (FSDP
    mixed precision) alike: the KL starts at 0. Until 2026-11-29 the reference ran in float32
    beside a bf16 policy."""
    for ranks in (1, 2):
        assert updates[ranks][variant]["kl_gaps"] == [0.0] * ranks, ranks


def test_lora_keeps_its_base_in_bf16_and_trains_in_float32(updates) -> None:
    """Under LoRA with bf16 compute the frozen base (Llama, vision towers) is bf16, what
    trains (adapters, projector) float32 master weights; the gradient norm is on the compute
    device."""
    for ranks in (1, 2):
        dtypes = updates[ranks]["lora"]["dtypes"]
        trained = {n for n in dtypes if "lora_" in n or n.startswith("projector.")}
        assert trained and all(dtypes[n] == torch.float32 for n in trained)
        frozen = set(dtypes) - trained
        assert frozen and all(dtypes[n] == torch.bfloat16 for n in frozen)
        assert updates[ranks]["lora"]["norm_device"] == "cpu"


def test_the_gradient_norm_and_the_policys_targets_go_to_the_compute_device() -> None:
    """Under FSDP2's CPU offload the weights' and gradients' shards sit in CPU memory while the
    policy computes on its GPU: the norm's reduction and sft's targets go to the compute
    device ("meta" stands in for it here), not the parameters' (an all-reduce of a CPU tensor
    on an NCCL group fails, pytorch#148532; sft compared CPU targets with CUDA predictions)."""
    from tests.helpers.sharding_worker import tiny_policy

    params = [torch.nn.Parameter(torch.ones(3)) for _ in range(2)]
    for param in params:
        param.grad = torch.full((3,), 2.0)
    assert global_grad_norm([p.grad for p in params], "meta").device.type == "meta"
    assert clip_gradients(params, 1.0, "cpu").item() == pytest.approx(24**0.5)
    clipped = torch.linalg.vector_norm(torch.cat([p.grad for p in params]))
    assert clipped.item() == pytest.approx(1.0, rel=1e-5)
    policy = tiny_policy(False)
    policy.compute_device = torch.device("meta")
    targets = policy.actions_to_tokens(torch.zeros(1, 8, 7))
    assert targets.device.type == "meta" and policy.projector.fc1.weight.device.type == "cpu"


def _initial(variant: str) -> dict[str, torch.Tensor]:
    from tests.helpers.sharding_worker import tiny_policy

    return tiny_policy(variant == "lora").state_dict()


def test_mixed_state_adamw_is_adamw() -> None:
    """With float32 moments on float32 weights it steps exactly as torch's AdamW; bf16 weights
    keep float32 moments."""
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(64))
    b = torch.nn.Parameter(a.detach().clone())
    ours = MixedStateAdamW([a], torch.float32, lr=1e-2, weight_decay=0.01, eps=1e-8)
    theirs = torch.optim.AdamW([b], lr=1e-2, weight_decay=0.01, eps=1e-8, foreach=False)
    for step in range(3):
        grad = torch.randn(64, generator=torch.Generator().manual_seed(step))
        a.grad, b.grad = grad.clone(), grad.clone()
        ours.step()
        theirs.step()
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    half = torch.nn.Parameter(torch.randn(8, dtype=torch.bfloat16))
    opt = MixedStateAdamW([half], torch.float32, lr=1e-3)
    half.grad = torch.ones_like(half)
    opt.step()
    assert opt.state[half]["exp_avg"].dtype == torch.float32 and half.dtype == torch.bfloat16
    # ... also after a resume (torch's loader casts the moments to the weights' dtype)
    again = MixedStateAdamW([half], torch.float32, lr=1e-3)
    again.load_state_dict(opt.state_dict())
    moments = again.state[half]
    assert moments["exp_avg"].dtype == moments["exp_avg_sq"].dtype == torch.float32
    torch.testing.assert_close(moments["exp_avg"], opt.state[half]["exp_avg"])


def _two_ranks(cmd_args: list[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "wmrl_cli", *cmd_args, "--num-processes", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, process_output(proc.stdout, proc.stderr)
    return proc


def test_sharded_train_policy_runs_and_its_export_loads_in_eval(assets, tmp_path) -> None:
    """`train-policy --num-processes 2 --set training.sharding=fsdp`: 2 steps of GRPO in the
    tiny imagined env, the real-simulator evaluation at the end (spread over the ranks, each
    with the policy gathered),
    the optimizer's shards in the checkpoint, and a consolidated policy that `eval` reads."""
    run = tmp_path / "fsdp"
    # with RL's anchor: a second forward and backward per update through the sharded policy
    anchor = ["--set", "algorithm.bc_coef=0.5", "--set", f"algorithm.bc_data={assets / 'demos'}"]
    proc = _two_ranks([*args(assets, run, 2, algo="grpo", envs=8), *FSDP, *anchor])
    assert "memory plan per GPU" not in proc.stdout  # a CPU run: no GPU phases (zeros)
    rows = metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and "eval/success_once" in rows[-1]
    assert rows[-1]["train/bc/loss"] > 0
    sharded = run / "checkpoints" / "step_000002" / "training_state" / "sharded"
    assert (sharded / ".metadata").is_file() and len(list(sharded.glob("*.distcp"))) == 2
    assert not list((run / "checkpoints").glob(".sharded-*"))  # moved into the checkpoint
    evaluated = runner.invoke(
        app,
        [
            "eval", "--policy", str(run), "--suite", "mw3", "-n", "1", "--num-envs", "3",
            "--num-workers", "0", "--image-size", "32", "--out", str(tmp_path / "eval"),
            "--set", "simulator.max_steps=16",
        ],
    )  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    # Continued on one process (a co-evolve stage rerun without --num-processes): the sharded
    # optimizer state is read whole (until 2026-11-28 this stopped, naming the checkpoint
    # damaged)
    one = runner.invoke(app, [*args(assets, run, 3, algo="grpo", envs=8), *FSDP, *anchor])
    assert one.exit_code == 0, one.output
    assert "resuming policy training from step_000002" in one.output
    assert [r["step"] for r in metrics(run / "metrics.jsonl")] == [1, 2, 3]


@pytest.mark.slow
def test_a_replicated_ppo_checkpoint_continues_sharded(assets, tmp_path) -> None:
    """A run saved on one process (two optimizer groups: PPO's actor and critic) continued on
    2 FSDP ranks: the whole optimizer state split into the ranks' shards."""
    run = tmp_path / "run"
    one = runner.invoke(app, [*args(assets, run, 1, algo="ppo", envs=8), *FSDP])
    assert one.exit_code == 0, one.output
    proc = _two_ranks([*args(assets, run, 2, algo="ppo", envs=8), *FSDP])
    assert proc.stdout.count("resuming policy training from step_000001") == 1  # rank 0's
    assert [r["step"] for r in metrics(run / "metrics.jsonl")] == [1, 2]


@pytest.mark.slow
def test_sharded_run_killed_then_resumed_matches_uninterrupted(assets, tmp_path) -> None:
    """A 2-rank FSDP run killed with SIGKILL (rank 0, right after its first checkpoint) and
    started again resumes from that checkpoint (the optimizer's shards included) and logs the
    uninterrupted run's metrics."""
    straight, killed = tmp_path / "a", tmp_path / "b"
    _two_ranks([*args(assets, straight, 3, algo="grpo", envs=8), *FSDP])
    # torchrun straight into tests.helpers.kill_at: every rank installs the kill point,
    # rank 0 hits it
    kill = ["wmrl_cli.rl.trainer:save_checkpoint", "after", "1", "--"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2"]
    cmd += ["-m", "tests.helpers.kill_at", *kill]
    cmd += [*args(assets, killed, 3, algo="grpo", envs=8), *FSDP]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=900)
    assert proc.returncode != 0 and (killed / "checkpoints" / "step_000001").is_dir()
    resumed = _two_ranks([*args(assets, killed, 3, algo="grpo", envs=8), *FSDP])
    assert resumed.stdout.count("resuming policy training from step_000001") == 1  # rank 0's
    a, b = metrics(straight / "metrics.jsonl"), metrics(killed / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], rel=1e-6, abs=1e-7), key


@pytest.mark.slow
def test_sharded_sft_on_two_ranks_saves_shards_and_a_loadable_policy(tmp_path, expert_episodes):
    """`wmrl sft` under torchrun with training.sharding=fsdp (and checkpointing): the
    optimizer's shards beside the scheduler's state, a consolidated policy that loads."""
    from tests.helpers.sft import TINY
    from wmrl_cli.data.episodes import EpisodeStore
    from wmrl_cli.policies.checkpoint import from_pretrained

    EpisodeStore(tmp_path / "demos").add(expert_episodes)
    out = tmp_path / "sft"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "wmrl_cli"]
    cmd += ["sft", "--suite", "mw3", "--data", str(tmp_path / "demos"), "--steps", "4"]
    cmd += ["--out", str(out), *TINY, "--set", "sft.save_every=2", *FSDP]
    cmd += ["--set", "training.activation_checkpointing=true"]
    proc = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, process_output(proc.stdout, proc.stderr)
    state = out / "checkpoints" / "step_000004" / "training_state"
    assert (state / "sharded" / ".metadata").is_file() and (state / "state_0.pt").is_file()
    assert from_pretrained(out / "policy").config.name == "tiny"
