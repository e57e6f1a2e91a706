# The two commands of the README. Each sets up .venv from requirements.lock first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test setup lint bench

$(BIN)/jpushare: requirements.lock pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(BIN)/jpushare

setup: $(BIN)/jpushare

run: setup
	$(BIN)/jpushare simulate --cluster examples/cluster.yaml --trace examples/trace.csv --out out/example

lint: setup
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

test: setup lint
	$(BIN)/pytest -q

bench: setup
	$(BIN)/python bench/bench_policy.py
