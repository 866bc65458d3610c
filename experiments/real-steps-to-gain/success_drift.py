"""Per task, how far RL moved a policy away from real successes: the mean negative
log-likelihood per action token of a store's successful real episodes under each policy, beside
the base's.

    python experiments/real-steps-to-gain/success_drift.py --store RUN/data/reward_real \\
        --policy base=RUN/sft/policy --policy going-on=RUN/stage1/checkpoints/step_000010/model \\
        [--policy NAME=DIR ...] --out DIR [--batch 256]

The first `--policy` is the reference; each other's row per task is its NLL minus the
reference's (nats per token): a rise is the policy drifting away from what succeeded on real
frames, on tasks RL trains on or not. Deterministic (no sampling, every step of every
successful episode); writes DIR/success_drift.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from wmrl_cli.data.bc import build_bc_dataset
from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.files import atomic_write_text


def task_nll(policy, data, tasks: list[str], batch: int) -> dict[str, float]:
    """Mean NLL per action token of every sample, averaged per task (`tasks[i]`: the task of
    instruction i)."""
    totals: dict[str, list[float]] = {t: [] for t in dict.fromkeys(tasks)}
    policy.eval()
    with torch.no_grad():
        for start in range(0, len(data), batch):
            sl = slice(start, start + batch)
            prompts = [data.instructions[i] for i in data.prompt_ids[sl]]
            targets = policy.actions_to_tokens(torch.from_numpy(data.chunks[sl]))
            out = policy(torch.from_numpy(data.frames[sl]), prompts, targets, 1.0)
            per_sample = -out.log_probs.flatten(1).mean(1)
            for i, value in zip(data.prompt_ids[sl], per_sample.tolist()):
                totals[tasks[i]].append(value)
    return {t: float(np.mean(v)) for t, v in totals.items()}


def table(rows: dict[str, dict[str, float]], reference: str) -> str:
    names = list(rows)
    tasks = list(rows[reference])
    head = ["| task | " + reference + " (nats/token) | " + " | ".join(names[1:]) + " |"]
    head.append("|---" * len(names) + "|---|")
    lines = []
    for task in [*tasks, "mean"]:
        ref = rows[reference][task] if task != "mean" else np.mean(list(rows[reference].values()))
        cells = []
        for name in names[1:]:
            value = rows[name][task] if task != "mean" else np.mean(list(rows[name].values()))
            cells.append(f"{value - ref:+.3f}")
        lines.append(f"| {task} | {ref:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(head + lines) + "\n"


def main() -> None:
    from wmrl_cli.policies.checkpoint import from_pretrained

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--policy", action="append", required=True, help="NAME=DIR")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    policies = {}
    for item in args.policy:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise WmrlError(f"--policy {item!r}: expected NAME=DIR")
        if not Path(path).is_dir():
            raise WmrlError(f"--policy {name}: {path} is not a policy folder")
        policies[name] = Path(path)
    if len(policies) < 2:
        raise WmrlError("give a reference --policy and at least one to compare with it")
    store = EpisodeStore.open(args.store)
    rows: dict[str, dict[str, float]] = {}
    first = from_pretrained(next(iter(policies.values())))
    data = build_bc_dataset(store, first.chunk_size)
    task_of = {e["instruction"]: e["task_name"] for e in store.index}  # Episode.meta's keys
    tasks = [task_of[i] for i in data.instructions]
    for name, path in policies.items():
        policy = first if not rows else from_pretrained(path)
        rows[name] = task_nll(policy, data, tasks, args.batch)
        print(f"{name}: mean {np.mean(list(rows[name].values())):.4f} nats/token", flush=True)
    reference = next(iter(policies))
    args.out.mkdir(parents=True, exist_ok=True)
    body = {
        "store": str(args.store),
        "reference": reference,
        "nll": rows,
        "policies": {k: str(v) for k, v in policies.items()},
    }
    atomic_write_text(args.out / "success_drift.json", json.dumps(body, indent=1))
    atomic_write_text(args.out / "success_drift.md", table(rows, reference))
    print(table(rows, reference))


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
