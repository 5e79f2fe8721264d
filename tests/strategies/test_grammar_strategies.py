"""The grammar in the strategies beyond the sampling loop: beam search (one matcher per hypothesis,
copied when beams fork), sample-then-beam, stochastic beams, speculative decoding (the target is the
constrained target: greedy stays greedy, sampling stays lossless) and contrastive decoding."""
from __future__ import annotations

import json
from collections import Counter

import jsonschema
import numpy as np
import pytest
import torch
from scipy import stats

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models import ModelStore
from strategies.sampling.grammar import INCOMPLETE_REASON, Grammar, GrammarSpec, compile_grammar

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}
JSON = {"kind": "json", "text": json.dumps(SCHEMA)}
PROMPT = "Give a JSON object for a person named Ada, 36."
# toy's words, less the two that are byte-prefixes of each other (" the", " there")
TOY_WORDS = {"kind": "regex", "text": "( once| upon| a| time| lived| happily| ever| hill| rose| high)+"}


@pytest.fixture(scope="module")
def store() -> ModelStore:
    return ModelStore()


def valid(text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


@pytest.mark.parametrize("strategy,params", [
    ("beam", {"num_beams": 3}),
    ("beam", {"num_beams": 3, "finishing": "keep_slot"}),
    ("sample_beam", {"num_beams": 2, "prefix_tokens": 3, "num_prefixes": 2}),
    ("stochastic_beam", {"num_beams": 3}),
])
def test_every_finished_hypothesis_of_a_search_is_valid(store, strategy, params):
    trace = run(store, Request("smollm2-135m", strategy, PROMPT, params, max_new_tokens=30, grammar=JSON))
    texts = [h["text"] for h in trace.beam["finished"]]
    assert texts, trace.finish_reason
    assert all(valid(t) for t in texts), texts
    assert valid(trace.text)
    names = [s.name for s in trace.steps[0].stages]
    assert "grammar" in names and trace.steps[0].stages[names.index("grammar")].decision["allowed_count"] == 2


@pytest.mark.parametrize("strategy", ["beam", "stochastic_beam"])
def test_a_search_with_no_whole_text_in_its_budget_says_so(store, strategy):
    trace = run(store, Request("smollm2-135m", strategy, PROMPT, {"num_beams": 2}, max_new_tokens=4, grammar=JSON))
    assert trace.finish_reason == INCOMPLETE_REASON
    assert trace.beam["finished"] == [] and trace.text == ""


def test_beam_under_a_choice_list_returns_choices(store):
    trace = run(store, Request("smollm2-135m", "beam", "Is the sea blue? Answer yes, no or maybe.", {"num_beams": 3},
                               max_new_tokens=6, grammar={"kind": "choices", "text": "yes | no | maybe"}))
    assert {h["text"] for h in trace.beam["finished"]} <= {"yes", "no", "maybe"}
    assert trace.text in ("yes", "no", "maybe")


@pytest.mark.parametrize("params", [{"draft": "early_exit"}, {"draft": "prompt_lookup"},
                                    {"draft": "early_exit", "verify": "topk", "verify_top_k": 1}])
def test_greedy_speculative_under_a_grammar_is_greedy_under_it(store, params):
    greedy = run(store, Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=40, grammar=JSON))
    spec = run(store, Request("smollm2-135m", "speculative", PROMPT, {**params, "temperature": 0.0},
                              max_new_tokens=40, grammar=JSON))
    assert spec.token_ids == greedy.token_ids
    assert spec.finish_reason == greedy.finish_reason == "grammar complete"


def test_sampled_speculative_texts_follow_the_schema(store):
    for seed in range(4):
        trace = run(store, Request("smollm2-135m", "speculative", PROMPT, {"draft": "early_exit"}, seed=seed,
                                   max_new_tokens=48, grammar=JSON))
        assert trace.finish_reason == "grammar complete" and valid(trace.text), trace.text


LENGTH = 3
N = 800


