"""How far training moved a policy: per task, the mean per-token KL(base || trained) of the
action distribution and how often the most likely action token stays the same, on real frames.

    python experiments/more-steps-on-a-gpu/policy_move.py --base BASE_POLICY --store STORE
        TRAINED [TRAINED ...] [--episodes 120] [--every 4] [--seed 0]

The frames are `--episodes` episodes drawn (seeded) from the episode store STORE, read at
every `--every`-th chunk boundary, each with its episode's instruction. Both policies read the
same frames, so the KL says how differently they would act in the same real states: a run whose
real success did not change can have moved a lot (or not at all). Results:
docs/results.md#more-steps-on-a-gpu.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import numpy as np
import torch

from wmrl_cli.data.episodes import EpisodeStore
from wmrl_cli.errors import WmrlError
from wmrl_cli.evaluation.policy_shift import token_kl
from wmrl_cli.policies.registry import load_learned_policy


def frames_by_task(store: EpisodeStore, episodes: int, every: int, seed: int) -> dict:
    """task -> (frames uint8 [N,H,W,3], instructions [N])."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(len(store), size=min(episodes, len(store)), replace=False)
    found: dict[str, list] = defaultdict(list)
    for ep in store.iter_ids(sorted(ids.tolist())):
        for t in range(0, ep.length, ep.chunk_size * every):
            found[ep.task_name].append((ep.frames[t], ep.instruction))
    return {
        task: (np.stack([f for f, _ in items]), [i for _, i in items])
        for task, items in sorted(found.items())
    }


@torch.no_grad()
def action_shift(base, trained, frames: np.ndarray, prompts: list[str]) -> tuple[float, float]:
    """(mean per-token KL(base || trained), share of tokens whose argmax agrees)."""
    base_logits, trained_logits = base(frames, prompts).logits, trained(frames, prompts).logits
    kl = token_kl(base_logits, trained_logits).mean().item()
    agree = (base_logits.argmax(-1) == trained_logits.argmax(-1)).float().mean().item()
    return kl, agree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the policy training started from")
    parser.add_argument("--store", required=True, help="an episode store with real frames")
    parser.add_argument("trained", nargs="+", help="trained policies (checkpoint folders)")
    parser.add_argument("--episodes", type=int, default=120)
    parser.add_argument("--every", type=int, default=4, help="read every N-th chunk boundary")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    base = load_learned_policy(args.base, device="cpu").model.eval()
    data = frames_by_task(EpisodeStore.open(args.store), args.episodes, args.every, args.seed)
    print(f"{sum(len(p) for _, p in data.values())} frames of {len(data)} tasks")
    for path in args.trained:
        trained = load_learned_policy(path, device="cpu").model.eval()
        rows = {task: action_shift(base, trained, *data[task]) for task in data}
        print(path)
        for task, (kl, agree) in rows.items():
            n = len(data[task][1])
            print(f"  {task:22s} frames {n:4d}  KL {kl:.4f}  argmax agrees {agree:.3f}")
        kls, agrees = zip(*rows.values())
        mean = f"KL {np.mean(kls):.4f}  argmax agrees {np.mean(agrees):.3f}"
        print(f"  {'mean over tasks':34s}{mean}")


if __name__ == "__main__":
    try:
        main()
    except WmrlError as exc:  # a bad path or checkpoint: one line, as the CLI says it
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
