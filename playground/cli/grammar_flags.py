"""The grammar flags every command that decodes takes, and the grammar dict they make.

    --grammar-json FILE|STRING     a JSON schema
    --grammar-regex REGEX          a regular expression the whole text matches
    --grammar-choices CHOICES      'yes | no | maybe' or a JSON list of strings
    --grammar-lark FILE|STRING     a Lark grammar (llguidance's dialect)

At most one of them; ``grammar_of_args`` turns them into ``{"kind": ..., "text": ...}`` (what
``engine.Request.grammar`` takes), or None. A value that names an existing file is read from it
(JSON and Lark, which are long; a regex or a choice list is always the text itself).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from playground.errors import InvalidRequest
from strategies.sampling.grammar import EXAMPLES, GRAMMAR_KINDS

FROM_FILE = ("json", "lark")
HELP = {
    "json": f"the text follows this JSON schema (a file or the schema itself; whitespace: one space, or a line "
            f"break and at most 16 spaces or tabs), e.g. '{EXAMPLES['json']}'",
    "regex": f"the whole text matches this regular expression (Rust regex syntax; \\d is an ASCII digit 0-9), "
             f"e.g. '{EXAMPLES['regex']}'",
    "choices": f"the text is one of these ('a | b' or a JSON list of strings), e.g. '{EXAMPLES['choices']}'",
    "lark": "the text follows this Lark grammar in llguidance's dialect (a file or the grammar itself)",
}


def add_grammar_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with the four grammar flags (dest ``grammar_json`` ...), at most one of them given."""
    group = parser.add_argument_group("grammar (at most one)").add_mutually_exclusive_group()
    for kind in GRAMMAR_KINDS:
        group.add_argument(f"--grammar-{kind}", dest=f"grammar_{kind}", default=None,
                           metavar="FILE|TEXT" if kind in FROM_FILE else "TEXT", help=HELP[kind] + ".")
    return parser


def grammar_of_args(args: argparse.Namespace) -> dict[str, str] | None:
    """The grammar the flags name, as ``{"kind", "text"}``, or None when none is given."""
    given = [(kind, getattr(args, f"grammar_{kind}", None)) for kind in GRAMMAR_KINDS]
    given = [(k, v) for k, v in given if v is not None]
    if not given:
        return None
    if len(given) > 1:
        raise InvalidRequest(f"give at most one grammar flag, got {', '.join('--grammar-' + k for k, _ in given)}")
    kind, value = given[0]
    return {"kind": kind, "text": read_grammar(kind, value)}


def read_grammar(kind: str, value: Any) -> str:
    """A JSON or Lark grammar from a file when ``value`` names one, else ``value`` itself."""
    text = str(value)
    if kind in FROM_FILE and "\n" not in text and len(text) < 4096:
        path = Path(text).expanduser()
        try:
            if path.is_file():
                return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidRequest(f"--grammar-{kind}: cannot read {text}: {e}") from None
    if not text.strip():
        raise InvalidRequest(f"--grammar-{kind} must not be empty")
    return text
