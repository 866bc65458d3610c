#!/usr/bin/env bash
# benchmarks/gpu_fullsize.py on a lent GPU machine: the wheels carried in .whl/
# (benchmarks/device_wheels.sh, run beforehand where pip reaches a registry) installed into a
# temporary site folder ahead of the image's own packages, then the script with unbuffered
# output; then, for at most WM_TRAIN_S (75) seconds, benchmarks/wm_train_memory.py --gpu (a
# world model's training step measured beside its count and plan) into OUT/wm_train. Usage, in
# the device call (carry .whl, timeout_s 580): bash benchmarks/gpu_fullsize_device.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: gpu_fullsize_device.sh OUT}"
ls .whl/*.whl >/dev/null 2>&1 || { echo "no .whl/ wheels: run benchmarks/device_wheels.sh here and carry .whl" >&2; exit 2; }
site="$(mktemp -d)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
python3 benchmarks/gpu_fullsize.py --out "$out" || status=$?
timeout "${WM_TRAIN_S:-75}" python3 benchmarks/wm_train_memory.py --gpu --out "$out/wm_train" \
    || echo "wm_train_memory --gpu: exit $? (124: out of time; its rows so far are written)"
exit "$status"
