"""The documents stay true to the code: docs/strategies.md is what ``python -m playground.tools.docs`` writes
from the registries today, every file path the README and docs/ cite exists, the README stays a short read
whose quick start is the two make targets, and each link between the documents lands on a file."""
from __future__ import annotations

import re
from pathlib import Path

from playground.tools import docs

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a path of the repository written in backticks: `strategies/stages.py`, `docs/trace.md`, `assets/toy/`
CITED = re.compile(r"`((?:playground|strategies|tests|bench|docs|assets)/[\w./-]*|app\.py|Makefile)`")


def test_the_strategies_reference_is_generated_from_the_registries():
    assert docs.OUT.read_text(encoding="utf-8") == docs.render(), \
        "docs/strategies.md is out of date: run python -m playground.tools.docs"


def test_every_cited_path_exists():
    missing = [f"{doc.name}: {path}" for doc in DOCUMENTS
               for path in CITED.findall(doc.read_text(encoding="utf-8")) if not (ROOT / path).exists()]
    assert missing == []


def test_every_link_between_documents_lands_on_a_file():
    links = re.compile(r"\]\(((?!https?:|#)[^)#\s]+)")
    broken = [f"{doc.name}: {target}" for doc in DOCUMENTS
              for target in links.findall(doc.read_text(encoding="utf-8")) if not (doc.parent / target).exists()]
    assert broken == []


def test_the_readme_is_a_short_read_that_starts_with_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    quick = text.split("## Quick start", 1)[1].split("```", 2)[1]
    assert [line.split("#")[0].strip() for line in quick.strip().splitlines()] == ["make run", "make test"]
