#!/usr/bin/env bash
# One arm of "Real steps to gain" on the CPU, resumable across sessions: RL in imagination from
# a stage's config (its world model, judge, starts and recipe), 20 steps, a checkpoint and an
# evaluation every 5, the world model compiled (docs/benchmarks.md: 1.33x a rollout).
#
#   bash experiments/real-steps-to-gain/arm_on_cpu.sh RUN SEED [--set KEY=VALUE ...]
#
# The same command again resumes RUN from its last checkpoint. The going-on arm of 2026-11-30:
#   bash experiments/real-steps-to-gain/arm_on_cpu.sh runs/continue-cpu-s0 0 \
#       --set reward_model.source=verified --set reward_model.refuted_calls=continue
# STAGE (default runs/ce-long-verified-s0/stage1/config.yaml) names another stage.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: arm_on_cpu.sh RUN SEED [--set KEY=VALUE ...]" >&2
    exit 2
fi
run=$1 seed=$2
shift 2
stage=${STAGE:-runs/ce-long-verified-s0/stage1/config.yaml}
if [ ! -f "$stage" ]; then
    echo "error: no stage config $stage (expected a co-evolve run's stage1/config.yaml; STAGE=...)" >&2
    exit 2
fi
export MUJOCO_GL=${MUJOCO_GL:-egl}
exec wmrl train-policy --preset "$stage" --out "$run" --seed "$seed" --steps 20 \
    --set training.save_every=5 --set training.keep_checkpoints=0 \
    --set compile_world_model=true "$@"
