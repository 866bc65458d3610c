#!/usr/bin/env bash
# One seed of the result issue's three, from a clone, in one resumable command: the long
# profile's data, world model and judge; RL in imagination under the verified verdict that goes
# on after a refuted call (reward_model.refuted_calls=continue), 10 steps, evaluated at 5 and
# 10 on the base's 200 held-out episodes; and RL in the real simulator from the same base, as
# many steps, evaluated the same way (coevolve.simulator_control). Both arms' real steps sit in
# the run's report (the imagined arm's count its data). The behaviour-cloning anchor's recipe
# (seed 2 on): add --set coevolve.bc_anchor=0.5 --set algorithm.bc_batch_size=128, and --update
# on a run begun without it (its data, world model and judge are kept; RL runs with the anchor).
#
#   bash experiments/real-steps-to-gain/seed_on_cpu.sh SEED [RUNS] [--set KEY=VALUE ...]
#
# On the 2-core CPU: about 155 minutes of data, world model and judge, then about 10 minutes a
# step of imagination (the world model compiled) and 2 of the simulator: two sessions, the same
# command resuming where the first stopped. Each seed's base policy is its own, so read the seeds
# together with one base per seed:
#   python experiments/real-steps-to-gain/real_steps_to_gain.py \
#       --base runs/ce-long-continue-s1/eval/base,runs/ce-long-continue-s2/eval/base \
#       --arm continue=runs/ce-long-continue-s1/stage1,runs/ce-long-continue-s2/stage1 \
#       --arm simulator=runs/ce-long-continue-s1/simulator_control,runs/ce-long-continue-s2/simulator_control \
#       --out runs/gain-seeds
set -euo pipefail
if [ $# -lt 1 ] || [[ $1 == -* ]]; then
    echo "usage: seed_on_cpu.sh SEED [RUNS] [--set KEY=VALUE ...]" >&2
    exit 2
fi
seed=$1
shift
runs=runs
if [ $# -gt 0 ] && [[ $1 != -* ]]; then
    runs=$1
    shift
fi
export MUJOCO_GL=${MUJOCO_GL:-egl}
exec wmrl co-evolve --profile long --seed "$seed" --out "$runs/ce-long-continue-s$seed" \
    --set reward_model.source=verified --set reward_model.refuted_calls=continue \
    --set coevolve.refinements=0 --set coevolve.frozen_control=false \
    --set coevolve.videos=false --set training.steps=10 --set compile_world_model=true \
    --set world_model.keep_checkpoints=0 "$@"
