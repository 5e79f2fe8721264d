"""Thinking and answering (strategies/phases.py): each phase's steps run its own chain, the budget forces the
marker at exactly N committed tokens, and a forced token records what the model gave it.

On toy, whose text is 'once upon a time there lived happily ever' (or '... the hill rose high ...'), the
word ``time`` stands in for a thinking close: the phase marker is named, as a model without ``</think>``
needs it to be."""
from __future__ import annotations

import math

import pytest
import torch

from playground.charts.phases import phase_line
from playground.charts.text import token_html
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.whatif.sample_many import sample_many
from strategies.phases import PHASE_FIELDS, PhaseParams
from strategies.sampling.samplers import SamplerParams

MARKER = {"phase_marker": "time"}


def traced(store, strategy, params, seed=0, tokens=10, prompt="1 2"):
    return run(store, Request(model="toy", strategy=strategy, prompt=prompt, params=params, seed=seed,
                              max_new_tokens=tokens)).to_dict()


def test_each_phase_runs_its_own_chain_and_its_steps_say_which(store):
    """After 'once', thinking to 'upon' at T 1, the answer at T 0.5 with top-k 2: every answer step's final distribution is the raw one
    squared and cut to two tokens, every thinking step's is the raw one, and the stages recorded are the
    phase's chain."""
    params = {"phase_marker": "upon", "answer_params": '{"temperature": 0.5, "top_k": 2}'}
    for seed in range(4):
        trace = traced(store, "sampling", params, seed=seed, prompt="1")
        phases = trace["phases"]
        assert phases["answer_params"] == {"temperature": 0.5, "top_k": 2}
        assert phases["answer_chain"] == ["temperature", "top_k"]
        start = phases["answer_from"]
        assert start == 1 and trace["tokens"][0]["text"].strip() == "upon"  # the answer holds the 70/30 branch
        for i, step in enumerate(trace["steps"]):
            assert step["phase"] == ("thinking" if i < start else "answer")
            names = [s["name"] for s in step.get("stages") or []]
            raw = {c["id"]: c["raw_prob"] for c in step["candidates"]}
            final = {c["id"]: c["prob"] for c in step["candidates"]}
            if i < start:
                assert names == []  # the thinking's chain is empty: the model's own distribution
                assert all(math.isclose(final[t], raw[t], rel_tol=1e-4, abs_tol=1e-7) for t in raw)
                continue
            assert names == ["raw", "temperature", "top_k"]
            top2 = sorted(raw, key=lambda t: -raw[t])[:2]
            norm = sum(raw[t] ** 2 for t in top2)
            for t in raw:
                want = raw[t] ** 2 / norm if t in top2 else 0.0
                assert math.isclose(final[t], want, rel_tol=2e-3, abs_tol=1e-6), (seed, i, t)


def test_phases_that_only_record_change_no_token(store):
    """A marker with no budget and no answer chain records the phases and draws what the plain run draws."""
    for seed in range(3):
        plain = traced(store, "sampling", {"temperature": 1.3}, seed=seed)
        marked = traced(store, "sampling", {"temperature": 1.3, **MARKER}, seed=seed)
        assert [t["id"] for t in marked["tokens"]] == [t["id"] for t in plain["tokens"]]
        assert "phases" not in plain and marked["phases"]["budget"] == -1


@pytest.mark.parametrize("strategy", ["greedy", "sampling", "gumbel"])
@pytest.mark.parametrize("budget", [0, 1, 2])
def test_the_budget_forces_the_marker_at_exactly_n_tokens(store, toy, strategy, budget):
    """With ``ever`` as the marker (the model writes it at step 6) and a budget of N, steps 0..N-1 are the
    model's, step N is the forced marker, and its recorded log-probability and rank are the model's own at
    that text, read back with a fresh forward pass."""
    trace = traced(store, strategy, {"phase_marker": "ever", "thinking_budget": budget}, seed=5)
    steps, ids = trace["steps"], [t["id"] for t in trace["tokens"]]
    marker = trace["phases"]["marker_ids"][0]
    assert ids[budget] == marker and marker not in ids[:budget]
    assert [bool(s.get("forced")) for s in steps[:budget + 1]] == [False] * budget + [True]
    assert steps[budget]["forced"] == "budget"
    assert trace["phases"]["cut"]["step"] == budget and trace["phases"]["cut"]["thinking_tokens"] == budget
    assert trace["phases"]["answer_from"] == budget + 1
    with torch.no_grad():
        logits = toy.forward(torch.tensor([trace["prompt_ids"] + ids[:budget]])).logits[0, -1]
    logp = logits.float().log_softmax(-1)
    assert math.isclose(steps[budget]["model_logprob"], float(logp[marker]), abs_tol=1e-5)
    assert steps[budget]["model_rank"] == 1 + int((logp > logp[marker]).sum())
    assert math.isclose(trace["phases"]["cut"]["marker_p"], math.exp(float(logp[marker])), rel_tol=1e-4)
    assert "thinking cut at" in phase_line(trace) and "pg-thinking" in token_html(trace)


