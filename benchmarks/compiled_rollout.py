"""RL's imagined rollout with the world model eager and compiled (`compile_world_model`), side
by side.

    python benchmarks/compiled_rollout.py --preset RUN_CONFIG.yaml [--envs 32] [--rounds 2]
        [--warmup 1] [--out RESULT.json] [--markdown TABLE.md]

RUN_CONFIG is a train-policy config in imagination (a run folder's config.yaml will do): its
world model, reward model, policy and reset set are loaded twice as RL loads them, once as they
are and once with `WorldModel.compile_for_imagination` (the denoiser and the autoencoder's
decoder under torch.compile). Each round collects one rollout of `--envs` episodes as one GRPO
step does (`collect_rollout`, the same starts and seeds in both arms, ended episodes skipped,
so the batch shrinks as they end), in alternating order. The compiled arm's `--warmup` rollouts
come first and are timed apart: they hold the compilation, one per new batch size until torch
marks the batch dynamic. Printed per arm: wall and world-model seconds per rollout (median),
the mean episode length, the observed frames' mean and largest difference between the arms
(rounding, which can change a sampled action and then a trajectory), and the ratio of medians.
Results: docs/benchmarks.md.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("MUJOCO_GL", "egl")

import harness  # noqa: E402
import numpy as np  # noqa: E402
from rollout_timing import (  # noqa: E402
    load_rollout_setup,
    rollout_parser,
    summarize_arms,
    timed_rollout,
)

ARMS = ("eager", "compiled")


def main() -> None:
    args = rollout_parser(__doc__, rounds=2, warmup=1).parse_args()
    setup = load_rollout_setup(args)
    cfg, policy, sampler, max_chunks = setup.cfg, setup.policy, setup.sampler, setup.max_chunks
    envs = {"eager": setup.env, "compiled": setup.another_env()}
    envs["compiled"].world_model.compile_for_imagination()

    warmup_s = []
    for warm in range(args.warmup):  # the compilation: its own starts, untimed in the ratio
        start = time.perf_counter()
        timed_rollout(envs["compiled"], policy, sampler.sample(), max_chunks, cfg, -1 - warm)
        warmup_s.append(time.perf_counter() - start)
        print(f"compiled warm-up {warm}: {warmup_s[-1]:.1f} s", flush=True)
    results: dict[str, list[tuple[float, float, float]]] = {arm: [] for arm in ARMS}
    frame_gap, mean_gap = 0, []  # the policy's observations, where both arms have the step
    for round_ in range(args.rounds):
        init_ids = sampler.sample()
        order = ARMS if round_ % 2 == 0 else ARMS[::-1]
        frames = {}
        for arm in order:
            wall, world_model, rollout = timed_rollout(
                envs[arm], policy, init_ids, max_chunks, cfg, round_
            )
            frames[arm] = rollout.images.astype(np.int16)
            length = float(rollout.episode_len.float().mean())
            results[arm].append((wall, world_model, length))
            print(
                f"round {round_} {arm}: {wall:.1f} s, world model {world_model:.1f} s, "
                f"mean episode length {length:.1f}",
                flush=True,
            )
        if frames["eager"].shape == frames["compiled"].shape:
            gap = np.abs(frames["eager"] - frames["compiled"])
            frame_gap = max(frame_gap, int(gap.max()))
            mean_gap.append(float(gap.mean()))

    medians, lines, arms = summarize_arms(results, args.envs)
    ratio = medians["eager"] / medians["compiled"]
    lines.append(f"compiled warm-up rollouts: {', '.join(f'{s:.0f}' for s in warmup_s)} s")
    lines.append(
        f"observed frames, compiled against eager: mean |difference| "
        f"{statistics.mean(mean_gap) if mean_gap else float('nan'):.3f}, largest {frame_gap}"
    )
    lines.append(f"eager / compiled: {ratio:.2f}x")
    result = {
        "envs": args.envs,
        "threads": args.threads,
        "warmup_s": warmup_s,
        "arms": arms,
        "frame_gap_max": frame_gap,
        "frame_gap_mean": mean_gap,
        "eager_over_compiled": ratio,
    }
    harness.write(args, "compiled_rollout", result, "\n".join(lines))


if __name__ == "__main__":
    harness.main(main)
