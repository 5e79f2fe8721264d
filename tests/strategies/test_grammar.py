"""The grammar stage: its mask against a brute-force check, its feasible mass against a fresh forward
pass, the runs it ends, what it refuses, and the grammar in sample many, score, branches and the CLI."""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re

import jsonschema
import pytest
import torch

from playground.cli.grammar_flags import HELP as CLI_HELP
from playground.cli.grammar_flags import add_grammar_flags, grammar_of_args
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.ui.controls import GRAMMAR_HELP
from playground.ui.handlers import status_html
from playground.whatif.branches import branch_settings
from playground.whatif.sample_many import sample_many
from playground.whatif.score import score, summary
from strategies.sampling.grammar import (
    DEAD_END_REASON,
    GRAMMAR_REASON,
    INCOMPLETE_REASON,
    LIMIT_REASON,
    CompiledGrammar,
    GrammarSpec,
    compile_grammar,
    lark_regex,
)

SMOL = "smollm2-135m"
TOY_RUNS = [  # (strategy, params, seed, grammar): a few toy runs whose every step is checked
    ("sampling", {"temperature": 3.0}, 1, {"kind": "regex", "text": "( a| the| once)( hill| time| upon)( rose| there| a)"}),
    ("sampling", {"temperature": 5.0}, 4, {"kind": "regex", "text": "( once| upon)( a| hill)( time| high)"}),
    ("greedy", {}, 0, {"kind": "choices", "text": json.dumps([" once upon a time", " the hill rose high"])}),
    ("gumbel", {"temperature": 2.0}, 3,
     {"kind": "lark", "text": 'start: WORD WORD WORD\nWORD: " a" | " time" | " hill" | " rose" | " high"'}),
]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def _toy_run(store, strategy, params, seed, grammar, tokens=6, **extra):
    return run(store, Request(model="toy", strategy=strategy, prompt="1 2", params=params, seed=seed,
                              max_new_tokens=tokens, grammar=grammar, **extra))


def _grammar_decision(step):
    stage = next(s for s in step.to_dict()["stages"] if s["name"] == "grammar")
    return stage["decision"]


def _brute_force_mask(matcher, vocab):
    """Every token id tried on a copy of ``matcher`` with its own consume_token, rolled back after."""
    allowed = set()
    probe = matcher.deep_copy()
    for t in range(vocab):
        if probe.consume_token(t):
            allowed.add(t)
            probe.rollback(1)
        else:
            probe = matcher.deep_copy()  # a refused token leaves the matcher in its error state
    return allowed


@pytest.mark.parametrize("strategy, params, seed, grammar", TOY_RUNS)
def test_the_mask_is_the_brute_force_check_and_z_the_mass_of_a_fresh_forward(store, toy, strategy, params, seed,
                                                                             grammar):
    trace = _toy_run(store, strategy, params, seed, grammar)
    assert trace.finish_reason == GRAMMAR_REASON and len(trace.steps) >= 3
    compiled = compile_grammar(GrammarSpec.from_dict(grammar), toy)
    matcher = compiled.matcher()
    prompt = list(trace.prompt_ids)
    with torch.no_grad():
        raw = toy.model(torch.tensor([prompt + trace.token_ids])).logits[0].float().softmax(-1)
    for i, (step, token) in enumerate(zip(trace.steps, trace.token_ids)):
        decision = _grammar_decision(step)
        allowed = _brute_force_mask(matcher, toy.vocab_size)
        assert set(decision["allowed"]) == allowed, (i, decision["allowed"], allowed)
        assert decision["allowed_count"] == len(allowed)
        assert decision["forced"] == (len(allowed) == 1)
        # the stage is first: its input is the model's own distribution at this position
        z = float(raw[len(prompt) - 1 + i, sorted(allowed)].sum())
        assert decision["z"] == pytest.approx(z, abs=2e-6), (i, decision["z"], z)
        assert matcher.consume_token(token)
    assert matcher.is_accepting()


def _finite_language(pattern, pieces, longest=3):
    """The texts of up to ``longest`` vocabulary pieces that match ``pattern`` whole (Python re)."""
    words = [p for p in pieces if p.startswith(" ")]
    return {"".join(seq) for k in range(1, longest + 1) for seq in itertools.product(words, repeat=k)
            if re.fullmatch(pattern, "".join(seq))}


