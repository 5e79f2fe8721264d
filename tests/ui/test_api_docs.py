"""The documented API as a script and an agent see it: every example of docs/api.md run against the real
server (toy models), /gradio_api/info listing every capability with a description, the MCP tool list equal
to it, generate, score and lockstep called over MCP equal to the same calls through gradio_client, each
endpoint's refusals in the page's words, and the endpoints' records equal to the whatif functions' own."""
from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import re
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, get_args

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from playground.engine import Request
from playground.engines import FORMATS
from playground.models.dtypes import DEFAULT_DTYPE, DTYPES
from playground.serving.budget import Budget
from playground.ui.api import ENDPOINTS
from playground.ui.api_args import Engine, Weights, store_of
from playground.ui.api_whatif import WhatIf
from playground.ui.page import launch_kwargs
from playground.whatif.lockstep import lockstep
from playground.whatif.sample_many import sample_many

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "api.md"
DOC_URL = "http://127.0.0.1:7860/"  # the address the examples are written for
CAPABILITIES = {"generate", "strategies", *ENDPOINTS}


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)  # the session's app server (tests/conftest.py)


def examples() -> list[tuple[str, str]]:
    """(the heading above it, its code) of every python block of docs/api.md."""
    text, found = DOC.read_text(encoding="utf-8"), []
    for block in re.finditer(r"```python\n(.*?)```", text, re.S):
        heading = re.findall(r"^## (.+)$", text[:block.start()], re.M)[-1]
        found.append((heading, block.group(1)))
    return found


def without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in ("timing", "seconds")}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def test_every_endpoint_has_an_example():
    headings = {heading.lstrip("/") for heading, _ in examples()}
    assert headings == CAPABILITIES | {"MCP"}


@pytest.mark.parametrize("heading,code", examples(), ids=[h for h, _ in examples()])
def test_the_example_runs_against_the_server(url, heading, code):
    assert DOC_URL in code, f"{heading}'s example names no server"
    out = io.StringIO()
    program = compile(code.replace(DOC_URL, url), f"docs/api.md {heading}", "exec")
    with contextlib.redirect_stdout(out), ThreadPoolExecutor(1) as pool:  # a thread: MCP's asyncio.run (over_mcp)
        pool.submit(exec, program, {"__name__": "__example__"}).result()
    assert out.getvalue().strip(), f"{heading}'s example printed nothing"


def info(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}gradio_api/info", timeout=60) as response:
        return json.load(response)["named_endpoints"]


def test_the_api_info_lists_every_capability_with_a_description(url):
    listed = info(url)
    assert set(listed) == {f"/{name}" for name in CAPABILITIES}
    for name, endpoint in listed.items():
        assert len(endpoint["description"]) > 40, name
        assert all(p["type"] for p in endpoint["parameters"]), name


async def mcp_session(url: str, work: Any) -> Any:
    async with streamable_http_client(f"{url}gradio_api/mcp/") as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)


