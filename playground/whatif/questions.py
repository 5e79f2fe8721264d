"""The question set with known answers (assets/questions.json) and the toy's task whose true distribution
is known: read and checked (every extractor compiles, every question has an accepted answer)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground import ASSETS
from playground.errors import InvalidRequest
from playground.whatif.extractors import make_extractor

QUESTIONS = ASSETS / "questions.json"


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    prompt: str
    extract: str
    expected: tuple[str, ...]


def question_of(entry: Any) -> Question:
    if not isinstance(entry, dict) or not {"id", "kind", "prompt", "extract", "expected"} <= set(entry):
        raise InvalidRequest(f"a question must have id, kind, prompt, extract and expected, got {entry!r:.200}")
    expected = entry["expected"]
    if not isinstance(expected, list) or not expected or not all(isinstance(e, str) and e for e in expected):
        raise InvalidRequest(f"question {entry['id']!r}: expected must be a non-empty list of answers, got {expected!r:.100}")
    make_extractor(entry["extract"])
    return Question(str(entry["id"]), str(entry["kind"]), str(entry["prompt"]), entry["extract"], tuple(expected))


def load_questions(path: Path = QUESTIONS) -> list[Question]:
    return [question_of(e) for e in json.loads(path.read_text(encoding="utf-8"))["questions"]]


def toy_task(path: Path = QUESTIONS) -> dict[str, Any]:
    """The toy's task: model, prompt, tokens, extract, expected and the true ``distribution`` of the answers."""
    return dict(json.loads(path.read_text(encoding="utf-8"))["toy"])