@pytest.mark.parametrize("strategy, params, seed, grammar", [r for r in TOY_RUNS if r[3]["kind"] == "regex"])
def test_a_regex_mask_allows_exactly_the_tokens_that_begin_a_matching_text(store, toy, strategy, params, seed,
                                                                           grammar):
    """A finite regex on toy: a token is allowed iff the text so far plus its piece begins a text of the
    language (Python's re.fullmatch over every text of at most three pieces), or it is the end of text
    after a whole one."""
    pieces = [toy.piece(i) for i in range(toy.vocab_size)]
    language = _finite_language(grammar["text"], pieces)
    assert 4 <= len(language) <= 27
    trace = _toy_run(store, strategy, params, seed, grammar)
    text = ""
    for step, token in zip(trace.steps, trace.token_ids):
        expected = {t for t, piece in enumerate(pieces) if t not in toy.eos_ids and piece.startswith(" ")
                    and any(w.startswith(text + piece) for w in language)}
        expected |= set(toy.eos_ids) if text in language else set()
        assert set(_grammar_decision(step)["allowed"]) == expected, (text, _grammar_decision(step)["allowed"])
        text += pieces[token]
    assert re.fullmatch(grammar["text"], text)


def test_a_grammar_the_vocabulary_cannot_finish_ends_with_no_token_allowed(store):
    # ' the' begins ' there', so the mask allows it; then no toy token spells 're'
    trace = _toy_run(store, "greedy", {}, 0, {"kind": "regex", "text": "( there)+"})
    assert trace.finish_reason == DEAD_END_REASON
    assert trace.text.strip() == "the"


@pytest.mark.parametrize("grammar, says", [
    ({"kind": "lark", "text": 'start: "a" | \nfoo: ('}, r"(?s)at line 2, column 7: Expected token '\)'.*\^"),
    ({"kind": "regex", "text": "(ab"}, r"the regex '\(ab' is not valid: unclosed group"),
    ({"kind": "json", "text": '{"type": "frobnicate"}'}, r'type "frobnicate" is not a JSON type: it must be one of'),
    ({"kind": "lark", "text": "start: foo"}, r'at line 1, column 8: unknown name: "foo"'),
    ({"kind": "json", "text": '{"type": "object",'}, r"does not parse: .* at line 1, column 19"),
])
def test_an_invalid_grammar_is_refused_with_its_problem_and_a_lark_grammars_own_position(store, grammar, says):
    with pytest.raises(InvalidRequest, match=says):
        _toy_run(store, "greedy", {}, 0, grammar)


def test_a_forced_token_the_grammar_forbids_is_refused_also_through_a_branch(store):
    grammar = {"kind": "regex", "text": "( a| the)( hill| time)"}
    with pytest.raises(InvalidRequest, match=r"grammar does not allow token 1 here: .*\" once\""):
        _toy_run(store, "greedy", {}, 0, grammar, forced={0: " once"})
    parent = _toy_run(store, "sampling", {}, 0, grammar).to_dict()
    assert parent["grammar"] == grammar
    settings = branch_settings(parent, 1, " rose")
    assert settings["grammar"] == grammar
    with pytest.raises(InvalidRequest, match=r"grammar does not allow token 11 here: .*\" rose\""):
        run(store, Request(**settings, max_new_tokens=4))
    allowed = run(store, Request(**branch_settings(parent, 1, " time" if "hill" in parent["text"] else " hill"),
                                 max_new_tokens=4))
    assert allowed.finish_reason == GRAMMAR_REASON and len(allowed.token_ids) == 2


def test_score_says_where_a_text_leaves_the_grammar(store):
    grammar = {"kind": "regex", "text": "( the| hill| rose)+"}
    inside = summary(score(store, "toy", "the hill rose", "1 2", grammar=grammar))
    assert inside["grammar"] == {"leaves_at": None, "token": None, "message": "", "whole": True}
    assert [t["grammar_allowed"] for t in inside["tokens"]] == [3, 4, 4]  # the 3 words, then those and eos
    out = summary(score(store, "toy", "the hill time rose", "1 2", grammar=grammar))
    assert out["grammar"]["leaves_at"] == 2 and out["grammar"]["token"] == " time"
    assert "doesn't satisfy the grammar" in out["grammar"]["message"]
    assert out["tokens"][3]["grammar_allowed"] is None  # past the exit nothing is checked


def test_batched_sample_many_under_a_grammar_equals_single_runs_seed_by_seed(store):
    grammar = {"kind": "regex", "text": "( a| the| once)( hill| time| upon)( rose| high| a)?"}
    common = dict(model="toy", strategy="sampling", prompt="1 2", params={"temperature": 4.0}, seed=20,
                  max_new_tokens=5, grammar=grammar)
    result = sample_many(store, Request(**common), 60)
    assert result["batched"] and len(result["outcomes"]) >= 5
    by_seed = {s: o["ids"] for o in result["outcomes"] for s in o["seeds"]}
    for seed in range(20, 80, 7):
        trace = run(store, Request(**dict(common, seed=seed)))
        assert trace.token_ids == by_seed[seed], seed
    assert result["chi_square"]["p_value"] > 1e-3
    gap = result["grammar"]
    assert gap["enumerated"] and sum(v["masked"] for v in gap["valid"]) == pytest.approx(1.0, abs=1e-6)
    assert sum(v["conditional"] for v in gap["valid"]) == pytest.approx(1.0, abs=1e-9)
    assert gap["invalid_frequency"] == 0.0


