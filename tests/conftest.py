"""Shared fixtures: one ModelStore for the whole session, so each model loads once."""
from __future__ import annotations

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
