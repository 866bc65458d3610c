"""A replicated world-model checkpoint's optimizer and EMA states loaded into a sharded
denoiser (training/sharding.py `WholeOptimizerState`, training/denoiser_sharding.py `WholeEma`),
for tests/training/test_denoiser_sharding.py:

    python -m torch.distributed.run --nproc_per_node 2 -m tests.helpers.denoiser_state_worker OUT

Every rank builds the same tiny Wan world model, takes two AdamW steps on a replicated copy of
its denoiser (the state a replicated checkpoint holds), shards the other copy, loads the
replicated optimizer and EMA states into it, and writes OUT/rank_N.pt: for each parameter, this
rank's shard of the moments and the EMA beside the same rows of the replicated state.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch


def main(out: Path) -> None:
    from accelerate import Accelerator

    from wmrl_cli.config import resolve_config
    from wmrl_cli.training.denoiser_sharding import WholeEma, shard_denoiser
    from wmrl_cli.training.sharding import WholeOptimizerState, local_tensor
    from wmrl_cli.world_models.factory import build_world_model

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    cfg = resolve_config(overrides=["world_model.backend=wan", "simulator.image_size=32"])
    replicated = build_world_model(cfg, action_dim=4).transformer
    sharded = copy.deepcopy(replicated)
    optimizer = torch.optim.AdamW(replicated.parameters(), lr=1e-3)
    for _ in range(2):
        for p in replicated.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()
    ema = {n: p.detach() * 0.5 for n, p in replicated.named_parameters()}

    shard_denoiser(sharded, accelerator)
    sharded_optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-3)
    sharded_ema = {n: p.detach().clone() for n, p in sharded.named_parameters()}
    WholeOptimizerState(sharded, sharded_optimizer).load_state_dict(optimizer.state_dict())
    WholeEma(sharded_ema).load_state_dict(ema)

    rows = {}
    whole_state = dict(zip((n for n, _ in replicated.named_parameters()), optimizer.state.values()))
    for (name, param), state in zip(sharded.named_parameters(), sharded_optimizer.state.values()):
        # FSDP2's Shard(0): rank r holds rows r*c .. (r+1)*c - 1 of the whole, c = ceil(rows / N)
        chunk = -(-param.shape[0] // accelerator.num_processes)
        start = chunk * accelerator.process_index
        rows_of = slice(start, start + local_tensor(param).shape[0])
        whole = whole_state[name]
        rows[name] = {
            "exp_avg": (local_tensor(state["exp_avg"]), whole["exp_avg"][rows_of]),
            "exp_avg_sq": (local_tensor(state["exp_avg_sq"]), whole["exp_avg_sq"][rows_of]),
            "step": (state["step"], whole["step"]),
            "ema": (local_tensor(sharded_ema[name]), ema[name][rows_of]),
        }
    torch.save(rows, out / f"rank_{accelerator.process_index}.pt")


if __name__ == "__main__":
    from wmrl_cli.ranks import run_then_end_ranks  # the group closed in order, as `wmrl` does

    run_then_end_ranks(lambda: sys.exit(main(Path(sys.argv[1]))))
