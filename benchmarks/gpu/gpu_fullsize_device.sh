#!/usr/bin/env bash
# benchmarks/gpu_fullsize.py on a lent GPU machine: the wheels carried in .whl/
# (benchmarks/gpu/device_wheels.sh, run beforehand where pip reaches a registry; WHEELS names
# another folder) installed into a temporary site folder ahead of the image's own packages,
# then the measurements with unbuffered output. Usage, in the device call (carry .whl):
#
#     bash benchmarks/gpu/gpu_fullsize_device.sh OUT [--all]
#
# The first pass (about 5 minutes; timeout_s 330) measures what the memory plan needs most:
# gpu_fullsize.py --pass first (two GRPO steps, the LoRA and bf16 micro-batches, imagination at
# its smallest count), then for at most WM_TRAIN_S (40) seconds benchmarks/wm_train_memory.py
# --gpu (a world model's training step measured beside its count and plan) into OUT/wm_train.
# --all (timeout_s 600) goes on with the rest: gpu_fullsize.py --pass rest into OUT/rest and,
# on a machine with 2 GPUs or more, a 2-rank FSDP train-policy run on CUDA (NCCL) at tiny size
# into OUT/fsdp2 (benchmarks/gpu/fsdp2_cuda.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: gpu_fullsize_device.sh OUT [--all]}"
all=0
case "${2:-}" in
    "") ;;
    --all) all=1 ;;
    *) echo "gpu_fullsize_device.sh: unknown option ${2} (expected --all)" >&2; exit 2 ;;
esac
wheels="${WHEELS:-.whl}"
ls "$wheels"/*.whl >/dev/null 2>&1 || { echo "no $wheels/ wheels: run benchmarks/gpu/device_wheels.sh here and carry .whl" >&2; exit 2; }
site="$(mktemp -d)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$wheels"/*.whl
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
python3 benchmarks/gpu_fullsize.py --pass first --out "$out" || status=$?
timeout "${WM_TRAIN_S:-40}" python3 benchmarks/wm_train_memory.py --gpu --out "$out/wm_train" \
    || echo "wm_train_memory --gpu: exit $? (124: out of time; its rows so far are written)"
if [ "$all" = 1 ]; then
    python3 benchmarks/gpu_fullsize.py --pass rest --out "$out/rest" || status=$?
    gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
    if [ "${gpus:-0}" -ge 2 ]; then
        bash benchmarks/gpu/fsdp2_cuda.sh "$out/fsdp2" || status=$?
    else
        echo "fsdp2: skipped, ${gpus:-0} GPU(s) here (a 2-rank NCCL run needs 2)"
    fi
fi
exit "$status"
