"""RL's real-simulator evaluation on ranks, as the trainer calls it (jobs/assembly.py
`real_eval_callback`), for tests/rl/test_distributed_eval.py:

    python -m tests.helpers.eval_ranks POLICY OUT    (on ranks: ranks.py `run_ranks`)

Every rank evaluates its share of mw3's episodes (3 trials per task, 2 envs at a time: 5
batches, the last one short) with the tiny policy POLICY and writes OUT/rank_R.json: the
metrics it got and its process group's timeout in minutes (`training.dist_timeout_minutes=7`);
the first rank writes the report OUT/eval/step_000001.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OVERRIDES = [
    "simulator.suite=mw3",
    "simulator.num_envs=2",
    "simulator.num_workers=0",
    "simulator.image_size=32",
    "simulator.max_steps=16",
    "algorithm.eval_trials=3",
    "training.dist_timeout_minutes=7",
    "logging.progress=false",
    "num_threads=1",
]


def group_timeout_minutes() -> float | None:
    """The default process group's timeout (gloo's backend options), None without a group."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        return None
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    return backend.options._timeout.total_seconds() / 60


def main(policy: str, out: Path) -> None:
    from wmrl_cli.config import resolve_config
    from wmrl_cli.jobs.assembly import real_eval_callback
    from wmrl_cli.jobs.train_policy import make_accelerator
    from wmrl_cli.policies.checkpoint import from_pretrained

    cfg = resolve_config(overrides=OVERRIDES)
    accelerator = make_accelerator(cfg)
    rank, ranks = accelerator.process_index, accelerator.num_processes
    model = from_pretrained(Path(policy) / "policy", device="cpu")
    metrics = real_eval_callback(cfg, out, rank, ranks)(model, 1)
    row = {"metrics": metrics, "timeout_minutes": group_timeout_minutes()}
    (out / f"rank_{rank}.json").write_text(json.dumps(row))
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    from wmrl_cli.ranks import run_then_end_ranks  # the group closed in order, as `wmrl` does

    run_then_end_ranks(lambda: sys.exit(main(sys.argv[1], Path(sys.argv[2]))))
