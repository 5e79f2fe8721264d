"""A refused grammar says its problem first, in the person's terms, through the engine, the CLI, the
page and /generate: never the Lark text llguidance was given (``start: %json ...``, the option
line ``%llguidance ...``) nor a position in it."""
from __future__ import annotations

import json

import gradio as gr
import pytest

from playground.cli import main
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.ui.api import api_generate_stream, plain_refusals
from playground.ui.events import refusal_html
from playground.ui.handlers import default_decoder, generate
from strategies.sampling.grammar import GrammarSpec, compile_grammar

INTERNALS = ("%llguidance", "no_forcing", "start:", "%json", "1(8)")
# (flag kind, grammar text, what the first line must say)
REFUSED = [
    ("json", "false", ["JSON schema is false", "no value"]),
    ("json", '{"type": "strange"}', ['type "strange"', "one of string, number, integer, boolean, null, object, array"]),
    ("json", '{"type": "string", "minLength": 5, "maxLength": 2}',
     ["minLength (5) is greater than maxLength (2)", "minLength must be at most maxLength"]),
    ("json", '{"type": "string", "pattern": "a(b"}', ["pattern 'a(b' is not a valid regex: unclosed group"]),
    ("regex", "a(b", ["the regex 'a(b' is not valid: unclosed group"]),
    ("regex", r"\d{2}[z-a]", [r"the regex '\\d{2}[z-a]' is not valid: invalid character class range"]),
    ("choices", "[]", ["grammar choices must be non-empty strings", "got '[]'"]),
    # llguidance says "lookarounds not supported yet; WordUnicode", at the start of its wrapper: the person's
    # regex and the column of its word boundary instead
    ("regex", r"\d{2}\b", [r"the regex '\\d{2}\\b' is not valid at column 6: \b is a word boundary",
                          "are not supported"]),
    ("regex", r"[<]x\<", [r"at column 5: \< is a word boundary"]),
]


def refusal_of(call) -> str:
    with pytest.raises(InvalidRequest) as caught:
        call()
    return str(caught.value)


def assert_plain(message: str, says: list[str]) -> None:
    first = message.splitlines()[0]
    for words in says:
        assert words in first, (words, message)
    for internal in INTERNALS:
        assert internal not in message, (internal, message)


@pytest.mark.parametrize("key", ["toy", "smollm2-135m"])
def test_every_vocabulary_is_given_the_option_line_and_its_refusals_hide_it(store, key):
    """Forcing is off for every vocabulary, so llguidance is always given the option line these
    messages hide; a refusal on SmolLM2's vocabulary reads as plainly as on toy's."""
    assert "%llguidance" in GrammarSpec("json", "false").lark(forcing=False)
    message = refusal_of(lambda: compile_grammar(GrammarSpec("json", "false"), store.get(key)))
    assert_plain(message, REFUSED[0][2])


@pytest.mark.parametrize("kind, text, says", REFUSED)
def test_a_run_refuses_the_grammar_with_its_problem_first(store, kind, text, says):
    grammar = {"kind": kind, "text": text}
    message = refusal_of(lambda: run(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=3, grammar=grammar)))
    assert_plain(message, says)


@pytest.mark.parametrize("kind, text, says", REFUSED)
def test_the_cli_prints_the_problem_on_its_error_line(capsys, kind, text, says):
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--max-new-tokens", "3", f"--grammar-{kind}", text]) == 2
    err = capsys.readouterr().err
    assert_plain(err[err.index("error: ") + len("error: "):], says)


@pytest.mark.parametrize("kind, text, says", REFUSED[:3] + REFUSED[4:5])
def test_the_page_and_generate_show_the_same_message(store, kind, text, says):
    grammar = {"kind": kind, "text": text}
    message = refusal_of(lambda: list(generate(store, Request("toy", "greedy", "1 2", max_new_tokens=3, grammar=grammar))))
    assert_plain(message, says)
    assert_plain(refusal_html(message).split("</b> ", 1)[1], [])
    stream = api_generate_stream(default_decoder(store), "toy", "greedy", "1 2", "{}", 0, 3, "", "auto", "auto",
                                 json.dumps(grammar))
    with pytest.raises(gr.Error) as caught:
        list(plain_refusals(stream))
    assert caught.value.message == message


def test_a_lark_grammar_keeps_its_own_line_and_column_without_the_option_line(store):
    message = refusal_of(lambda: compile_grammar(GrammarSpec("lark", 'start: "a" | \nfoo: ('), store.get("toy")))
    first, *excerpt = message.splitlines()
    assert first.startswith("the lark grammar is not valid at line 2, column 7: Expected token ')'")
    assert excerpt[:2] == ['   1 | start: "a" | ', "   2 | foo: ("] and excerpt[2].strip() == "^"
    assert "%llguidance" not in message
