#!/usr/bin/env bash
# benchmarks/gpu_fullsize.py on a lent GPU machine: the wheels carried in .whl/
# (benchmarks/device_wheels.sh, run beforehand where pip reaches a registry) installed into a
# temporary site folder ahead of the image's own packages, then the script with unbuffered
# output. Usage, in the device call (carry .whl): bash benchmarks/gpu_fullsize_device.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: gpu_fullsize_device.sh OUT}"
ls .whl/*.whl >/dev/null 2>&1 || { echo "no .whl/ wheels: run benchmarks/device_wheels.sh here and carry .whl" >&2; exit 2; }
site="$(mktemp -d)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 python3 benchmarks/gpu_fullsize.py --out "$out"
