"""JSON from outside, fuzzed at every entry point that parses it: /generate's params and grammar over
the live API, a json or choices grammar's text in a Request, a share link's grammar, the command
line's --grammar-json and a DRY breaker list. Deep nesting, huge numbers, huge texts, broken and
non-UTF-8 bytes: each is refused in one line that names the limit or the fault, and the next call is
served as before."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.engine import Request
from playground.errors import InvalidRequest
from playground.ui import share
from strategies.sampling.samplers import parse_breakers
from strategies.untrusted_json import MAX_DEPTH, loads_untrusted, nesting_depth

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]
ROOT = Path(__file__).resolve().parents[2]
DEPTH_REFUSED = f"must nest at most {MAX_DEPTH} levels"


def hostile(seed: int = 0) -> list[str]:
    """Inputs that broke or could break a parser: nested past Python's recursion limit, a number past
    its digit limit, lone surrogates and bytes that are not UTF-8, broken and huge texts, and random
    mixtures of brackets and strings."""
    rng = random.Random(seed)
    fixed = ["[" * 3000, "{\"a\":" * 2000 + "1" + "}" * 2000, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
             "1" * 5000, "[" + "1" * 5000 + "]", '"\ud800"', "\udcff\udcfe", b"\xff\xfe{".decode("latin-1"),
             '{"a": "[[[[[[["}' + "]" * 5000, "{" * 100_000, "", "   ", "null", "[]", '{"a"', "\x00"]
    pieces = ["[", "]", "{", "}", '"', "\\", ":", ",", "1e999", "-0", "true", '"[{"', " "]
    return fixed + ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 400))) for _ in range(60)]


def test_nesting_is_measured_without_recursion_and_strings_do_not_count():
    assert nesting_depth("[1, [2, {\"a\": [3]}]]") == 4
    assert nesting_depth('["[[[[", "{{{{"]') == 1
    assert nesting_depth('["a\\"[[[["]') == 1  # an escaped quote does not end the string
    assert nesting_depth("[" * 100_000) == 100_000
    assert loads_untrusted("[" * MAX_DEPTH + "]" * MAX_DEPTH, "x") is not None  # the limit itself is allowed
    with pytest.raises(InvalidRequest, match=f"x {DEPTH_REFUSED} of arrays and objects, got 65"):
        loads_untrusted("[" * 65 + "]" * 65, "x")
    with pytest.raises(InvalidRequest, match="x does not parse: Exceeds the limit"):
        loads_untrusted("1" * 5000, "x")
    with pytest.raises(InvalidRequest, match="x must be at most 10 characters, got 11"):
        loads_untrusted("[1,2,3,4,5]", "x", max_chars=10)
    with pytest.raises(json.JSONDecodeError):  # a plain parse error stays the caller's to word
        loads_untrusted("{oops", "x")


def only_refusals(call) -> list[str]:
    """Run ``call`` on every hostile input; return the messages of the refusals. Anything but an
    InvalidRequest (or a success) fails the test."""
    said = []
    for text in hostile():
        try:
            call(text)
        except InvalidRequest as err:
            message = str(err)
            assert message and "\n" not in message.strip() and len(message) < 600, (text[:40], message)
            said.append(message)
    return said


@pytest.mark.parametrize("kind", ["json", "choices"])
def test_a_grammars_text_is_refused_with_a_message(kind):
    said = only_refusals(lambda text: Request("toy", "sampling", "1 2", {}, grammar={"kind": kind, "text": text}))
    assert any(DEPTH_REFUSED in m for m in said), said[:5]


def test_a_share_links_grammar_is_ignored_with_a_warning():
    for text in hostile():
        cfg, warnings = share.decode({"grammar": "json", "grammar_text": text})
        assert cfg.grammar_kind in ("", "json")
        if text == "[" * 3000:
            assert cfg.grammar_kind == "" and any(DEPTH_REFUSED in w for w in warnings), warnings


def test_dry_breakers_are_refused_with_a_message():
    said = only_refusals(parse_breakers)
    assert any(DEPTH_REFUSED in m for m in said)


def test_the_command_line_exits_2_in_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 3000)
    not_utf8 = tmp_path / "latin1.json"
    not_utf8.write_bytes(b'{"type": "string", "description": "caf\xe9"}')
    for value, says in ((str(deep), DEPTH_REFUSED), ("{" * 5000, DEPTH_REFUSED), (str(not_utf8), "cannot read")):
        done = subprocess.run([sys.executable, "-m", "playground", "run", "--model", "toy", "--prompt", "1 2",
                               "--grammar-json", value], cwd=ROOT, capture_output=True, text=True, timeout=300)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr[-1500:]


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)  # the session's app server (tests/conftest.py)


def generate(client: Client, params: str = "{}", grammar: str = "") -> str:
    text, _ = client.predict(model="toy", strategy="greedy", prompt="1 2", params=params, seed=0, max_new_tokens=4,
                             system="", chat="auto", dtype="auto", grammar=grammar, api_name="/generate")
    return text


def test_the_api_refuses_hostile_params_and_grammars_and_keeps_serving(client):
    reference = generate(client)
    inputs = hostile(seed=1)
    sendable = [text for text in inputs if text.encode("utf-8", "surrogatepass").decode("utf-8", "ignore") == text]
    calls = [("params", text) for text in sendable[:30]] + [("grammar", text) for text in sendable[:30]]
    calls += [("grammar", json.dumps({"kind": "json", "text": text})) for text in inputs[:20]]  # escaped: all go
    for where, text in calls:
        try:
            generate(client, **{where: text})
        except AppError as err:
            message = str(err)
            assert "has not enabled verbose error reporting" not in message, (where, text[:40])
            assert message and "Traceback" not in message
    with pytest.raises(AppError, match=f"params {DEPTH_REFUSED}"):
        generate(client, params="[" * 3000)
    with pytest.raises(AppError, match=f"grammar {DEPTH_REFUSED}"):
        generate(client, grammar="[" * 3000)
    with pytest.raises(AppError, match=f"the JSON schema {DEPTH_REFUSED}"):
        generate(client, grammar=json.dumps({"kind": "json", "text": "[" * 3000}))
    assert generate(client) == reference  # and the server still serves, as before


# the documented endpoints' JSON arguments (docs/api.md), each with the smallest run around it
DOCUMENTED = [
    ("/compare_strategies", dict(model="toy", prompt="1 2", strategy_a="greedy", strategy_b="greedy", max_new_tokens=2),
     ("params_a", "params_b", "grammar")),
    ("/sample_many_outcomes", dict(model="toy", strategy="sampling", prompt="1 2", n=2, tokens=1), ("params", "grammar")),
    ("/sweep", dict(model="toy", strategy="sampling", prompt="1 2", param="temperature", values="1", n=1, tokens=1),
     ("params", "values", "expected")),
    ("/score_text", dict(model="toy", text="3", prompt="1 2"), ("grammar",)),
    ("/logit_lens", dict(trace="{}", step=0), ("trace",)),
    ("/detect_watermark", dict(model="toy", text="3 4", prompt="1 2"), ("params",)),
    ("/branch_run", dict(trace="{}", step=0, token="1", max_new_tokens=2), ("trace",)),
    ("/export_config", dict(strategy="sampling"), ("params", "grammar", "trace")),
]


def test_the_documented_endpoints_refuse_hostile_json_and_keep_serving(client):
    reference = generate(client)
    sendable = [text for text in hostile(seed=2) if text.encode("utf-8", "surrogatepass").decode("utf-8", "ignore") == text]
    for endpoint, base, arguments in DOCUMENTED:
        for name in arguments:
            for text in ["[" * 3000, *sendable[:6]]:
                try:
                    client.predict(**{**base, name: text}, api_name=endpoint)
                except AppError as err:
                    message = str(err)
                    assert "has not enabled verbose error reporting" not in message, (endpoint, name, text[:40])
                    assert message and "Traceback" not in message and len(message) < 600, (endpoint, name, message)
                    if text == "[" * 3000 and name != "values":  # a sweep's values are a list of numbers, not JSON
                        assert DEPTH_REFUSED in message, (endpoint, name, message)
    assert generate(client) == reference  # and the server still serves, as before
