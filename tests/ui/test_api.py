"""The app as a script sees it: launched on 127.0.0.1, called with gradio_client by api_name."""
from __future__ import annotations

import json
import threading

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.engine import Request, run
from playground.ui.controls import strategies_in_order
from playground.ui.page import launch_kwargs
from strategies.registry import all_strategies

# gradio's queue statistics use pandas options that pandas 3 deprecates; not ours to fix
pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]


@pytest.fixture(scope="module")
def app(url):
    """The session's app server (tests/conftest.py)."""
    return url


@pytest.fixture(scope="module")
def client(app):
    return Client(app, verbose=False)


def call(client: Client, strategy: str, params: dict, seed: int = 0, max_new_tokens: int = 12,
         model: str = "toy") -> tuple[str, dict]:
    text, trace_json = client.predict(model=model, strategy=strategy, prompt="1 2", params=json.dumps(params),
                                      seed=seed, max_new_tokens=max_new_tokens, system="", chat="auto",
                                      api_name="/generate")
    return text, json.loads(trace_json)


def test_generate_greedy_returns_the_text_and_the_trace(client, store):
    text, trace = call(client, "greedy", {})
    ref = run(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=12))
    assert text == ref.text == trace["text"]
    assert trace["tokens"] == ref.to_dict()["tokens"] and trace["steps"] == ref.to_dict()["steps"]
    assert trace["strategy"] == "greedy" and trace["model"] == "toy"


def test_generate_sampling_is_seed_deterministic(client, store):
    params = {"temperature": 1.5, "top_k": 5, "top_p": 0.9}
    first = call(client, "sampling", params, seed=11)
    again = call(client, "sampling", params, seed=11)
    ref = run(store, Request("toy", "sampling", "1 2", params, seed=11, max_new_tokens=12)).to_dict(timing=False)
    assert first[0] == again[0] == ref["text"]
    strip = lambda t: {k: v for k, v in t.items() if k != "timing"}  # noqa: E731
    assert strip(first[1]) == strip(again[1]) == ref
    assert first[1]["params"]["top_p"] == 0.9


def test_outputs_stream_through_submit(client):
    job = client.submit(model="toy", strategy="sampling", prompt="1 2", params="{}", seed=4, max_new_tokens=12,
                        system="", chat="auto", api_name="/generate")
    job.result(timeout=60)
    outputs = job.outputs()
    assert len(outputs) >= 3  # one per token, then the trace
    texts = [text for text, _ in outputs]
    assert all(a == b[:len(a)] for a, b in zip(texts, texts[1:]))  # the text only grows
    assert all(trace == "" for _, trace in outputs[:-1])
    final = json.loads(outputs[-1][1])
    assert final["text"] == texts[-1] and len(outputs) - 1 == len(final["tokens"])


def test_bad_input_is_an_error_with_the_message_and_the_next_call_works(client):
    with pytest.raises(AppError, match=r"temperature must be in \[0, 100\], got -1"):
        call(client, "sampling", {"temperature": -1})
    with pytest.raises(AppError, match="max_new_tokens must be an integer in"):
        call(client, "greedy", {}, max_new_tokens=100_000)
    with pytest.raises(AppError, match="offline models"):
        call(client, "greedy", {}, model="certainly/not-a-model-here")
    with pytest.raises(AppError, match="params must be a JSON object"):
        client.predict(model="toy", strategy="greedy", prompt="1 2", params="{oops", api_name="/generate")
    text, trace = call(client, "greedy", {})
    assert text and trace["finish_reason"] in ("eos", "length")


def test_two_concurrent_clients_both_get_their_own_seeded_result(app, store):
    params = {"temperature": 1.0}
    results: dict[int, tuple[str, dict]] = {}

    def work(seed: int) -> None:
        results[seed] = call(Client(app, verbose=False), "sampling", params, seed=seed)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert set(results) == {0, 1}
    for seed, (text, trace) in results.items():
        ref = run(store, Request("toy", "sampling", "1 2", params, seed=seed, max_new_tokens=12))
        assert text == ref.text and trace["tokens"] == ref.to_dict()["tokens"] and trace["seed"] == seed


def test_strategies_endpoint_lists_the_registry(client):
    listed = json.loads(client.predict(api_name="/strategies"))
    assert [s["name"] for s in listed] == [s.name for s in strategies_in_order()]
    assert {s["name"] for s in listed} == {s.name for s in all_strategies()}
    sampling = next(s for s in listed if s["name"] == "sampling")
    assert {p["name"] for p in sampling["params"]} >= {"temperature", "top_k", "top_p", "min_p"}


def test_mcp_serving_follows_whether_gradio_can_serve_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "mcp" else real(name, *a))
    assert launch_kwargs()["mcp_server"] is True
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a))
    assert "mcp_server" not in launch_kwargs()