def test_cli_grammar_flags_make_the_grammar_dict(tmp_path):
    parser = add_grammar_flags(argparse.ArgumentParser())
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    assert grammar_of_args(parser.parse_args([])) is None
    assert grammar_of_args(parser.parse_args(["--grammar-json", str(schema)])) == {"kind": "json",
                                                                                  "text": json.dumps(PERSON)}
    assert grammar_of_args(parser.parse_args(["--grammar-json", '{"type": "integer"}']))["text"] == '{"type": "integer"}'
    assert grammar_of_args(parser.parse_args(["--grammar-regex", r"\d+"])) == {"kind": "regex", "text": r"\d+"}
    assert grammar_of_args(parser.parse_args(["--grammar-choices", "yes | no"]))["kind"] == "choices"
    assert grammar_of_args(parser.parse_args(["--grammar-lark", 'start: "x"']))["kind"] == "lark"
    with pytest.raises(SystemExit):
        parser.parse_args(["--grammar-regex", "a", "--grammar-choices", "b"])


def test_greedy_with_a_choice_list_on_smollm2_writes_one_of_the_choices(store):
    choices = ["yes", "no", "maybe"]
    trace = run(store, Request(model=SMOL, strategy="greedy", prompt="Is the sky blue on a clear day? Answer yes, "
                               "no or maybe.", params={}, max_new_tokens=8,
                               grammar={"kind": "choices", "text": " | ".join(choices)}))
    assert trace.text in choices, trace.text
    assert trace.finish_reason == GRAMMAR_REASON


def test_fifty_seeded_sampling_runs_on_smollm2_with_a_json_schema_parse_and_validate(store):
    req = Request(model=SMOL, strategy="sampling", prompt="Give a JSON object for a person named Ada, 36.",
                  params={}, seed=0, max_new_tokens=40, grammar={"kind": "json", "text": json.dumps(PERSON)})
    result = sample_many(store, req, 50)  # seeds 0..49 as rows of one batched decode
    assert result["batched"] and sum(o["count"] for o in result["outcomes"]) == 50
    for o in result["outcomes"]:
        if o["count"]:
            jsonschema.validate(json.loads(o["text"]), PERSON)
    assert result["grammar"]["enumerated"] is False  # far too many valid texts to enumerate
    for seed in (0, 1):  # and a seed's own run writes its row's text
        trace = run(store, dataclasses.replace(req, seed=seed))
        row = next(o for o in result["outcomes"] if seed in o["seeds"])
        assert trace.text == row["text"] and trace.finish_reason == GRAMMAR_REASON


def _takes(grammar, lm, text):
    m = grammar.matcher()
    return all(m.consume_token(t) for t in lm.tokenizer.encode(text, add_special_tokens=False)) and m.is_accepting()


def test_a_json_schema_bounds_its_whitespace_unless_the_schema_sets_it(smollm):
    """llguidance's default allows any run of whitespace where JSON does (SmolLM2 spent up to 39% of a
    sample's tokens there): one space, or a line break and at most 16 spaces or tabs, is what is allowed;
    the schema's own x-guidance whitespace setting is kept."""
    bounded = compile_grammar(GrammarSpec("json", json.dumps(PERSON)), smollm)
    for text in ('{"name":"Ada","age":36}', '{"name": "Ada", "age": 36}', '{\n  "name": "Ada",\n  "age": 36\n}',
                 '{\n' + " " * 16 + '"name": "Ada", "age": 36}'):
        assert _takes(bounded, smollm, text), text
    for text in ('{  "name": "Ada", "age": 36}', '{\n\n"name": "Ada", "age": 36}',
                 '{\n' + " " * 17 + '"name": "Ada", "age": 36}', '{"name": "Ada",' + " " * 40 + '"age": 36}'):
        assert not _takes(bounded, smollm, text), text
    free = compile_grammar(GrammarSpec("json", json.dumps({**PERSON, "x-guidance": {"whitespace_flexible": True}})),
                           smollm)
    assert _takes(free, smollm, '{  "name": "Ada",' + " " * 40 + '"age": 36}')
    compact = compile_grammar(GrammarSpec("json", json.dumps({**PERSON, "x-guidance": {"whitespace_flexible": False}})),
                              smollm)
    assert _takes(compact, smollm, '{"name":"Ada","age":36}') and not _takes(compact, smollm, '{"name": "Ada", "age": 36}')


