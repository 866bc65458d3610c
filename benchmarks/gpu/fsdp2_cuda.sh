#!/usr/bin/env bash
# One FSDP2 update of the tiny policy on 2 CUDA ranks (NCCL), as tests/training/test_sharding.py
# runs it on 2 gloo ranks: float32, bf16 compute, and LoRA with activation checkpointing
# (tests/helpers/sharding_worker.py). What a CPU cannot see: CPU tensors in an NCCL collective,
# NCCL's own teardown. Writes OUT/result_2_<variant>.pt and OUT/fsdp2.txt (each variant's loss
# and gradient norm). Usage: bash benchmarks/gpu/fsdp2_cuda.sh OUT (benchmarks/gpu/gpu_fullsize_device.sh
# --all runs it where the machine has 2 GPUs or more).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: fsdp2_cuda.sh OUT}"
mkdir -p "$out"
WMRL_SHARDING_DEVICE=cuda python3 -m torch.distributed.run --nproc_per_node 2 \
    -m tests.helpers.sharding_worker "$out" full bf16 lora
python3 - "$out" <<'PY' | tee "$1/fsdp2.txt"
import sys
from pathlib import Path

import torch

for variant in ("full", "bf16", "lora"):
    result = torch.load(Path(sys.argv[1]) / f"result_2_{variant}.pt", weights_only=False)
    print(variant, "losses", result["losses"], "grad norm", result["grad_norm"])
PY
