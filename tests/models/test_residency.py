"""The model store's memory budget: least recently used out, never a model in use, the default ones kept."""
from __future__ import annotations

import threading

import pytest
import torch

from playground.engine import Request, stream
from playground.models import ModelStore, model_bytes
from playground.serving.residency import GB, MemoryBudget, OverBudget

UNIT = 4096 * 4  # bytes of one fake model: 4096 float32 weights


class FakeStore(ModelStore):
    """Hub-id keys load as small linear layers of UNIT bytes; records every load."""

    def __init__(self, budget: MemoryBudget, keep: tuple[str, ...] = ()) -> None:
        super().__init__("cpu", budget=budget, keep=keep)
        self.loads: list[str] = []

    def _load(self, spec, progress):
        self.loads.append(spec.key)
        return torch.nn.Linear(64, 64, bias=False), None


def test_model_bytes_counts_tied_weights_once():
    lin = torch.nn.Linear(64, 64, bias=False)
    tied = torch.nn.ModuleDict({"a": lin, "b": lin})
    assert model_bytes(lin) == model_bytes(tied) == UNIT


def test_memory_stays_within_a_byte_budget_and_the_least_recent_goes_first():
    store = FakeStore(MemoryBudget(max_bytes=2.5 * UNIT))
    for i in range(10):
        store.get(f"org/m{i}")
        assert store.residency.total() <= 2.5 * UNIT and len(store.loaded()) <= 2
    assert store.loaded() == ["org/m8", "org/m9"]
    store.get("org/m8")  # used again: now m9 is the least recent
    store.get("org/m10")
    assert store.loaded() == ["org/m8", "org/m10"]
    assert store.loads == [f"org/m{i}" for i in range(11)]  # each loaded once, m8 reused


def test_kept_models_are_never_unloaded():
    store = FakeStore(MemoryBudget(max_models=2), keep=("org/default",))
    store.get("org/default")
    for i in range(5):
        store.get(f"org/m{i}")
    assert store.loaded() == ["org/default", "org/m4"]


def test_a_model_in_use_by_another_thread_is_never_unloaded():
    store = FakeStore(MemoryBudget(max_models=2))
    holding, release = threading.Event(), threading.Event()
    seen: list[torch.nn.Module] = []

    def request_a() -> None:
        with store.use("org/a") as lm:
            seen.append(lm.model)
            holding.set()
            release.wait(30)
            seen.append(lm.model)

    a = threading.Thread(target=request_a)
    a.start()
    assert holding.wait(30)
    for i in range(6):  # another visitor's requests cycle through models while A decodes
        store.get(f"org/b{i}")
        assert "org/a" in store.loaded() and len(store.loaded()) <= 2
    release.set()
    a.join(30)
    assert seen[0] is seen[1] and store.residency.entries["org/a"].users == 0
    store.get("org/c")  # A has finished: now it is the least recently used and goes
    assert store.loaded() == ["org/b5", "org/c"]


def test_no_room_beside_models_in_use_is_refused_with_the_numbers_and_then_served():
    store = FakeStore(MemoryBudget(max_bytes=1.5 * UNIT))
    with store.use("org/a"):
        with pytest.raises(OverBudget, match=r"memory budget is 0\.025 MB.*held by models in use or kept loaded "
                                             r"\(org/a\)"):
            store.get("org/b")
        assert store.loaded() == ["org/a"]
    assert store.get("org/b") is not None and store.loaded() == ["org/b"]


def test_the_engine_holds_every_model_of_a_request_while_it_streams():
    store = ModelStore("cpu", budget=MemoryBudget(max_models=2), keep=())
    runs = stream(store, Request("toy", "speculative", "1 2", {"draft": "toy-small"}, max_new_tokens=6))
    next(runs)
    assert {k: e.users for k, e in store.residency.entries.items()} == {"toy": 1, "toy-small": 1}
    refused: list[Exception] = []

    def other_visitor() -> None:
        try:
            store.get("smollm2-135m")
        except OverBudget as err:
            refused.append(err)

    other = threading.Thread(target=other_visitor)
    other.start()
    other.join(60)
    assert len(refused) == 1
    assert sorted(store.loaded()) == ["toy", "toy-small"]
    runs.close()  # Stop, or the end of the run
    assert {e.users for e in store.residency.entries.values()} == {0}


def test_the_budget_reads_the_environment(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MEMORY_GB", "3")
    monkeypatch.setenv("PLAYGROUND_MAX_MODELS", "4")
    assert MemoryBudget.from_env(None) == MemoryBudget(3 * GB, 4)
    monkeypatch.delenv("PLAYGROUND_MEMORY_GB")
    monkeypatch.delenv("PLAYGROUND_MAX_MODELS")
    assert MemoryBudget.from_env(8 * 10**9) == MemoryBudget(4 * GB, None)  # half the device's memory
    monkeypatch.setenv("PLAYGROUND_MAX_MODELS", "two")
    with pytest.raises(ValueError, match="PLAYGROUND_MAX_MODELS must be a number >= 0 .*got 'two'"):
        MemoryBudget.from_env(None)
