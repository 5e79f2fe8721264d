"""A grammar llguidance refuses, said in the terms the person gave it.

llguidance reads every grammar as Lark: a JSON schema becomes ``start: %json {...}``, a regex
``start: /.../``, and the toy models add an option line ``%llguidance {...}`` at the end. Its
messages point into that text (``at 1(8): ...`` and an excerpt of its lines). ``refusal_text``
keeps the problem and drops the wrapping: its first line says what is wrong with which value, and
what is allowed where llguidance says it; only a Lark grammar, which is the person's own text,
keeps its line, column and excerpt.
"""
from __future__ import annotations

import re

JSON_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")

_POSITION = re.compile(r"^(?:at )?(\d+)\((\d+)\): ")
_EXCERPT = re.compile(r"^\s*\d+ \| ")
_CARET = re.compile(r"^\s*\^+\s*$")
_GREATER = re.compile(r"^(\w+) \((.+?)\) is greater than (\w+) \((.+?)\)$")
_REGEX_ERROR = re.compile(r"^error: (.+)$")


def refusal_text(kind: str, text: str, message: str, option_line: str = "") -> str:
    """llguidance's ``message`` about the ``kind`` grammar ``text`` -> the refusal a person reads.
    ``option_line`` is the line the project appended to ``text`` (left out of a Lark excerpt)."""
    lines = [line for line in message.strip("\n").splitlines() if line.strip()]
    if not lines:
        return f"the {kind} grammar is not valid"
    cut = next((i for i, line in enumerate(lines) if _EXCERPT.match(line)), len(lines))
    head, excerpt = lines[:cut], lines[cut:]
    position = _POSITION.match(head[0]) if head else None
    problem = head[0][position.end():] if position else (head[0] if head else "")
    if kind == "lark":
        where = f" at line {position[1]}, column {position[2]}" if position else ""
        own = [line for line in excerpt if not (option_line and line.split("| ", 1)[-1] == option_line.strip())]
        return "\n".join([f"the lark grammar is not valid{where}: {problem}", *head[1:], *own])
    if kind == "json":
        return _json_refusal(problem.removeprefix("failed to compile JSON schema: "), head[1:])
    if kind == "regex":
        return _regex_refusal(text, problem, head[1:])
    return "\n".join([f"the {kind} grammar is not valid: {problem}", *head[1:]])


def _json_refusal(problem: str, rest: list[str]) -> str:
    unsatisfiable = problem.removeprefix("Unsatisfiable schema: ")
    if problem == "Unsatisfiable schema: schema is false":
        return 'the JSON schema is false, which no value satisfies: give an object such as {"type": "string"}'
    if problem.startswith("Invalid type: "):
        given = problem.removeprefix("Invalid type: ")
        return f'the JSON schema\'s type "{given}" is not a JSON type: it must be one of {", ".join(JSON_TYPES)}'
    if unsatisfiable != problem:
        greater = _GREATER.match(unsatisfiable)
        if greater:
            low, high = greater[1], greater[3]
            return (f"the JSON schema allows no value: {low} ({greater[2]}) is greater than {high} ({greater[4]}); "
                    f"{low} must be at most {high}")
        return f"the JSON schema allows no value: {unsatisfiable}"
    if problem == "regex parse error:" and rest:
        echo = [line for line in rest if not _REGEX_ERROR.match(line)]
        return "\n".join([f"the JSON schema's pattern {rest[0].strip()!r:.200} is not a valid regex: "
                           f"{_regex_error(rest)}", *echo])
    return "\n".join([f"the JSON schema is not valid: {problem}", *rest])


def _regex_refusal(text: str, problem: str, rest: list[str]) -> str:
    if not problem.startswith("invalid regex "):
        return "\n".join([f"the regex {text!r:.200} is not valid: {problem}", *rest])
    boundary = _word_boundary(text)
    if "lookarounds not supported" in problem and boundary is not None:
        # llguidance names its own node (WordStartUnicode ...) and points at the start of its wrapper
        return "\n".join([f"the regex {text!r:.200} is not valid at column {boundary + 1}: "
                           f"{text[boundary:boundary + 2]} is a word boundary, and word boundaries (\\b, \\B, "
                           f"\\<, \\>) are not supported", f"    {text}", "    " + " " * boundary + "^^"])
    first = f"the regex {text!r:.200} is not valid: {_regex_error(rest)}"
    # the echo and its caret are llguidance's copy of the regex: shown where that copy is the person's own
    echo = rest[:2] if len(rest) >= 2 and rest[0].strip() == text.strip() and _CARET.match(rest[1]) else []
    return "\n".join([first, *echo])


def _word_boundary(text: str) -> int | None:
    """Where the first word boundary escape (``\\b``, ``\\B``, ``\\<``, ``\\>``) of ``text`` begins, outside a
    character class (where ``\\b`` is a backspace), or None."""
    i, in_class = 0, False
    while i < len(text) - 1:
        c = text[i]
        if c == "\\":
            if not in_class and text[i + 1] in "bB<>":
                return i
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        i += 1
    return None


def _regex_error(rest: list[str]) -> str:
    """The ``error: ...`` line of a regex parse error (Rust's regex crate), or a plain phrase."""
    return next((m[1] for m in map(_REGEX_ERROR.match, rest) if m), "it does not parse")