def test_a_budget_message_is_forced_before_the_marker(store):
    trace = traced(store, "greedy", {"phase_marker": "ever", "thinking_budget": 2, "budget_message": "the hill"})
    words = [t["text"].strip() for t in trace["tokens"]]
    assert words[:5] == ["a", "time", "the", "hill", "ever"]
    assert [s.get("forced") for s in trace["steps"][:5]] == [None, None, "budget", "budget", "budget"]
    assert trace["phases"]["cut"]["marker_p"] is None and trace["phases"]["answer_from"] == 5


def test_a_model_that_closes_its_thinking_itself_is_not_cut(store):
    trace = traced(store, "greedy", {"phase_marker": "time", "thinking_budget": 5})
    assert trace["phases"]["cut"] is None and trace["phases"]["answer_from"] == 2
    assert not any(s.get("forced") for s in trace["steps"])
    assert "closed by the model's own time" in phase_line(trace)


def test_sample_many_draws_a_budgeted_run_one_by_one(store):
    """A run whose tokens come from two chains has no one exact reference: sample many runs it one by one."""
    req = Request(model="toy", strategy="sampling", prompt="1 2", max_new_tokens=4,
                  params={"phase_marker": "time", "thinking_budget": 0})
    out = sample_many(store, req, 6)
    assert out["batched"] is False and out["chi_square"] is None
    assert all(o["text"].split()[0] == "time" for o in out["outcomes"])


@pytest.mark.parametrize("params, words", [
    ({"answer_params": '{"temperature": -1}'}, "answer_params: temperature must be in [0, 100], got -1"),
    ({"answer_params": '{"bogus": 1}'}, "answer_params: 'bogus' is not a parameter of the chain"),
    ({"answer_params": '{"watch": "a"}'}, "answer_params: 'watch' is not a parameter of the chain"),
    ({"answer_params": "[1, 2]"}, "answer_params must be a JSON object"),
    ({"answer_params": "{"}, "answer_params must be a JSON object"),
    ({"thinking_budget": -2}, "thinking_budget must be"),
    ({"phase_marker": "x" * 65}, "phase_marker must be at most 64 characters"),
])
def test_bad_phase_settings_name_the_value(params, words):
    assert set(params) <= set(PHASE_FIELDS) and issubclass(SamplerParams, PhaseParams)
    with pytest.raises(InvalidRequest, match=None) as err:
        SamplerParams.from_dict(params)
    assert words in str(err.value)


def test_a_budget_on_a_model_without_a_thinking_close_asks_for_a_marker(store):
    with pytest.raises(InvalidRequest, match="thinking_budget 3 needs a phase marker: toy has no thinking close"):
        traced(store, "greedy", {"thinking_budget": 3})
    with pytest.raises(InvalidRequest, match="phase_marker must be text toy can write"):
        traced(store, "greedy", {"phase_marker": "zebra", "thinking_budget": 3})


@pytest.mark.parametrize("draft", ["toy-small", "prompt_lookup", "early_exit"])
def test_speculative_budgets_count_committed_tokens_never_drafts(store, draft):
    """Drafting 4 a round, the marker still comes at exactly step N: gamma is capped by the thinking left, and
    the forced token is committed with no draft (vLLM #54906: a budget ignored under speculative decoding)."""
    for budget in (0, 1, 3, 4):
        for seed in range(2):
            trace = traced(store, "speculative", {"draft": draft, "gamma": 4, "phase_marker": "ever",
                                                  "thinking_budget": budget, "measure_baseline": False}, seed=seed)
            ids = [t["id"] for t in trace["tokens"]]
            marker = trace["phases"]["marker_ids"][0]
            assert ids[budget] == marker and marker not in ids[:budget], (draft, budget, seed, ids)
            assert [s.get("forced") for s in trace["steps"][:budget + 1]] == [None] * budget + ["budget"]
            assert all(s["phase"] == "answer" for s in trace["steps"][budget + 1:])


