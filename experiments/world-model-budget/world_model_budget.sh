#!/usr/bin/env bash
# Is the long profile's world model still improving at the end of its 2,400 denoiser steps, and
# does its action guidance distil into one pass? From a co-evolve run whose world model kept
# every checkpoint (experiments/real-steps-to-gain/seed_on_cpu.sh sets
# world_model.keep_checkpoints=0):
#   1. its validation curve (train-wm's own held-out episodes, every 400 steps): curve.md/png;
#   2. its checkpoints at 600, 1,200, 1,800 and 2,400 steps, with their EMA weights, sampled as
#      imagination samples them (2 steps, action guidance 2), on the base policy's own real
#      rollouts (RUN/data/reward_real, which it never trained on), 4 per task: PSNR and the
#      action gap against another episode's actions and against random ones, each paired by
#      episode with step 2,400: checkpoints.md;
#   3. a one-pass student of the final model (train-wm --init ... distill_guidance, lr 5e-4,
#      STUDENT_STEPS steps on the same data), scored beside the teacher at guidance 2 (two
#      passes a step) and 1 (one pass, unguided), paired with the guided teacher: student.md.
#
#   bash experiments/world-model-budget/world_model_budget.sh RUN OUT [STUDENT_STEPS]
#
# A step already done is skipped. The result: docs/results.md, "How long to train the world
# model".
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: world_model_budget.sh RUN OUT [STUDENT_STEPS]" >&2
    exit 2
fi
run=$1 out=$2 student_steps=${3:-300}
here=$(dirname "$0")
wm=$run/wm_base
if [ ! -f "$wm/world_model/model.safetensors" ]; then
    echo "error: $wm holds no trained world model (expected a co-evolve run past world_model)" >&2
    exit 2
fi
export MUJOCO_GL=${MUJOCO_GL:-egl}
mkdir -p "$out"
score=(python "$here/score_checkpoints.py" --preset "$run/config.yaml" --data "$run/data/reward_real"
    -n 4 --alternatives other,random)
python "$here/wm_curve.py" "$(basename "$run")=$wm" --metric psnr@8 --metric psnr@32 \
    --metric moving_psnr@32 --metric action_gap@8 --metric action_gap@32 \
    --metric action_gap_random@32 --out "$out/curve"
[ -f "$out/checkpoints/scores.md" ] ||
    "${score[@]}" --run "$wm" --step 600 --step 1200 --step 1800 --step 2400 --out "$out/checkpoints"
[ -f "$out/student/world_model/model.safetensors" ] ||
    wmrl train-wm --preset "$run/config.yaml" --data "$run/data/base_merged" --init "$wm" \
        --steps "$student_steps" --set world_model.distill_guidance=true \
        --set world_model.lr=5e-4 --set world_model.val_every=100 \
        --set world_model.save_every=100 --out "$out/student"
[ -f "$out/compare/scores.md" ] ||
    "${score[@]}" --model "student=$out/student/world_model" --model "teacher-g1=$wm/world_model@g1" \
        --model "teacher-g2=$wm/world_model@g2" --out "$out/compare"
cat "$out/checkpoints/scores.md" "$out/compare/scores.md"
