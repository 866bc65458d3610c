#!/usr/bin/env bash
# The judge benchmark's set for one seed, from a clone, in one command (docs/results.md, "The
# judge benchmark"):
#   1. the long profile's data, world model and judge (verified imagination's stage 1, cut to one
#      RL step: what the set needs is its config, the inputs RL in imagination reads);
#   2. the exact verdict's RL from the same base, 20 steps, checkpoints at 5, 10, 15 and 20
#      (`reward_model.source=simulator`: it explores the tasks the judge misses); or, with
#      RL=simulator, the same RL in the real simulator (`--env simulator`), about 105 s a step
#      (alone on 2 cores) where the exact verdict takes 5.5-6 minutes: the lever that fits the
#      set in 2 hours on a CPU, its policies improved by real rewards, not imagined ones;
#   3. the set: the base policy and the RL checkpoints of steps 5, 10 and 20 rolled in the world
#      model from the reset set's starts, 16 per task, labelled by the simulator
#      (experiments/judge-benchmark/judge_bench.py build; sampling seed 1000, never a training seed;
#      32 episodes a batch, 10% faster than the stage's 10 on 2 cores);
#   4. today's judge and the per-task threshold scored on it (judge_bench.py score).
# Each step resumes where it stopped when the script is run again. On the 2-core CPU alone:
# about 3 h for 1 (measured 2026-11-29), 20 x 5.5-6 minutes for 2 (RL=simulator: 35 minutes,
# 2,099 s), the set about 87 minutes (640 imagined episodes labelled at 7.4 a minute).
#
#   [RL=exact|simulator] bash experiments/judge-benchmark/judge_bench_set.sh [SEED] [RUNS]
#       [--dry-run]
source "$(dirname "$0")/common.sh"
EXACT=$RUNS/$RL-long-s$SEED

run "$WMRL" co-evolve --profile long --seed "$SEED" --out "$CE" \
    --set reward_model.source=verified --set training.steps=1 \
    --set coevolve.refinements=0 --set coevolve.simulator_control=false
case $RL in
    exact) WHERE=(--set reward_model.source=simulator) ;;
    # the stage's world model, judge and verdict are imagination's: the simulator uses none
    simulator) WHERE=(--env simulator --set world_model.path=null --set reward_model.path=null
        --set reward_model.source=model --set reward_model.audit_with_simulator=false) ;;
    *) echo "error: RL=$RL: expected exact or simulator" >&2; exit 2 ;;
esac
run "$WMRL" train-policy --preset "$STAGE" --out "$EXACT" --seed "$SEED" --steps 20 \
    "${WHERE[@]}" --set training.save_every=5 \
    --set training.keep_checkpoints=0 --set algorithm.eval_trials=0

# What stage 1 read: its world model, reset set and judge (resolved paths in its config).
read_config() {
    if [ "$DRY" = "--dry-run" ] && [ ! -f "$STAGE" ]; then echo "<$1 of $STAGE>"; return; fi
    "$PYTHON" -c "import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); \
        s, k = sys.argv[2].split('.'); print(c[s][k])" "$STAGE" "$1"
}
WM=$(read_config world_model.path)
RESET=$(read_config world_model.reset_set)
RM=$(read_config reward_model.path)
POLICY=$(read_config policy.name)
STEP=$EXACT/checkpoints/step_0000
run "$PYTHON" "$HERE/judge_bench.py" build --world-model "$WM" --reset-set "$RESET" \
    --policy "base=$POLICY" --policy "rl05=${STEP}05/model" --policy "rl10=${STEP}10/model" \
    --policy "rl20=${STEP}20/model" --preset "$STAGE" -n 16 --seed 1000 \
    --set simulator.num_envs=32 --out "$SET"
run "$PYTHON" "$HERE/judge_bench.py" score --set "$SET" --preset "$STAGE" \
    --judge "today=$RM" --judge "per-task=$RM@task" --out "$SET/scores.json"