def test_speculative_switches_chains_losslessly_inside_a_round(store):
    """After 'once', thinking closes at 'upon' (T 1) and the answer runs at T 0.5. The first round drafts
    past 'upon'; it is cut there, so the 70/30 branch that follows is drawn at T 0.5 (p(a) = 0.7² / (0.7² +
    0.3²) ≈ 0.84), not at the thinking's T 1 (0.7). 300 runs, a z-test against each."""
    n, hits, switched = 300, 0, 0
    params = {"draft": "toy-small", "gamma": 4, "phase_marker": "upon", "answer_params": '{"temperature": 0.5}',
              "measure_baseline": False}
    p_raw = None
    for seed in range(n):
        trace = traced(store, "speculative", params, seed=seed, tokens=3, prompt="1")
        hits += trace["tokens"][1]["text"].strip() == "a"
        switched += any(r.get("phase_switch") for r in trace["rounds"])
        cands = {c["text"].strip(): c["raw_prob"] for c in trace["steps"][1]["candidates"]}
        p_raw = p_raw or cands["a"] / (cands["a"] + cands["the"])
    assert p_raw is not None and switched > n // 2  # most first rounds did run past the marker
    answer = p_raw ** 2 / (p_raw ** 2 + (1 - p_raw) ** 2)
    sd = math.sqrt(answer * (1 - answer) / n)
    assert abs(hits / n - answer) < 4 * sd, (hits / n, answer)
    assert abs(hits / n - p_raw) > 4 * math.sqrt(p_raw * (1 - p_raw) / n), (hits / n, p_raw)


def marker_at(ids, marker, budget, eos):
    """The budget's rule on one text: the marker is its token ``budget`` and not before (a text that ends
    sooner, at an end of text, is never cut)."""
    if len(ids) <= budget:
        return marker not in ids and ids[-1] in eos
    return ids[budget] == marker and marker not in ids[:budget]


def path_ids(nodes, node_id):
    """The token ids from the first generated token down to a node of the beam tree (none for None)."""
    ids = []
    while node_id is not None:
        ids.insert(0, nodes[node_id]["token_id"])
        node_id = nodes[node_id]["parent"]
    return ids


@pytest.mark.parametrize("budget", [0, 1, 2, 3])
@pytest.mark.parametrize("beams", [{"num_beams": 2}, {"num_beams": 3}, {"num_beams": 2, "finishing": "keep_slot"}])
def test_beam_budgets_force_the_marker_on_every_hypothesis(store, toy, budget, beams):
    """Each hypothesis has its own clock: the best path, every finished hypothesis and every node of the tree
    that reaches N thinking tokens continue with the marker there and nothing else; the forced step records
    the model's own log-probability and rank, read back with a fresh forward pass."""
    trace = traced(store, "beam", {**beams, "phase_marker": "ever", "thinking_budget": budget})
    steps, ids, eos = trace["steps"], [t["id"] for t in trace["tokens"]], toy.eos_ids
    marker = trace["phases"]["marker_ids"][0]
    assert marker_at(ids, marker, budget, eos) and ids[budget] == marker
    assert [s.get("forced") for s in steps[:budget + 1]] == [None] * budget + ["budget"]
    assert [s["phase"] for s in steps] == ["thinking"] * (budget + 1) + ["answer"] * (len(steps) - budget - 1)
    assert trace["phases"]["cut"]["step"] == budget and trace["phases"]["answer_from"] == budget + 1
    assert trace["beam"]["finished"] and all(marker_at(f["token_ids"], marker, budget, eos)
                                             for f in trace["beam"]["finished"])
    nodes = trace["beam"]["nodes"]
    cut = [n for n in nodes if n["step"] == budget and marker not in path_ids(nodes, n["parent"])]
    assert cut and all(n["token_id"] == marker and n["forced"] == "budget" for n in cut)
    assert not any(n.get("forced") for n in nodes if n not in cut)
    with torch.no_grad():
        logits = toy.forward(torch.tensor([trace["prompt_ids"] + ids[:budget]])).logits[0, -1]
    logp = logits.float().log_softmax(-1)
    assert math.isclose(steps[budget]["model_logprob"], float(logp[marker]), abs_tol=1e-5)
    assert steps[budget]["model_rank"] == 1 + int((logp > logp[marker]).sum())
    assert math.isclose(trace["phases"]["cut"]["marker_p"], math.exp(float(logp[marker])), rel_tol=1e-4)
    best = trace["beam"]["finished"][0]
    assert math.isclose(best["score"], sum(t["raw_logprob"] for t in trace["tokens"]), abs_tol=1e-3)


def test_beam_forces_a_budget_message_before_the_marker_on_every_hypothesis(store):
    trace = traced(store, "beam", {"num_beams": 3, "phase_marker": "ever", "thinking_budget": 2,
                                   "budget_message": "the hill"})
    assert [t["text"].strip() for t in trace["tokens"]][:5] == ["a", "time", "the", "hill", "ever"]
    assert [s.get("forced") for s in trace["steps"][:6]] == [None, None, "budget", "budget", "budget", None]
    assert trace["phases"]["cut"]["marker_p"] is None and trace["phases"]["answer_from"] == 5
    assert all(f["text"].split()[2:5] == ["the", "hill", "ever"] for f in trace["beam"]["finished"])