@pytest.mark.parametrize("regex, lark", [
    (r"\d{2}/\d{2}", r"[0-9]{2}\/[0-9]{2}"),
    (r"\d{2}\/\d{2}", r"[0-9]{2}\/[0-9]{2}"),  # already escaped: one regex with the line above
    (r"[\d.]+", r"[0-9.]+"),
    (r"[^\d]\D", r"[^0-9][^0-9]"),
    (r"\\d", r"\\d"),  # an escaped backslash, then a d
    (r"\\/", r"\\\/"),  # an escaped backslash, then a slash to escape
    (r"a[]/]b", r"a[]\/]b"),  # a ] first in a class is a character
])
def test_a_regex_reads_as_a_person_wrote_it(toy, regex, lark):
    assert lark_regex(regex) == lark
    compile_grammar(GrammarSpec("regex", regex), toy)  # and llguidance takes it


def test_digits_in_a_regex_are_ascii_on_smollm2(store):
    """Rust's \\d is any Unicode digit: SmolLM2 greedy wrote emoji digits for this date and never finished."""
    for regex in (r"\d{2}/\d{2}", r"\d{2}\/\d{2}"):
        trace = run(store, Request("smollm2-135m", "greedy", "Today's date as DD/MM?", max_new_tokens=12,
                                   grammar={"kind": "regex", "text": regex})).to_dict()
        assert re.fullmatch(r"[0-9]{2}/[0-9]{2}", trace["text"]), trace["text"]
        assert trace["finish_reason"] == GRAMMAR_REASON, trace["finish_reason"]


def test_a_search_that_dies_before_the_limit_says_no_token_was_allowed(store):
    """Every stochastic beam hits the dead end of ' the' under ( there)+ at the first step: that is no
    token allowed, not 'no whole text within max_new_tokens' (which a search that reached the limit
    without a whole text still says)."""
    dead = _toy_run(store, "stochastic_beam", {}, 0, {"kind": "regex", "text": "( there)+"}, tokens=10)
    assert dead.finish_reason == DEAD_END_REASON and len(dead.to_dict()["beam"]["nodes"]) < 10
    short = _toy_run(store, "stochastic_beam", {}, 0, {"kind": "regex", "text": "( once| upon)+ ( a)"}, tokens=10)
    assert short.finish_reason == INCOMPLETE_REASON
    # it searched to the limit: at its last step (9) no candidate was a whole text, so none entered the tree
    assert max(n["step"] for n in short.to_dict()["beam"]["nodes"]) == 8


def test_the_grammar_help_says_what_a_regex_digit_and_json_whitespace_are():
    """Rust's \\d is any Unicode digit and llguidance's JSON any whitespace: the page's and the command
    line's help say what the project's are."""
    regex_help = GRAMMAR_HELP.split("- **regex**")[1].split("- **choices**")[0]
    json_help = GRAMMAR_HELP.split("- **json**")[1].split("- **regex**")[0]
    assert "ASCII digit" in regex_help and "ASCII digit" in CLI_HELP["regex"]
    assert "16 spaces" in json_help and "16 spaces" in CLI_HELP["json"]


class LimitedMatcher:
    """A matcher that reaches llguidance's item limit at its ``at``-th token (its mask allowed it)."""

    def __init__(self, inner, at: int) -> None:
        self.inner, self.left = inner, at

    def consume_token(self, token: int) -> bool:
        self.left -= 1
        return self.inner.consume_token(token) if self.left >= 0 else False

    def get_error(self) -> str:
        return "Too many items (limit 50000); try making the grammar more specific"

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_parser_limit_mid_run_ends_the_run_with_the_limit_named_and_the_text_kept(store, monkeypatch):
    grammar = {"kind": "regex", "text": "( a| the| once| upon| time| hill| rose| there| high)+"}
    free = _toy_run(store, "sampling", {"temperature": 1.0}, 2, grammar, tokens=8)
    make = CompiledGrammar.matcher
    monkeypatch.setattr(CompiledGrammar, "matcher", lambda self: LimitedMatcher(make(self), 3))
    trace = _toy_run(store, "sampling", {"temperature": 1.0}, 2, grammar, tokens=8).to_dict()
    assert trace["finish_reason"] == LIMIT_REASON and trace["tokens"] == free.to_dict()["tokens"][:3]
    assert "Too many items (limit 50000)" in trace["grammar_limit"]
    assert "Too many items (limit 50000)" in status_html(trace, final=True)
    # a refusal that is no limit stays a refusal of the token
    monkeypatch.setattr(LimitedMatcher, "get_error", lambda self: "token not allowed")
    with pytest.raises(InvalidRequest, match="the grammar does not allow token"):
        _toy_run(store, "sampling", {"temperature": 1.0}, 2, grammar, tokens=8)
