# What judge_bench_set.sh and judge_candidates.sh share: their arguments, the run folders of one
# seed, and `run` (echo a command; run it unless --dry-run). Sourced, not run.
#   [RL=exact|simulator] bash SCRIPT [SEED] [RUNS] [--dry-run]
set -euo pipefail
SEED=${1:-0}
RUNS=${2:-runs}
DRY=${3:-}
WMRL=${WMRL:-wmrl}
PYTHON=${PYTHON:-python}
RL=${RL:-exact}
HERE=$(dirname "${BASH_SOURCE[0]}")
CE=$RUNS/ce-long-verified-s$SEED
STAGE=$CE/stage1/config.yaml
SET=$RUNS/judge-set-$RL-s$SEED

run() {
    echo "+ $*"
    if [ "$DRY" != "--dry-run" ]; then "$@"; fi
}
