# pyjobq toolchain. Everything runs offline except package registries (PyPI, npm, apt).
#   make setup       chromium, node_modules, .venv (each only when missing or stale)
#   make build       build/site: offline Pyodide distribution + pyjobq wheel + web/,
#                    and build/site/lite: a JupyterLite site (rebuilt when its inputs change)
#   make test        build, then CPython + pytest-pyodide tests, then Playwright tests, then
#                    the conformance suite in Chromium, Firefox and WebKit (make engines)
#   make engines     tests/engines: one suite in the three engines (Debian's firefox-esr and
#                    WebKitGTK beside chromium), WebKit under Xvfb
#   make check-core  pyjobq.core imports on the system CPython 3.11, without Pyodide
#   make typecheck   mypy --strict on pyjobq/, with Pyodide's Python API (pyodide-py) for the browser modules
#   make docs        build/docs: the API reference, generated from the docstrings (pdoc)
#   make demo|bench  node scripts/demo.mjs | scripts/bench.mjs against build/site

SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV      := .venv
VPY       := $(VENV)/bin/python
CHROMIUM  := /usr/bin/chromium
# The other engines, from Debian: Firefox ESR, and WebKitGTK's WebDriver with its MiniBrowser,
# which runs under Xvfb.
FIREFOX   := /usr/bin/firefox-esr
WEBKIT_DRIVER := /usr/bin/WebKitWebDriver
XVFB_RUN  := /usr/bin/xvfb-run
SYS_PY311 := $(firstword $(wildcard /usr/bin/python3.11) $(shell command -v python3.11) python3)
NPM_STAMP := node_modules/.pyjobq-npm-ci.stamp
VENV_STAMP := $(VENV)/.pyjobq-requirements.stamp
# pyodide-py requires Python 3.14 (Pyodide's own), so it is not installed into the venv: its pin
# in requirements-dev.txt is installed, without dependencies, where pyproject.toml's [tool.mypy]
# points mypy, which reads its types (nothing imports it).
PYODIDE_TYPES := build/typecheck/pyodide-py
PYODIDE_PY_PIN = $(shell sed -n 's/^\(pyodide-py==[^ ;]*\).*/\1/p' requirements-dev.txt)

# The first interpreter >= 3.12 that actually runs (a pyenv shim may exist without its version).
find_py312 = for c in "$$(command -v python3.12)" $(HOME)/.pyenv/versions/3.12*/bin/python3 "$$(command -v python3.13)" "$$(command -v python3)"; do \
	  [ -n "$$c" ] && [ -x "$$c" ] && "$$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo "$$c"; break; }; \
	done

.PHONY: check setup build test pytest e2e engines check-core lint typecheck docs demo bench soak clean distclean

setup: $(CHROMIUM) $(FIREFOX) $(WEBKIT_DRIVER) $(XVFB_RUN) $(NPM_STAMP) $(VENV_STAMP)

$(CHROMIUM):
	apt-get update -qq && apt-get install -y -qq chromium

$(FIREFOX) $(WEBKIT_DRIVER) $(XVFB_RUN) &:
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	  firefox-esr webkit2gtk-driver xvfb xauth

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

$(VENV_STAMP): requirements-dev.txt requirements-jupyterlite.txt
	@if ! [ -x $(VPY) ] || ! $(VPY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
	  py="$$($(find_py312))"; \
	  [ -n "$$py" ] || { echo "no Python >= 3.12 found (python3.12 or ~/.pyenv/versions/3.12*)" >&2; exit 1; }; \
	  echo "creating $(VENV) with $$py"; rm -rf $(VENV); "$$py" -m venv $(VENV); \
	fi
	$(VPY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -r requirements-jupyterlite.txt
	touch $@

build: setup
	$(VPY) scripts/build_site.py
	$(VPY) scripts/build_jupyterlite.py

# mypy and both suites always run so every summary prints; the target fails if any failed.
test: build check-core $(PYODIDE_TYPES)/.stamp
	@rc=0; \
	echo "== ruff (make lint) =="; \
	$(VPY) -m ruff check --no-cache || rc=1; \
	echo "== mypy --strict (make typecheck) =="; \
	$(VPY) -m mypy || rc=1; \
	echo "== pytest (CPython + pytest-pyodide in chromium) =="; \
	$(VPY) -m pytest tests -q || rc=1; \
	echo "== playwright test (tests/e2e) =="; \
	npx playwright test || rc=1; \
	echo "== conformance in three engines (tests/engines) =="; \
	$(XVFB_RUN) -a node tests/engines/run.mjs || rc=1; \
	exit $$rc

# The loop for a change (a few minutes): ruff, mypy and the CPython suite, no site build, no
# browser suite but the kit's own Chromium checks.
check: $(VENV_STAMP) $(PYODIDE_TYPES)/.stamp
	$(VPY) -m ruff check --no-cache
	$(VPY) -m mypy
	$(VPY) -m pytest tests -q --ignore=tests/browser

pytest: build
	$(VPY) -m pytest tests -q

e2e: build
	npx playwright test

engines: build
	$(XVFB_RUN) -a node tests/engines/run.mjs

# The core must import on plain CPython (no js, no pyodide): system 3.11, no venv.
check-core:
	env -u VIRTUAL_ENV -u PYTHONPATH $(SYS_PY311) -c "import pyjobq.core"
	@echo "pyjobq.core imports on $$($(SYS_PY311) --version)"

$(PYODIDE_TYPES)/.stamp: requirements-dev.txt | $(VENV_STAMP)
	rm -rf $(PYODIDE_TYPES)
	$(VPY) -m pip install --quiet --disable-pip-version-check --no-deps --ignore-requires-python \
	  --target $(PYODIDE_TYPES) "$(PYODIDE_PY_PIN)"
	touch $@

typecheck: $(VENV_STAMP) $(PYODIDE_TYPES)/.stamp
	$(VPY) -m mypy

lint: $(VENV_STAMP)
	$(VPY) -m ruff check --no-cache

docs: $(VENV_STAMP)
	rm -rf build/docs
	$(VPY) scripts/api_docs.py build/docs

demo: build
	node scripts/demo.mjs

# Full figures (minutes; a command, never a timed test). `make bench BENCH_ARGS=--smoke` for tiny sizes.
bench: build
	node scripts/bench.mjs $(BENCH_ARGS)

# The multi-tab simulation over many seeds (a command, never a timed test): prints seeds,
# violations and time. `make soak SOAK_SEEDS=2000` (or SOAK_SEEDS=2000 make soak) for fewer.
SOAK_SEEDS ?= 20000
soak: $(VENV_STAMP)
	SOAK_SEEDS=$(SOAK_SEEDS) $(VPY) scripts/soak.py

clean:
	rm -rf build .pytest_cache test-results playwright-report
	find . -name __pycache__ -type d -not -path './.venv/*' -not -path './node_modules/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) node_modules
