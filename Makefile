# The README's two commands, `make run` and `make test`, each set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
LINT_PATHS := src tests bench scripts

.PHONY: run test setup lint services bench simulate

$(BIN)/jpushare: requirements.lock pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(BIN)/jpushare

setup: $(BIN)/jpushare

# The service on its embedded defaults: SQLite, local executor, examples/cluster.yaml.
run: setup
	$(BIN)/jpushare serve --demo

# The simulator on the shipped example (no service needed).
simulate: setup
	$(BIN)/jpushare simulate --cluster examples/cluster.yaml --trace examples/trace.csv --out out/example

lint: setup
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy
	$(BIN)/lint-imports --no-logo

# PostgreSQL (for the store tests) and the fake Slurm cluster (for the Slurm tests).
services:
	bash scripts/ensure-services.sh

# Four workers on two cores: most tests wait on processes, PostgreSQL or Slurm, not the CPU
# (tests/conftest.py keeps each Slurm cluster's tests on one worker). TEST_WORKERS=0: serial.
# Then the tests marked `quiet` (timing measurements), alone on the machine.
TEST_WORKERS ?= 4

test: setup lint services
	$(BIN)/pytest -q -n $(TEST_WORKERS) -m "not quiet" --durations=15
	$(BIN)/pytest -q -m quiet

bench: setup
	$(BIN)/python bench/bench_policy.py