def constrained_exact(lm, prompt_ids: list[int], spec: GrammarSpec) -> dict[tuple[int, ...], float]:
    """Each continuation of LENGTH tokens (or fewer, ending at <eos>) under the constrained target:
    the product of the model's distributions renormalised over what the grammar allows."""
    compiled = compile_grammar(spec, lm)
    done: dict[tuple[int, ...], float] = {}
    frontier = [((), 1.0)]
    with torch.inference_mode():
        for position in range(LENGTH):
            grown = []
            for text, p in frontier:
                stage = Grammar(compiled)
                for t in text:
                    stage.advance([0], [t])
                context = torch.tensor([prompt_ids + list(text)])
                logits, _ = stage.decide(lm.forward(context).logits[:, -1], context)
                probs = logits.softmax(-1)[0]
                for token in (probs > 0).nonzero().flatten().tolist():
                    item = (text + (token,), p * float(probs[token]))
                    ends = token in lm.eos_ids or position == LENGTH - 1
                    (done.__setitem__(*item) if ends else grown.append(item))
            frontier = grown
    return done


def chi_square_p(samples: list[tuple[int, ...]], expected: dict[tuple[int, ...], float]) -> float:
    counts = Counter(samples)
    assert set(counts) <= set(expected), set(counts) - set(expected)
    cells = sorted(expected, key=lambda c: -expected[c])
    obs = np.array([counts[c] for c in cells], dtype=float)
    exp = np.array([expected[c] for c in cells]) * len(samples)
    big = exp >= 5
    obs, exp = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp = exp * obs.sum() / exp.sum()  # the cells' rounding, so that the two sums agree
    return float(stats.chisquare(obs, exp).pvalue)


def test_speculative_sampling_under_a_grammar_is_the_constrained_target(store):
    """toy-small drafts without the grammar (it proposes " the" and " there", which the grammar
    forbids); the committed text still follows the constrained target's distribution exactly."""
    lm = store.get("toy")
    prompt_ids = lm.encode("1 2")
    samples, rejected = [], 0
    for seed in range(N):
        trace = run(store, Request("toy", "speculative", "1 2", {"draft": "toy-small", "gamma": 3, "measure_baseline": False}, seed=seed,
                                   max_new_tokens=LENGTH, grammar=TOY_WORDS))
        samples.append(tuple(trace.token_ids))
        rejected += sum(1 for r in trace.rounds for d in r["draft"] if not d["accepted"])
    assert rejected > 50  # the draft really proposed what the grammar forbids
    exact = constrained_exact(lm, prompt_ids, GrammarSpec(**TOY_WORDS))
    assert chi_square_p(samples, exact) > 1e-3
    # the same samples against the model's own words (no cut of " the" and " there"): decisively not it
    assert chi_square_p(samples, constrained_exact(lm, prompt_ids, GrammarSpec("regex", "( [a-z]+)+"))) < 1e-6


def test_contrastive_follows_the_grammar_and_records_it_first(store):
    trace = run(store, Request("smollm2-135m", "contrastive", PROMPT, max_new_tokens=40, grammar=JSON))
    assert trace.finish_reason == "grammar complete" and valid(trace.text)
    assert [s.name for s in trace.steps[0].stages][:3] == ["raw", "grammar", "contrastive"]
    assert trace.chain[0] == "grammar"


def test_a_forced_token_the_grammar_forbids_is_refused_in_contrastive(store):
    with pytest.raises(InvalidRequest, match="grammar does not allow"):
        run(store, Request("smollm2-135m", "contrastive", PROMPT, max_new_tokens=5, grammar=JSON,
                           forced={0: "Hello"}))


def test_eagle_drafts_refuse_a_grammar_by_name(store):
    with pytest.raises(InvalidRequest, match="eagle"):
        run(store, Request("smollm2-135m", "speculative", PROMPT, {"draft": "eagle"}, max_new_tokens=5, grammar=JSON))


def test_the_order_places_the_grammar(store):
    order = "penalty,temperature,top_k,grammar,top_p,min_p"
    trace = run(store, Request("toy", "speculative", "1 2", {"draft": "toy-small", "top_k": 5, "top_p": 0.9,
                                                            "order": order}, max_new_tokens=3, grammar=TOY_WORDS))
    assert trace.chain[:3] == ["top_k", "grammar", "top_p"]
    default = run(store, Request("toy", "speculative", "1 2", {"draft": "toy-small", "top_k": 5},
                                 max_new_tokens=3, grammar=TOY_WORDS))
    assert default.chain[0] == "grammar"
