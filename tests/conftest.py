"""Shared fixtures: one ModelStore for the whole session, so each model loads once."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from playground.models import ModelStore  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: the CUDA path against the CPU (skips without a CUDA device; "
                                       "make gpu-check runs them)")


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
    """One app server per test worker, on the session's store (the toys loaded first)."""
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
