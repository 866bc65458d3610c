#!/usr/bin/env bash
# The judge benchmark's candidate verdicts for one seed (docs/results.md, "The judge benchmark"),
# after experiments/judge-benchmark/judge_bench_set.sh built the set:
#   refined  today's judge fine-tuned on its own data plus the set's base and rl05 episodes,
#            labelled by their replays: what RL has paid for by step 5 (the judge refined
#            online, candidate (b) of the result issue);
#   clip     WMPO's VideoMAE clip classifier (`train-reward --kind videomae`, 8-frame clips at
#            64 px) trained from scratch on the same data: a temporal judge (candidate (c));
#   latent   a success head on the world model's own frozen VAE latents (`train-reward --kind
#            latent --world-model WM`) trained on the same data: it judges what the world
#            model believes, not the pixels it renders (candidate (a));
# then every verdict scored on the episodes of the policies none of them saw (rl10, rl20):
# today's judge, its per-task thresholds, the three candidates, each per task too; and when
# they call (call_timing.py).
#
#   [RL=exact|simulator] bash experiments/judge-benchmark/judge_candidates.sh [SEED] [RUNS]
#       [--dry-run]
source "$(dirname "$0")/common.sh"
REFINED=$RUNS/judge-refined-$RL-s$SEED
CLIP=$RUNS/judge-clip-$RL-s$SEED
LATENT=$RUNS/judge-latent-$RL-s$SEED
LATENT_STEPS=${LATENT_STEPS:-1500}
REFINE_STEPS=${REFINE_STEPS:-1000}
CLIP_STEPS=${CLIP_STEPS:-1500}
CLIP_SIZES="{hidden_size: 64, num_hidden_layers: 4, num_attention_heads: 4, \
intermediate_size: 256, patch_size: 8, num_frames: 8}"

if [ "$DRY" = "--dry-run" ] && [ ! -f "$STAGE" ]; then
    RM="<reward_model.path of $STAGE>"
    WM="<world_model.path of $STAGE>"
    OWN=("<the data $RM was trained on>")
else
    RM=$("$PYTHON" -c "import sys, yaml; \
        print(yaml.safe_load(open(sys.argv[1]))['reward_model']['path'])" "$STAGE")
    WM=$("$PYTHON" -c "import sys, yaml; \
        print(yaml.safe_load(open(sys.argv[1]))['world_model']['path'])" "$STAGE")
    # the stores today's judge was trained on, as its metrics record them
    mapfile -t OWN < <("$PYTHON" -c "import json, sys; from pathlib import Path; \
        rm = Path(sys.argv[1]); rm = rm / 'reward_model' if (rm / 'reward_model').is_dir() else rm; \
        print('\n'.join(json.loads((rm / 'reward_metrics.json').read_text())['data']))" "$RM")
fi
DATA=()
for store in "${OWN[@]}" "$SET/base" "$SET/rl05"; do DATA+=(--data "$store"); done

run "$WMRL" train-reward --preset "$STAGE" --init "$RM" "${DATA[@]}" --steps "$REFINE_STEPS" \
    --seed "$SEED" --out "$REFINED"
run "$WMRL" train-reward --preset "$STAGE" --kind videomae "${DATA[@]}" --steps "$CLIP_STEPS" \
    --set "reward_model.videomae=$CLIP_SIZES" --set reward_model.image_size=64 \
    --seed "$SEED" --out "$CLIP"
run "$WMRL" train-reward --preset "$STAGE" --kind latent --world-model "$WM" "${DATA[@]}" \
    --steps "$LATENT_STEPS" --seed "$SEED" --out "$LATENT"
run "$PYTHON" "$HERE/judge_bench.py" score --set "$SET" --preset "$STAGE" --only rl10,rl20 \
    --judge "today=$RM" --judge "per-task=$RM@task" --judge "refined=$REFINED" \
    --judge "refined-per-task=$REFINED@task" --judge "clip=$CLIP" \
    --judge "clip-per-task=$CLIP@task" \
    --judge "latent=$LATENT" --judge "latent-per-task=$LATENT@task" \
    --out "$SET/candidates.json"
# when each verdict calls: its misses early or uncalled, and what going on past a refuted call
# would pay and spend (docs/results.md, "The judge benchmark")
run "$PYTHON" "$HERE/call_timing.py" --set "$SET" --preset "$STAGE" --only rl10,rl20 \
    --judge "today=$RM" --judge "per-task=$RM@task" --judge "refined-per-task=$REFINED@task" \
    --judge "clip=$CLIP" --judge "clip-per-task=$CLIP@task" \
    --judge "latent-per-task=$LATENT@task" --out "$SET/timing.json" \
    --markdown "$SET/timing.md" --plot "$SET/timing.png"
