# Concord: the two commands a newcomer types are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU wheel of torch, installed before anything that depends on torch (a plain `torch` would pull
# a multi-GB CUDA build). Override on a GPU machine, e.g. TORCH_SPEC='torch==2.13.0'.
TORCH_SPEC ?= torch==2.13.0
# The demo's port: `make demo PORT=8001` when 8000 is taken.
PORT ?= 8000
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
# llama-cpp-python (the `serve` extra) compiles llama.cpp from its sdist; not tuned to this CPU, so a
# cached wheel works on any x86-64 with AVX2. Override, e.g. LLAMA_CMAKE_ARGS='-DGGML_NATIVE=ON'.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF

# Test services: PostgreSQL and Redis on this machine (override to point elsewhere).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/concord
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15

.PHONY: demo test venv models lint audit

$(BIN)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH_SPEC)"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) -e '.[dev,serve]'
	@touch $@

venv: $(BIN)/.installed

models: venv
	$(BIN)/python manage.py fetch_models

## make demo: install, migrate, fetch the models, load the demo project, serve on http://127.0.0.1:8000
demo: venv
	$(BIN)/python manage.py migrate --no-input
	$(BIN)/python manage.py fetch_models
	$(BIN)/python manage.py load_demo
	$(BIN)/python manage.py rundemo --addr 127.0.0.1:$(PORT)

## make test: the whole suite against PostgreSQL and Redis (browser tests in headless Chromium)
test: venv
	@scripts/ensure_services.sh
	@scripts/ensure_chromium.sh || true
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) $(BIN)/python manage.py fetch_models
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## make audit: known vulnerabilities in the installed packages (pip-audit), and bandit over the apps
audit: venv
	$(BIN)/python scripts/audit_dependencies.py
	$(BIN)/bandit -c pyproject.toml -q -r config common annotation training monitoring
