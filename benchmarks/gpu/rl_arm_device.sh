#!/usr/bin/env bash
# An RL arm on a lent GPU machine, from the kit benchmarks/gpu/rl_kit.py builds here (.gpu_rl:
# the stage's config and inputs, a trimmed Meta-World, MuJoCo), the wheels the image lacks
# (.whl: benchmarks/gpu/device_wheels.sh) and the EGL loaders (.gl: the device tool's README):
# installs them into a temporary site folder, then runs
#     wmrl train-policy --preset .gpu_rl/config.yaml --out RUN --seed SEED [ARGS...]
# with unbuffered output; OUT gets metrics.jsonl, config.yaml and eval/step_N.json. Usage, in
# the device call (carry .gpu_rl, .whl and .gl):
#
#     bash benchmarks/gpu/rl_arm_device.sh OUT SEED --steps 20 --set reward_model.refuted_calls=continue
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: rl_arm_device.sh OUT SEED [train-policy args]}"
seed="${2:?usage: rl_arm_device.sh OUT SEED [train-policy args]}"
shift 2
kit="${KIT:-.gpu_rl}"  # another kit folder: KIT=DIR
for need in "$kit/config.yaml" "$kit/metaworld.zip" .whl .gl; do
    [ -e "$need" ] || { echo "rl_arm_device.sh: no $need here: build it (benchmarks/gpu/rl_kit.py) and carry it" >&2; exit 2; }
done
for f in .gl/*.deb; do dpkg -x "$f" /; done  # the EGL loaders MuJoCo renders with
ldconfig
site="$(mktemp -d)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl "$kit"/wheels/*.whl
python3 -m zipfile -e "$kit/metaworld.zip" "$site"
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1 MUJOCO_GL=egl
if [ ! -e /usr/share/glvnd/egl_vendor.d/10_nvidia.json ]; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
# The run's folder stays on the machine; what a result needs comes back flat in OUT (the tool
# returns 8 files at most), also when LIMIT_S (default 540 s, inside a call's 600) stops the
# run: its metrics, its config and its evaluations (eval/step_N.json, what
# real_steps_to_gain.py reads).
run="$(mktemp -d)/run"
status=0
timeout "${LIMIT_S:-540}" python3 -m wmrl_cli train-policy --preset "$kit/config.yaml" \
    --out "$run" --seed "$seed" "$@" || status=$?
mkdir -p "$out/eval"
cp "$run/metrics.jsonl" "$run/config.yaml" "$out/" 2>/dev/null || true
cp "$run"/eval/step_*.json "$out/eval/" 2>/dev/null || true
[ "$status" = 124 ] && echo "rl_arm_device.sh: stopped at LIMIT_S=${LIMIT_S:-540} s; what it wrote is in $out"
exit "$status"
