# Set-up and entry points. Every target installs what it needs into .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A CPU build of torch where there is no NVIDIA GPU; the default (CUDA) build otherwise.
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo "torch" || echo "torch==2.13.0")

.PHONY: install demo main smoke test lint bench-sim memory-plan-check clean

$(BIN)/wmrl: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(BIN)/wmrl

install: $(BIN)/wmrl

# The main job on the embedded default (Meta-World, no download, no GPU): co-evolution end to
# end; run it again to resume. `make smoke` runs every stage at toy size in a few minutes.
main demo: install
	MUJOCO_GL=egl $(BIN)/wmrl co-evolve --out runs/co-evolve

smoke: install
	MUJOCO_GL=egl $(BIN)/wmrl co-evolve --profile smoke --out runs/co-evolve-smoke

# TEST_WORKERS pytest-xdist workers (tests set torch to one thread each): 2 halves the suite's
# time on a 2-core machine; more where there are more cores and memory (about 2 GB a worker).
TEST_WORKERS ?= 2

test: install
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS)

lint: install
	$(BIN)/ruff check wmrl_cli tests benchmarks experiments
	$(BIN)/ruff format --check wmrl_cli tests benchmarks experiments

bench-sim: install
	MUJOCO_GL=egl $(BIN)/python benchmarks/sim_fps.py

# The memory plan against the code's own allocations at full size, on fake tensors (about a
# minute; a slow test): its table as docs/benchmarks.md shows it.
memory-plan-check: install
	$(BIN)/python -m pytest -q -s -m slow tests/memory/test_memory_plan_count.py -k full_size

clean:
	rm -rf $(VENV) runs .pytest_cache
