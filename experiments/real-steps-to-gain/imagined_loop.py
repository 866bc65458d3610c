"""A policy acting in a world model from a co-evolve run's RL starts, labelled by replay.

    python experiments/real-steps-to-gain/imagined_loop.py --run RUN --world-model WM \\
        [--policy POLICY] [--tasks a,b,...] --out STORE

The run's `labelled_base` stage with another world model (or policy): the same starts
(RUN/data/base_merged, `coevolve.reward_policy_rollouts_per_task` per task), the same seed
(`simulator.seed + 3_000_000`), each chunk replayed in the simulator (`jobs/imagine_policy.py`).
`--tasks` keeps those tasks' starts only (`algorithm.train_tasks`), the ones the whole stage
draws for them, so a few tasks cost a few tasks' time. `closed_loop_gap.py --store STORE` then
sets it beside the policy acting on real frames from the same starts. STORE is written whole or
not at all (a finished one is reused).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wmrl_cli.coevolve.stages import imagine_policy
from wmrl_cli.config.loading import validate_config
from wmrl_cli.errors import WmrlError
from wmrl_cli.jobs.inputs import check_train_tasks

LABELLED_BASE_SEED = 3_000_000  # coevolve/pipeline.py: the labelled_base stage's seed offset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a co-evolve run directory")
    parser.add_argument("--world-model", type=Path, required=True)
    parser.add_argument("--policy", type=Path, help="default: RUN/sft/policy (the base)")
    parser.add_argument("--tasks", help="comma-separated task names (default: every task)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    run = args.run
    policy = args.policy or run / "sft" / "policy"
    for needed in (run / "run.json", run / "data" / "base_merged", args.world_model, policy):
        if not needed.exists():
            raise WmrlError(f"{needed}: not found (--run takes a co-evolve run after its stage 1)")
    cfg = validate_config(json.loads((run / "run.json").read_text())["config"])
    if args.tasks:
        cfg.algorithm.train_tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
        check_train_tasks(cfg, run / "data" / "base_merged")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    store = imagine_policy(
        cfg,
        str(policy),
        str(args.world_model),
        str(run / "data" / "base_merged"),
        args.out,
        cfg.simulator.seed + LABELLED_BASE_SEED,
    )
    print(store)


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path, task or model: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