@pytest.mark.parametrize("beams", [2, 3])
def test_beam_with_a_marker_and_no_budget_is_the_plain_beam(store, beams):
    plain = traced(store, "beam", {"num_beams": beams})
    marked = traced(store, "beam", {"num_beams": beams, **MARKER})
    assert [t["id"] for t in marked["tokens"]] == [t["id"] for t in plain["tokens"]]
    assert [(f["token_ids"], f["score"]) for f in marked["beam"]["finished"]] == \
        [(f["token_ids"], f["score"]) for f in plain["beam"]["finished"]]
    assert len(marked["beam"]["nodes"]) == len(plain["beam"]["nodes"])
    assert [s["phase"] for s in marked["steps"]][:3] == ["thinking", "thinking", "answer"]
    assert marked["phases"]["answer_from"] == 2 and marked["phases"]["cut"] is None and "phases" not in plain


def test_beam_refuses_answer_params_and_sample_beam_a_budget_inside_its_prefix(store):
    with pytest.raises(InvalidRequest, match="answer_params: this strategy has no sampler chain to change in the "
                                             "answer, got 'temperature'"):
        traced(store, "beam", {"phase_marker": "ever", "answer_params": '{"temperature": 0.5}'})
    with pytest.raises(InvalidRequest, match="answer_params: sample_beam's chain samples only the prefix"):
        traced(store, "sample_beam", {"phase_marker": "ever", "answer_params": '{"temperature": 0.5}'})
    with pytest.raises(InvalidRequest, match="thinking_budget 1 would cut the sampled prefix"):
        traced(store, "sample_beam", {"phase_marker": "ever", "thinking_budget": 1, "prefix_tokens": 2})


@pytest.mark.parametrize("budget", [2, 3])
def test_sample_beam_budgets_count_the_prefix(store, toy, budget):
    """The beam after a sampled prefix starts its clocks from the prefix's text: the marker comes at token N."""
    for seed in range(2):
        trace = traced(store, "sample_beam", {"num_beams": 2, "prefix_tokens": 2, "phase_marker": "ever",
                                              "thinking_budget": budget}, seed=seed)
        ids, marker = [t["id"] for t in trace["tokens"]], trace["phases"]["marker_ids"][0]
        assert ids[budget] == marker and trace["steps"][budget]["forced"] == "budget"
        assert all(marker_at(f["token_ids"], marker, budget, toy.eos_ids) for f in trace["beam"]["finished"])


def test_the_thinking_toys_accuracy_rises_with_its_budget(store):
    """toy-think counts up from a, b steps between <think> and </think>, then answers the last number it counted:
    cut short, it answers wrong. Sampling at T 1 over 30 pairs (a fixed draw), one seed each, under budgets of
    2, 5 and 12 thinking tokens: about 0.2, 0.5 and 1.0 right (the share of pairs with b < budget)."""
    import random
    rng = random.Random(61)
    pairs = [(rng.randrange(10), rng.randrange(10)) for _ in range(30)]
    accuracy = {}
    for budget in (2, 5, 12):
        right = 0
        for seed, (a, b) in enumerate(pairs):
            trace = run(store, Request(model="toy-think", strategy="sampling", prompt=f"{a} + {b} =", seed=seed,
                                       max_new_tokens=14, params={"thinking_budget": budget})).to_dict()
            answer = trace["text"].split("</think>")[-1].split()
            right += answer[:1] == [str(a + b)]
            assert trace["phases"]["marker"] == "</think>"  # the tokenizer's own close, unnamed
        accuracy[budget] = right / len(pairs)
    assert accuracy[2] <= 0.4 and accuracy[12] >= 0.9, accuracy
    assert accuracy[2] + 0.15 < accuracy[5] < accuracy[12] - 0.15, accuracy


def test_the_beam_tree_rings_the_nodes_the_budget_forced(store):
    from playground.charts.beam import hover, tree_figure
    trace = run(store, Request(model="toy-think", strategy="beam", prompt="3 + 6 =", max_new_tokens=10,
                               params={"num_beams": 2, "thinking_budget": 3})).to_dict()
    forced = [n for n in trace["beam"]["nodes"] if n.get("forced") == "budget"]
    assert forced and all(n["step"] == 3 and n["text"] == "</think>" for n in forced)
    ring = [t for t in tree_figure(trace).data if (t.meta or {}).get("role") == "forced"]
    assert len(ring) == 1 and list(ring[0].customdata) == [n["id"] for n in forced]
    assert "forced by the thinking budget" in hover(forced[0], "score")
