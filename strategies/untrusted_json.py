"""JSON that a person or a client wrote, parsed within stated limits.

``json.loads`` recurses once per level of nesting, so about a thousand nested ``[`` raise
``RecursionError``; a number of more than 4,300 digits raises a plain ``ValueError``. Neither is
the ``JSONDecodeError`` an entry point words for its user. ``loads_untrusted`` measures the nesting first, in
one pass without recursion, and refuses too deep, too long or too large a text with an
``InvalidRequest`` naming the limit; a text that does not parse still raises ``JSONDecodeError``,
which each caller words for its own input.
"""
from __future__ import annotations

import json
import re
from typing import Any

from playground.errors import InvalidRequest

MAX_DEPTH = 64  # nested arrays and objects: far more than any schema or parameter set needs
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in ``text`` (brackets inside strings do not count)."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub('""', text)):
        depth = depth + 1 if bracket in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


def loads_untrusted(text: str, what: str, max_chars: int | None = None, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)`` for the input called ``what`` in messages, refused past the limits."""
    if max_chars is not None and len(text) > max_chars:
        raise InvalidRequest(f"{what} must be at most {max_chars} characters, got {len(text)}")
    depth = nesting_depth(text)
    if depth > max_depth:
        raise InvalidRequest(f"{what} must nest at most {max_depth} levels of arrays and objects, got {depth}")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as err:  # a number past Python's digit limit, say
        raise InvalidRequest(f"{what} does not parse: {err}") from None