def over_mcp(url: str, work: Any) -> Any:
    """``work(session)`` over the server's MCP endpoint, on a thread of its own: a worker that ran a browser
    test first holds Playwright's event loop in this thread, where asyncio.run refuses to start another."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, mcp_session(url, work)).result()


def test_the_mcp_tools_are_the_api_with_its_descriptions(url):
    tools = over_mcp(url, lambda session: session.list_tools()).tools
    listed = info(url)
    assert {t.name for t in tools} == {name.lstrip("/") for name in listed}
    for tool in tools:
        assert tool.description.startswith(listed[f"/{tool.name}"]["description"][:60]), tool.name
        for name, schema in tool.inputSchema["properties"].items():  # every parameter explained for an agent
            assert schema.get("description"), (tool.name, name)


def test_generate_score_and_lockstep_over_mcp_equal_gradio_client(url, client):
    calls = {"generate": dict(model="toy", strategy="sampling", prompt="1 2", params='{"temperature": 1.2}', seed=5,
                              max_new_tokens=6, system="", chat="auto"),
             "score_text": dict(model="toy", text="3 4 5", prompt="1 2"),
             "lockstep_models": dict(text="3 4 5", model_a="toy", model_b="toy-small", dtype_b="float32", prompt="1 2")}

    async def work(session: ClientSession) -> dict[str, str]:
        out = {}
        for name, arguments in calls.items():
            result = await session.call_tool(name, arguments)
            assert not result.isError, (name, result.content)
            out[name] = result.content[0].text
        return out

    got = over_mcp(url, work)
    text, trace = ast.literal_eval(got["generate"])  # generate's two outputs, as Gradio's MCP server writes them
    ref_text, ref_trace = client.predict(**calls["generate"], api_name="/generate")
    assert text == ref_text and without_timing(json.loads(trace)) == without_timing(json.loads(ref_trace))
    for name in ("score_text", "lockstep_models"):
        ref = client.predict(**calls[name], api_name=f"/{name}")
        assert without_timing(json.loads(got[name])) == without_timing(json.loads(ref)), name


def test_a_refusal_over_mcp_is_an_error_with_the_message(url):
    result = over_mcp(url, lambda session: session.call_tool("sample_many_outcomes", {
        "model": "toy", "strategy": "sampling", "prompt": "1 2", "n": 0}))
    assert result.isError and "n must be an integer in [1, 1000], got 0" in result.content[0].text


REFUSALS = [
    ("/compare_strategies", dict(model="toy", prompt="1 2", strategy_a="greedy", strategy_b="sampling",
                                 params_b='{"temperature": -1}'), r"B \(sampling\): temperature must be in \[0, 100\]"),
    ("/compare_strategies", dict(model="certainly/not-a-model-here", prompt="1 2", strategy_a="greedy",
                                 strategy_b="greedy"), "offline models"),
    ("/sample_many_outcomes", dict(model="toy", strategy="sampling", prompt="1 2", tokens=65),
     r"tokens must be an integer in \[1, 64\]"),
    ("/sweep", dict(model="toy", strategy="sampling", prompt="1 2", param="temperature", values="0.5", n=4001),
     r"n must be an integer in \[1, 1000\]"),
    ("/sweep", dict(model="toy", strategy="sampling", prompt="1 2", param="temperature", values="lin:0:1:99"),
     r"count must be an integer in \[1, 12\]"),
    ("/score_text", dict(model="toy", text="   "), "text must not be empty"),
    ("/score_text", dict(model="toy", text="3", dtype="int8"), "dtype must be one of auto, float32, bfloat16, int4"),
    ("/score_text", dict(model="toy", text="3", chat="maybe"), "chat must be one of auto, true, false"),
    ("/score_text", dict(model="toy", text="3", prompt="x" * 20_001), "prompt must be at most 20000 characters"),
    ("/logit_lens", dict(trace="{}", step=0), "a trace must be the trace JSON /generate returns"),
    ("/lockstep_models", dict(text="3 4", model_a="toy", model_b="../etc"), "namespace/name"),
    ("/detect_watermark", dict(model="toy", text="3 4", params='{"watermark_gamma": 2}'), "gamma"),
    ("/branch_run", dict(trace='{"model": "toy"}', step=0, token="1"), "its strategy must be a str"),
    ("/export_config", dict(strategy="beam", params="{}"), "greedy, sampling or gumbel"),
    ("/export_config", dict(strategy="sampling", engine="nope"), "engine must be one of"),
]


@pytest.mark.parametrize("endpoint,kwargs,says", REFUSALS, ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(REFUSALS)])
def test_each_endpoint_refuses_with_the_pages_message(client, endpoint, kwargs, says):
    with pytest.raises(AppError, match=says):
        client.predict(**kwargs, api_name=endpoint)


def test_a_trace_too_far_for_the_model_is_refused(client):
    _, trace = client.predict(model="toy", strategy="greedy", prompt="1 2", params="{}", max_new_tokens=3,
                              api_name="/generate")
    forged = {**json.loads(trace), "prompt_ids": [10**6]}
    with pytest.raises(AppError, match=r"token ids must be in \[0, "):
        client.predict(trace=json.dumps(forged), step=0, api_name="/logit_lens")
    with pytest.raises(AppError, match=r"step must be"):
        client.predict(trace=trace, step=99, token="1", api_name="/branch_run")


def test_the_records_are_the_whatif_functions_own(client, store):
    got = json.loads(client.predict(model="toy", strategy="sampling", prompt="1 2", params='{"top_k": 3}', seed=2,
                                    n=40, tokens=2, api_name="/sample_many_outcomes"))
    ref = sample_many(store, Request("toy", "sampling", "1 2", {"top_k": 3}, seed=2, max_new_tokens=2), 40)
    assert without_timing(got) == without_timing(json.loads(json.dumps(ref)))
    got = json.loads(client.predict(text="3 4", model_a="toy", model_b="", dtype_a="float32", dtype_b="bfloat16",
                                    prompt="1 2", api_name="/lockstep_models"))
    ref = lockstep(store, "3 4", "toy", "toy", "float32", "bfloat16", "1 2")
    assert without_timing(got) == without_timing(json.loads(json.dumps(ref)))


def test_the_page_always_serves_mcp():
    assert launch_kwargs()["mcp_server"] is True  # mcp is in requirements.txt


def test_the_endpoints_run_on_the_pages_store(store):
    assert store_of(store)() is store
    own = store_of(None)  # a page built without a store (a test's): one store of its own
    assert own() is own()


def test_a_sweep_ends_when_the_time_budget_is_spent(store):
    whatif = WhatIf(lambda: store, Budget(seconds=1e-6))
    out = json.loads(whatif.sweep("toy", "sampling", "1 2", "temperature", "0.5,1,2", n=2, tokens=1))
    assert out["stopped"] is True and len(out["points"]) < 3
    unlimited = json.loads(WhatIf(lambda: store, Budget()).sweep("toy", "sampling", "1 2", "temperature", "0.5,1,2",
                                                                  n=2, tokens=1))
    assert unlimited["stopped"] is False and [p["value"] for p in unlimited["points"]] == [0.5, 1.0, 2.0]


def test_the_choices_the_schema_lists_are_the_playgrounds():
    assert list(get_args(Weights)) == list(DTYPES) and DEFAULT_DTYPE == "auto"
    assert list(get_args(Engine)) == ["all", *FORMATS]


NUMBERS = [  # each endpoint's integer arguments, with the smallest run around them
    ("/compare_strategies", dict(model="toy", prompt="1 2", strategy_a="greedy", strategy_b="greedy", max_new_tokens=2),
     ("seed", "max_new_tokens")),
    ("/sample_many_outcomes", dict(model="toy", strategy="sampling", prompt="1 2", n=2, tokens=1), ("seed", "n", "tokens")),
    ("/sweep", dict(model="toy", strategy="sampling", prompt="1 2", param="temperature", values="1", n=1, tokens=1),
     ("seed", "n", "tokens")),
    ("/branch_run", dict(step=0, token="1", max_new_tokens=2), ("step", "max_new_tokens")),
    ("/logit_lens", dict(step=0), ("step",)),
    ("/export_config", dict(strategy="sampling"), ("seed", "max_new_tokens")),
]


def test_hostile_numbers_are_refused_in_one_line(client):
    _, trace = client.predict(model="toy", strategy="greedy", prompt="1 2", params="{}", max_new_tokens=2,
                              api_name="/generate")
    for endpoint, base, names in NUMBERS:
        base = {**base, "trace": trace} if "step" in base else base
        for name in names:
            for value in (-1, 2**63, -(10**30), 1.5):
                try:
                    client.predict(**{**base, name: value}, api_name=endpoint)
                except AppError as err:
                    message = str(err)
                    assert "verbose error reporting" not in message and "\n" not in message.strip(), (endpoint, name)
                else:  # an engine's seed is 64-bit (llama.cpp's, vLLM's): the export takes it
                    assert (endpoint, name, value) == ("/export_config", "seed", 2**63)
