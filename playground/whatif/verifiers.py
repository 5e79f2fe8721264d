"""Verifiers: a check a sample must pass, for the verifier rule and for accuracy (rules.py).

Written as a string (the CLI's ``--verify``, a question's ``verify``):

- ``exact:VALUE``: the extracted answer equals VALUE (``same_answer``: case and surrounding spaces
  ignored, numbers compared as numbers);
- ``regex:PATTERN``: PATTERN (Python ``re``) is found in the sample's text;
- ``json:SCHEMA``: the sample's tokens (an end of text left out) are a whole text of the JSON schema,
  walked token by token through the grammar's own matcher (strategies/sampling/grammar.py: llguidance,
  the matcher a grammar run draws under), so "valid" means what it means for a constrained run.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from playground.errors import InvalidRequest
from playground.whatif.extractors import MAX_PATTERN_CHARS, NUMBER, Answer, normalise_number
from playground.whatif.step_record import Drawn
from strategies.sampling.grammar import GrammarSpec, compile_grammar

Verifier = Callable[[Drawn, Answer], bool]


def same_answer(value: str | None, expected: str) -> bool:
    """Whether an extracted ``value`` is ``expected``: case and spaces around ignored; two numbers
    compare in their normal form (``2.50`` is ``2.5``)."""
    if value is None:
        return False
    a, b = value.strip().casefold(), expected.strip().casefold()
    if NUMBER.fullmatch(a) and NUMBER.fullmatch(b):
        return normalise_number(a) == normalise_number(b)
    return a == b


def check_expected(expected: Any) -> list[str]:
    """The accepted answers: a list of non-empty strings (empty: no checker)."""
    if not isinstance(expected, (list, tuple)) or not all(isinstance(e, str) and e.strip() for e in expected):
        raise InvalidRequest(f"expected must be a list of non-empty answers (strings), got {expected!r:.100}")
    return list(expected)


def json_verifier(schema: str, lm: Any) -> Verifier:
    if lm is None:
        raise InvalidRequest("a JSON schema verifier needs the model whose tokens it walks")
    compiled = compile_grammar(GrammarSpec("json", schema), lm)
    eos = set(lm.eos_ids)

    def passes(sample: Drawn, answer: Answer) -> bool:
        matcher = compiled.matcher()
        ids = sample.ids[:-1] if sample.ids and sample.ids[-1] in eos else sample.ids
        return all(matcher.consume_token(int(t)) for t in ids) and matcher.is_accepting()
    return passes


def make_verifier(spec: str, lm: Any = None) -> Verifier:
    """The verifier ``spec`` names (module docstring); ``lm``: the model, for a JSON schema."""
    if not isinstance(spec, str):
        raise InvalidRequest(f"a verifier must be a string, got {type(spec).__name__}")
    kind, _, arg = spec.partition(":")
    if kind == "exact" and arg:
        return lambda sample, answer: same_answer(answer.value, arg)
    if kind == "regex" and 0 < len(arg) <= MAX_PATTERN_CHARS:
        try:
            pattern = re.compile(arg)
        except re.error as e:
            raise InvalidRequest(f"the verifier's regex {arg!r:.200} does not compile: {e}") from None
        return lambda sample, answer: pattern.search(sample.text) is not None
    if kind == "json" and arg:
        return json_verifier(arg, lm)
    raise InvalidRequest(f"a verifier must be exact:VALUE, regex:PATTERN (1 to {MAX_PATTERN_CHARS} characters) "
                         f"or json:SCHEMA, got {spec!r:.200}")
