#!/usr/bin/env bash
# Wheels a lent GPU machine lacks for benchmarks/gpu_fullsize.py, downloaded here into .whl/
# (ignored by git; about 20 MB, carried with the working tree). The lent image's Python 3.12
# has torch, accelerate, peft, safetensors and an older transformers (5.17: no
# activation_checkpointing_enable), but no diffusers or pydantic (docs/benchmarks.md, "Full
# size on one GPU"). Versions: the project's, as installed by `make install`.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    transformers==5.24.0 diffusers==0.42.1 pydantic==2.14.4 pydantic_core==2.50.5 \
    annotated-types==0.8.0 typing-inspection==0.4.5
du -sh .whl
