"""Shared fixtures: one ModelStore for the whole session, so each model loads once.

Where the tests are: tests/README.md maps every module of playground/ and strategies/ to the test files
that test it (a module's own tests are in tests/<layer>/test_<module>.py where that file exists), and
tests/project/test_test_names.py keeps that map true. Browser tests take ``browser``, ``url`` and ``page`` from here
(one Chromium and one app server per worker) and their page helpers from tests/browser.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

# One OpenMP thread here and in every process a test starts (benches, servers, other CPU kernels): the
# two workers keep both cores busy, and a process whose two OpenMP threads wait for a busy core spins;
# bench_exact --quick measured SmolLM2 decoding at 0.8 tokens/s so (3.5 min), against 20 on one thread (12 s).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
# the repository (``from tests.browser import ...``) and tests/ itself (the shared helpers beside this file,
# ``from page_events import call``), whichever folder a test file is in
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from playground.models import OFFLINE, ModelStore  # noqa: E402

TOY_MODELS = frozenset({"toy", "toy-small", "toy-think"})


def pytest_addoption(parser):
    parser.addoption("--toy-only", action="store_true",
                     help="make check: skip what loads a model beyond the toys, opens a browser or is marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: the CUDA path against the CPU (skips without a CUDA device; "
                                       "make gpu-check runs them)")
    config.addinivalue_line("markers", "slow: a minute or more in all (subprocesses: benches, other CPU kernels, "
                                       "app boots, pip's resolver; a conversion; sweeps of hundreds of cases); "
                                       "make check leaves it out")


# The files that take minutes start first, one on each worker, so that no worker starts one of them
# when the other has nothing left to do (make test runs a test file at a time on each of two workers).
LONG_FILES = ("test_cpu_capabilities.py", "test_bench.py")


# With an empty cache the first process that needs SmolLM2 or Gemma 3 converts it while every other one
# that needs it waits on the conversion lock with its core idle: in a cold run the two workers' first
# Gemma setups took 57 s each, one converting and the other waiting (their stacks, dumped at 40 s, show
# it). So under xdist the controller starts one background process as the session starts, which
# converts what is missing (SmolLM2 first), while the workers begin with the long files. A worker that
# needs a model before it is ready waits on the same lock; if the background process fails, the first
# worker to ask converts the model as before.
PRECONVERT = ("smollm2-135m", "gemma3-270m")
PRECONVERT_CODE = "import sys; from playground.models import ModelStore; s = ModelStore(); [s.get(k) for k in sys.argv[1:]]"


def unconverted(keys=PRECONVERT) -> list[str]:
    from playground.models import weights_cache
    from playground.models.store import converted_dir
    return [key for key in keys if not weights_cache.is_sealed(converted_dir(key))]


def pytest_sessionstart(session):
    config = session.config
    if hasattr(config, "workerinput") or config.getoption("--toy-only") or not getattr(config.option, "numprocesses", 0):
        return
    missing = unconverted()
    if missing:
        config.preconvert = subprocess.Popen([sys.executable, "-c", PRECONVERT_CODE, *missing], cwd=ROOT,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pytest_sessionfinish(session):
    proc = getattr(session.config, "preconvert", None)
    if proc is not None and proc.poll() is None:  # a short session: the conversion is not needed any more
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONG_FILES)  # stable: otherwise in file order
    if not config.getoption("--toy-only"):
        return
    for item in items:
        if "slow" in item.keywords or "cuda" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="make check: marked slow or cuda (make test runs it)"))
        elif {"browser", "page"} & set(getattr(item, "fixturenames", ())):  # the app server alone (url) runs
            item.add_marker(pytest.mark.skip(reason="make check: opens a browser (make test runs it)"))


@pytest.fixture(scope="session", autouse=True)
def toy_models_only(request):
    """Under --toy-only, a test that asks the store for an offline model beyond the toys is skipped
    there. Only the test's own thread can skip: another thread (a server's, a second visitor's) loads
    the model as usual."""
    if not request.config.getoption("--toy-only"):
        yield
        return
    original = ModelStore.use  # get() goes through use() too

    def use(self, key, progress=None):
        if key in OFFLINE and key not in TOY_MODELS and threading.current_thread() is threading.main_thread():
            pytest.skip(f"make check: loads {key} (make test runs it)")
        return original(self, key, progress)

    ModelStore.use = use
    yield
    ModelStore.use = original


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One intra-op thread: on two cores shared with a test server and a browser, OpenMP threads
    spinning while they wait for each other make a small model's step several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def store() -> ModelStore:
    return ModelStore("cpu")


@pytest.fixture(scope="session")
def toy(store):
    return store.get("toy")


@pytest.fixture(scope="session")
def toy_small(store):
    return store.get("toy-small")


@pytest.fixture(scope="session")
def smollm(store):
    return store.get("smollm2-135m")


@pytest.fixture(scope="session")
def gemma(store):
    return store.get("gemma3-270m")


def _browser_or_reason() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright)"
    from playground.tools.screenshots import chromium_path
    if chromium_path() is None:
        return "no Chromium at /usr/bin/chromium (apt-get install chromium)"
    return None


@pytest.fixture(scope="session")
def browser():
    """One Chromium per test worker, for every browser test; skipped where there is none, but never
    under CI=true."""
    reason = _browser_or_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests must run under CI=true: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    from playground.tools.screenshots import launch_browser
    with sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


@pytest.fixture(scope="session")
def url(store):
    """One app server per test worker, on the session's store (the toys loaded first): the browser tests'
    page, and the server gradio_client calls in test_api, test_grammar_views and test_untrusted_json."""
    from playground.ui.page import serve
    store.get("toy")
    demo, address = serve(store)
    yield address
    demo.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page(viewport={"width": 1500, "height": 1000})
    yield pg
    pg.close()
