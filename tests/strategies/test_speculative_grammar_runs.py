"""Speculative decoding under a grammar, run after run: no draft raises, and a run ends where the
sampling loop would end its text (a seeded few of what ``playground.tools.speculative_grammar_fuzz``
runs over 500 seeds)."""
from __future__ import annotations

import json

import pytest

from playground.engine import Request, run
from playground.tools.speculative_grammar_fuzz import TOY_DRAFTS, TOY_GRAMMARS, TOY_PROMPT, expected_reason, fuzz
from strategies.sampling.grammar import GRAMMAR_REASON, GrammarSpec, compile_grammar

STORY = TOY_GRAMMARS["choices"]
CLOSED = {c for c in json.loads(STORY["text"]) if not any(o != c and o.startswith(c) for o in json.loads(STORY["text"]))}


@pytest.mark.parametrize("draft", ["toy-small", "early_exit"])
def test_a_text_the_grammar_closes_ends_grammar_complete_not_at_an_end_of_text(store, toy, draft):
    """A draft that completes the grammar and goes on to the end of text (" happily", " ever", EOS):
    the text ends with the token that closed it, as sampling ends it, and the end of text is discarded."""
    compiled = compile_grammar(GrammarSpec.from_dict(STORY), toy)
    closed = 0
    for seed in range(30):
        trace = run(store, Request("toy", "speculative", TOY_PROMPT, {"draft": draft, "gamma": 3, "temperature": 3.0,
                                   "measure_baseline": False}, seed=seed, max_new_tokens=16, grammar=STORY))
        assert trace.finish_reason == expected_reason(compiled, trace.token_ids, toy.eos_ids, 16), (seed, trace.text)
        if "".join(toy.piece(t) for t in trace.token_ids) in CLOSED:
            closed += 1
            assert trace.finish_reason == GRAMMAR_REASON and trace.token_ids[-1] not in toy.eos_ids
    assert closed >= 10


def test_every_draft_under_four_grammars_runs_without_an_error(store):
    cells = fuzz(store, "toy", TOY_PROMPT, TOY_DRAFTS, TOY_GRAMMARS, range(6), 16)
    assert {d for d, _ in cells} == {"sampling", *TOY_DRAFTS} and len(cells) == 16
    for key, cell in cells.items():
        assert cell.runs == 6 and not cell.errors and not cell.wrong, (key, cell)
