"""Answer extractors: the answer a sample's text gives, and where in the text it stands.

An extractor is written as a string (the CLI's ``--extract``, a question's ``extract``):

- ``last_number``: the last number in the text (``-3``, ``1,024``, ``2.50``), normalised (``1024``, ``2.5``);
- ``first_number``: the first one (a base model that answers, then writes the next question);
- ``result_number``: the first number that follows no operator (``+ - * / ×``) and comes before no operator
  or ``=``, so that ``7 + 5 = 12`` and ``7 + 5 is 12`` give 12 where a model restates the sum first;
- ``regex:PATTERN``: the first match of PATTERN (Python ``re``); its first group when it has groups;
- ``json:FIELD``: the field FIELD (dots for nesting: ``answer.city``) of the first JSON object in the text,
  as JSON (a string without its quotes);
- ``choices:A|B|C`` (or a JSON list, as the grammar's choices are written): the choice that stands
  earliest in the text, as a whole word, case ignored (the longest where two start at one place).

Each gives an ``Answer``: the normalised ``value`` (None: the text gives no answer) and the character
``span`` of the text it was read from, which maps back to the tokens that wrote it (CoT-decoding's
margin is taken over those tokens).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from playground.errors import InvalidRequest
from strategies.sampling.grammar import choices_of

EXTRACTOR_KINDS = ("last_number", "first_number", "result_number", "regex", "json", "choices")
MAX_PATTERN_CHARS = 1000
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
RESULT = re.compile(r"(?<![-+*/×] )(?<![-+*/×\d.,])(-?\d+(?:,\d{3})*(?:\.\d+)?)(?!\d|[.,]\d|\s*[-+*/×=])")


@dataclass(frozen=True)
class Answer:
    value: str | None
    span: tuple[int, int] | None = None


Extractor = Callable[[str], Answer]


def normalise_number(text: str) -> str:
    """``1,024`` -> ``1024``; ``2.50`` -> ``2.5``; ``3.0`` -> ``3``; ``-0`` -> ``0``."""
    plain = text.replace(",", "")
    if "." in plain:
        plain = plain.rstrip("0").rstrip(".")
    return "0" if plain in ("-0", "") else plain


def last_number(text: str) -> Answer:
    found = list(NUMBER.finditer(text))
    if not found:
        return Answer(None)
    m = found[-1]
    return Answer(normalise_number(m.group()), m.span())


def first_number(text: str) -> Answer:
    m = NUMBER.search(text)
    return Answer(None) if m is None else Answer(normalise_number(m.group()), m.span())


def result_number(text: str) -> Answer:
    m = RESULT.search(text)
    return Answer(None) if m is None else Answer(normalise_number(m.group(1)), m.span(1))


def regex_extractor(pattern: str) -> Extractor:
    if not pattern or len(pattern) > MAX_PATTERN_CHARS:
        raise InvalidRequest(f"an extractor's regex must have 1 to {MAX_PATTERN_CHARS} characters, "
                             f"got {len(pattern)}")
    try:
        compiled = re.compile(pattern)
    except re.error as e:
        raise InvalidRequest(f"the extractor's regex {pattern!r:.200} does not compile: {e}") from None

    def extract(text: str) -> Answer:
        m = compiled.search(text)
        if m is None:
            return Answer(None)
        group = 1 if compiled.groups else 0
        if m.group(group) is None:
            return Answer(None)
        return Answer(m.group(group).strip(), m.span(group))
    return extract


def first_json_object(text: str) -> tuple[Any, tuple[int, int]] | None:
    """The first ``{...}`` of the text that parses as JSON, and its span."""
    decoder = json.JSONDecoder()
    for start in (i for i, c in enumerate(text) if c == "{"):
        try:
            value, end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            continue
        return value, (start, end)
    return None


def json_extractor(field: str) -> Extractor:
    path = field.split(".")
    if not field or any(not p for p in path):
        raise InvalidRequest(f"an extractor's JSON field must be names separated by dots, got {field!r:.200}")

    def extract(text: str) -> Answer:
        found = first_json_object(text)
        if found is None:
            return Answer(None)
        value, span = found
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return Answer(None)
            value = value[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return Answer(shown, _value_span(text, span, shown))
    return extract


def _value_span(text: str, within: tuple[int, int], shown: str) -> tuple[int, int]:
    """Where ``shown`` stands inside the object's span (its last occurrence), else the whole object."""
    at = text.rfind(shown, within[0], within[1])
    return (at, at + len(shown)) if at >= 0 and shown else within


def choices_extractor(text_of_choices: str) -> Extractor:
    choices = choices_of(text_of_choices)
    patterns = [(c, re.compile(r"(?<!\w)" + re.escape(c) + r"(?!\w)", re.IGNORECASE)) for c in choices]

    def extract(text: str) -> Answer:
        best: tuple[int, int, str] | None = None
        for choice, pattern in patterns:
            m = pattern.search(text)
            if m is not None and (best is None or (m.start(), -len(choice)) < (best[0], -len(best[2]))):
                best = (m.start(), m.end(), choice)
        return Answer(None) if best is None else Answer(best[2], (best[0], best[1]))
    return extract


def make_extractor(spec: str) -> Extractor:
    """The extractor ``spec`` names (module docstring)."""
    if not isinstance(spec, str):
        raise InvalidRequest(f"an extractor must be a string, got {type(spec).__name__}")
    kind, _, arg = spec.partition(":")
    if kind == "last_number" and not arg:
        return last_number
    if kind == "first_number" and not arg:
        return first_number
    if kind == "result_number" and not arg:
        return result_number
    if kind == "regex":
        return regex_extractor(arg)
    if kind == "json":
        return json_extractor(arg)
    if kind == "choices":
        return choices_extractor(arg)
    raise InvalidRequest(f"an extractor must be one of last_number, first_number, result_number, regex:PATTERN, json:FIELD, choices:A|B|..., "
                         f"got {spec!r:.200}")
