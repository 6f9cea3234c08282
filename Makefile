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
# cached wheel works on any x86-64 with AVX2. pip reuses a cached wheel whatever CMAKE_ARGS say, so
# an override here takes effect on a first build only: `make llama-native` rebuilds for this CPU.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF

# Test services: PostgreSQL and Redis on this machine (override to point elsewhere).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/concord
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15

.PHONY: demo test venv models lint audit docs llama-native

# Install stamps: the demo needs only the project and its runtime dependencies; the tests (and lint,
# audit) need the `dev`, `serve` and `docs` extras too (tests/test_docs.py builds the site). `serve` is llama-cpp-python, which
# compiles llama.cpp from its sdist (about 8 CPU-minutes on a first install): only the serving-engine
# tests use it, so `make demo` never builds it.
$(BIN)/.installed-base: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH_SPEC)"
	$(PIP) -e .
	@touch $@

$(BIN)/.installed-test: $(BIN)/.installed-base
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) -e '.[dev,serve,docs]'
	@touch $@

$(BIN)/.installed-docs: $(BIN)/.installed-base
	$(PIP) -e '.[docs]'
	@touch $@

## make venv: everything the tests, lint and audit need (the demo's packages, `dev`, `serve`, `docs`)
venv: $(BIN)/.installed-test

models: $(BIN)/.installed-base
	$(BIN)/python manage.py fetch_models

## make llama-native: rebuild llama-cpp-python for this CPU (AVX-512 and AVX512-BF16 kernels where it
## has them: the llamacpp rollout engine's bf16 measured 1.3-1.5x faster at batches of 16-64), bypassing pip's wheel
## cache; about 8 CPU-minutes. The build runs only on CPUs with this one's instructions.
llama-native: $(BIN)/.installed-test
	CMAKE_ARGS="-DGGML_NATIVE=ON" $(PIP) --no-cache-dir --force-reinstall --no-deps \
		--no-binary llama-cpp-python \
		"llama-cpp-python==$$($(BIN)/python -c 'import llama_cpp; print(llama_cpp.__version__)')"

## make demo: install, migrate, fetch the models, load the demo project, serve on http://127.0.0.1:8000
## (each stage prints how long it took; the `dev` and `serve` extras are not installed)
demo: export CONCORD_STAGE_T0 := $(shell date +%s)
demo:
	@scripts/stage.sh "install (torch CPU wheel, the project)" $(MAKE) --no-print-directory $(BIN)/.installed-base
	@# The models are fetched (downloaded, converted) while the database is migrated and loaded: the
	@# two need nothing from each other, and rundemo starts once both are done.
	@scripts/stage.sh "fetch the models" $(BIN)/python manage.py fetch_models & fetch=$$!; \
	  scripts/stage.sh "migrate" $(BIN)/python manage.py migrate --no-input \
	  && scripts/stage.sh "load the demo project" $(BIN)/python manage.py load_demo; \
	  status=$$?; wait $$fetch || exit 1; exit $$status
	@echo "[demo] starting the web server and the two workers (since the start: $$(( $$(date +%s) - $$CONCORD_STAGE_T0 )) s)"
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

## make docs: the reference pages generated from the code, then the MkDocs site (strict: a broken link
## or a page missing from the navigation fails) into site/
docs: $(BIN)/.installed-docs
	$(BIN)/python scripts/gen_docs_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
