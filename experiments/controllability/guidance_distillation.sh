#!/usr/bin/env bash
# Does a one-pass student keep what action guidance gives? The dot world (wm_control.py), one
# thread, CPU-time budgets:
#   1. an autoencoder (200 steps), shared;
#   2. a teacher: the controllable recipe with action dropout 0.1, validated at guidance 2
#      (2 sampling steps, as the mw-* presets imagine), 15 CPU-minutes; the same run continued
#      5.2 CPU-minutes more (teacher-more), and 5.2 more again (teacher-more2: the budget of
#      teacher-more and its student together, trained as a teacher);
#   3. a student of each: train-wm's distillation (world_model.distill_guidance), 5 CPU-minutes;
#   4. each scored on 64 held-out episodes: the teachers at guidance 2 (two passes a step) and
#      1 (one pass, unguided), the students asked for guidance 2 (one pass); compare_scores.py
#      pairs them by episode against each teacher at guidance 2, and teacher-more's student
#      against teacher-more2 (one pass either way, equal CPU time): OUT/compare.md.
#
#   bash experiments/controllability/guidance_distillation.sh OUT
#
# About 90 minutes on one core; a step already done is skipped. The result: docs/results.md,
# "Action guidance distilled into one pass".
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: guidance_distillation.sh OUT" >&2
    exit 2
fi
out=$1
here=$(dirname "$0")
export OMP_NUM_THREADS=1
control() { python "$here/wm_control.py" --backend opensora --data "$out/dot-data" "$@"; }
recipe=(--set world_model.vae_init="$out/os-ae/world_model"
    --set world_model.action_tokens=true --set world_model.action_modulation=all
    --set world_model.train_shift=3 --set world_model.batch_size=8
    --set world_model.ema_decay=0.95 --set world_model.warmup_steps=20
    --set world_model.action_guidance=2.0)
teacher=("${recipe[@]}" --set world_model.lr=2e-3 --set world_model.action_dropout=0.1)
student() {  # student NAME TEACHER
    [ -f "$out/$1/world_model/model.safetensors" ] ||
        control --minutes 5 --out "$out/$1" "${recipe[@]}" --set world_model.lr=5e-4 \
            --init "$out/$2/world_model" --set world_model.distill_guidance=true
}
score() {  # score NAME MODEL GUIDANCE
    [ -f "$out/scores/$1/score.json" ] ||
        control --val-episodes 64 --out "$out/scores/$1" --score "$out/$2/world_model" \
            --set world_model.action_guidance="$3"
}
[ -f "$out/os-ae/world_model/model.safetensors" ] ||
    control --minutes 0.05 --vae-steps 200 --out "$out/os-ae"
[ -f "$out/teacher/world_model/model.safetensors" ] ||
    control --minutes 15 --out "$out/teacher" "${teacher[@]}"
continued() {  # continued NAME FROM: FROM's run resumed for 5.2 CPU-minutes more
    if [ ! -f "$out/$1/world_model/model.safetensors" ]; then
        rm -rf "${out:?}/$1"
        cp -r "$out/$2" "$out/$1"
        control --minutes 5.2 --resume --out "$out/$1" "${teacher[@]}"
    fi
}
continued teacher-more teacher
continued teacher-more2 teacher-more
student student teacher
student student-more teacher-more
score teacher-w2 teacher 2.0
score teacher-w1 teacher 1.0
score student student 2.0
score more-w2 teacher-more 2.0
score more-w1 teacher-more 1.0
score student-more student-more 2.0
score more2-w2 teacher-more2 2.0
score more2-w1 teacher-more2 1.0
s=$out/scores
python "$here/compare_scores.py" more-w2="$s/more-w2/score.json" more-w1="$s/more-w1/score.json" \
    student-more="$s/student-more/score.json" >"$out/compare.md"
echo >>"$out/compare.md"
python "$here/compare_scores.py" teacher-w2="$s/teacher-w2/score.json" \
    teacher-w1="$s/teacher-w1/score.json" student="$s/student/score.json" >>"$out/compare.md"
echo >>"$out/compare.md"
python "$here/compare_scores.py" student-more="$s/student-more/score.json" \
    more2-w1="$s/more2-w1/score.json" more2-w2="$s/more2-w2/score.json" >>"$out/compare.md"
cat "$out/compare.md"
