"""Beam search family: parity with transformers, exactness, pruning rules, sampling without
replacement, the tree chart, validation.

Most tests run on the toy model (vocab 16) or on a fake model with a fixed logit table; one
parity test loads SmolLM2. Tiny models are latency-bound, so the module runs torch on one
thread (restored afterwards): with two threads on a busy machine a toy forward pass is
tens of times slower.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch
from beam_fakes import FakeLM, check_two_draws_without_replacement, final

from playground.charts.beam import DENSE, tree_figure, views
from playground.engine import Request, prepare
from playground.errors import InvalidRequest
from strategies.beam.beam import BeamParams, beam
from strategies.beam.prune import ABSOLUTE, LOCAL, PER_NODE, RELATIVE, PruneRules
from strategies.beam.sample_beam import SampleBeamParams, sample_beam
from strategies.beam.stochastic_beam import StochasticBeamParams, conditional_gumbel, stochastic_beam


def hf_beam(lm, prompt_ids, max_new_tokens, num_beams, length_penalty, early_stopping):
    """transformers' beam search: (generated ids per returned sequence, sequence scores), best first."""
    pad = lm.model.generation_config.pad_token_id
    out = lm.model.generate(torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
                            num_beams=num_beams, num_return_sequences=num_beams, do_sample=False,
                            max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                            early_stopping=early_stopping, eos_token_id=sorted(lm.eos_ids), pad_token_id=pad,
                            return_dict_in_generate=True, output_scores=True)
    return out.sequences[:, len(prompt_ids):].tolist(), out.sequences_scores.tolist(), pad


def assert_same_as_transformers(lm, trace, prompt_ids, max_new_tokens, k, lp, es):
    seqs, scores, pad = hf_beam(lm, prompt_ids, max_new_tokens, k, lp, es)
    finished = trace.beam["finished"]
    assert len(finished) == len(seqs) == k
    for ours, theirs, score in zip(finished, seqs, scores):
        n = len(ours["token_ids"])
        assert ours["token_ids"] == theirs[:n]
        assert all(t == pad for t in theirs[n:])  # transformers pads the shorter ones
        assert ours["penalised"] == pytest.approx(score, rel=1e-4, abs=1e-5)
    assert trace.token_ids == finished[0]["token_ids"]


# --- parity with transformers ----------------------------------------------------------------

TOY_CASES = [  # prompt, num_beams, length_penalty, early_stopping, max_new_tokens
    ([1, 2], 4, 1.0, False, 10),
    ([4, 4], 3, 2.0, "never", 8),
    ([12, 3], 2, -1.0, True, 6),
    ([4, 4], 4, 0.0, False, 3),
    ([3, 9], 8, 1.0, "never", 12),
    ([5], 5, 0.5, True, 9),
    ([1, 2], 3, 1.0, False, 12),  # these two stop on the early-stop test once the finished set is full
    ([5], 6, 2.0, False, 12),
]


@pytest.mark.parametrize("prompt_ids,k,lp,es,n", TOY_CASES)
def test_toy_matches_transformers_generate(toy, prompt_ids, k, lp, es, n):
    trace = final(beam, toy, BeamParams(num_beams=k, length_penalty=lp, early_stopping=es), prompt_ids, n)
    assert_same_as_transformers(toy, trace, prompt_ids, n, k, lp, es)


def test_smollm2_matches_transformers_generate(store):
    lm = store.get("smollm2-135m")
    prompt_ids = lm.encode("Name three colours.")
    trace = final(beam, lm, BeamParams(num_beams=4, length_penalty=1.0, early_stopping=False), prompt_ids, 12)
    assert_same_as_transformers(lm, trace, prompt_ids, 12, 4, 1.0, False)
    assert trace.beam["counters"]["cache_reorders"] > 0


# --- exactness: a beam as wide as every prefix is exhaustive -------------------------------------


def brute_force(lm, prompt_ids, length_penalty):
    """Every sequence of at most two tokens (EOS ends one early), scored as transformers does:
    sum of log-probs / generated length ** length_penalty. Uncached forward passes."""
    eos = min(lm.eos_ids)
    with torch.no_grad():
        first = lm.model(torch.tensor([prompt_ids])).logits[0, -1].float().log_softmax(-1)
        xs = [x for x in range(lm.vocab_size) if x != eos]
        second = lm.model(torch.tensor([prompt_ids + [x] for x in xs])).logits[:, -1].float().log_softmax(-1)
    seqs = {(eos,): float(first[eos]) / 1 ** length_penalty}
    for i, x in enumerate(xs):
        for y in range(lm.vocab_size):
            seqs[(x, y)] = float(first[x] + second[i, y]) / 2 ** length_penalty
    return sorted(seqs.items(), key=lambda kv: -kv[1])


@pytest.mark.parametrize("prompt_ids,lp", [([1, 2], 1.0), ([4, 4], 0.0), ([12, 3], -2.0), ([7], 3.0)])
def test_sixteen_beams_over_a_sixteen_token_vocabulary_is_exhaustive(toy, prompt_ids, lp):
    # With k = vocab = 16 every first token stays in the beam, so two steps see every sequence.
    assert toy.vocab_size == 16
    trace = final(beam, toy, BeamParams(num_beams=16, length_penalty=lp, early_stopping="never"), prompt_ids, 2)
    expected = brute_force(toy, prompt_ids, lp)
    assert tuple(trace.token_ids) == expected[0][0]
    got = [(tuple(f["token_ids"]), f["penalised"]) for f in trace.beam["finished"]]
    assert [s for s, _ in got] == [s for s, _ in expected[:16]]
    for (_, ours), (_, theirs) in zip(got, expected):
        assert ours == pytest.approx(theirs, rel=1e-4, abs=1e-5)


# --- pruning ---------------------------------------------------------------------------------


def strip_timing(trace) -> dict:
    d = trace.to_dict(timing=False)
    d.pop("params")
    return d


@pytest.mark.parametrize("prompt_ids", [[1, 2], [4, 4], [12, 3]])
def test_loose_thresholds_change_nothing(toy, prompt_ids):
    base = final(beam, toy, BeamParams(num_beams=4), prompt_ids, 10)
    loose = final(beam, toy, BeamParams(num_beams=4, relative_threshold=1e-30, absolute_threshold=80.0,
                                        local_threshold=1e-30, max_candidates_per_node=4), prompt_ids, 10)
    assert loose.beam["counters"]["pruned"] == 0
    assert strip_timing(loose) == strip_timing(base)


def step_groups(beam_section: dict) -> dict[tuple[int, int], list[dict]]:
    groups: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for n in beam_section["nodes"]:
        if n["status"] != "sampled":
            groups[(n["tree"], n["step"])].append(n)
    for nodes in groups.values():
        nodes.sort(key=lambda n: n["rank"])
    return groups


def hand_bounds(rules: PruneRules, best: float, best_lp: float) -> dict[str, float]:
    """Freitag & Al-Onaizan's tests written out: P(c) <= r_p P(best) is score <= log r_p + best, etc."""
    bounds = {}
    if rules.relative:
        bounds[RELATIVE] = math.log(rules.relative) + best
    if rules.absolute:
        bounds[ABSOLUTE] = best - rules.absolute
    if rules.local:
        bounds[LOCAL] = math.log(rules.local) + best_lp
    return bounds


def check_rules_by_hand(trace, k: int, rules: PruneRules, max_new: int, eos: frozenset[int]) -> Counter:
    """Re-derive every status from the nodes' own numbers (transformers' finishing rule); return the
    statuses seen.

    The active list C of a step is its first k candidates that do not end; the rules compare each
    with the best of C; a pruned candidate leaves its slot empty, so everything after C fell off.
    """
    b = trace.beam
    tol = 2e-4  # the trace rounds to 6 significant digits
    seen: Counter = Counter()
    parents_expanded = {n["parent"] for n in b["nodes"]}
    expanded = without = 1
    for (_, step), nodes in sorted(step_groups(b).items(), key=lambda kv: kv[0][1]):
        running = [n for n in nodes if not (n["token_id"] in eos or step + 1 == max_new)]
        active, below = running[:k], running[k:]
        assert all(n["status"] in ("kept", "pruned") for n in active)
        assert all(n["status"] == "fell_off" for n in below)  # never refilled from below, whatever was pruned
        if not active:
            continue
        assert active[0]["status"] == "kept"  # the best active candidate is never pruned
        bounds = hand_bounds(rules, active[0]["score"], max(n["logprob"] for n in active))
        for i, n in enumerate(active):
            seen[(n["status"], n["reason"] if n["status"] == "pruned" else "")] += 1
            crowded = bool(rules.max_per_node) and \
                sum(1 for m in active[:i] if m["parent"] == n["parent"]) >= rules.max_per_node

            def cut(slack: float) -> set[str]:
                return {rule for rule, bound in bounds.items()
                        if (n["logprob"] if rule == LOCAL else n["score"]) <= bound + slack} | \
                    ({PER_NODE} if crowded else set())

            if n["status"] == "pruned":
                assert n["reason"] in cut(tol), n
                if n["reason"] != PER_NODE:
                    assert n["threshold"] == pytest.approx(bounds[n["reason"]], abs=tol)
            elif i > 0:
                assert not cut(-tol), n
        if any(n["id"] in parents_expanded for n in active):
            expanded += sum(1 for n in active if n["status"] == "kept")
            without += len(active)
    c = b["counters"]
    assert c["expanded"] == expanded and c["expanded_without_pruning"] == without
    by_rule = Counter(n["reason"] for n in b["nodes"] if n["status"] == "pruned")
    assert c["pruned_by_rule"] == dict(by_rule) and c["pruned"] == sum(by_rule.values())
    for status in ("kept", "finished", "fell_off"):
        assert c[status] == sum(1 for n in b["nodes"] if n["status"] == status)
    return seen


TIGHT = [
    dict(relative_threshold=0.05),
    dict(absolute_threshold=1.5),
    dict(local_threshold=0.3),
    dict(max_candidates_per_node=1),
    dict(relative_threshold=0.01, absolute_threshold=4.0, local_threshold=0.05, max_candidates_per_node=2),
]


@pytest.mark.parametrize("knobs", TIGHT, ids=lambda d: "+".join(d))
def test_tight_rules_cut_candidates_as_the_rule_says(toy, knobs):
    k, n = 6, 8
    params = BeamParams(num_beams=k, **knobs)
    cut = Counter()
    for prompt_ids in ([4, 4], [12, 3], [1, 2]):
        trace = final(beam, toy, params, prompt_ids, n)
        cut += check_rules_by_hand(trace, k, params.rules, n, toy.eos_ids)
        c = trace.beam["counters"]
        assert c["expanded"] <= c["expanded_without_pruning"]
    for rule, name in ((RELATIVE, "relative_threshold"), (ABSOLUTE, "absolute_threshold"),
                       (LOCAL, "local_threshold"), (PER_NODE, "max_candidates_per_node")):
        if name in knobs and len(knobs) == 1:
            assert cut[("pruned", rule)] > 0, cut


def test_unpruned_run_passes_the_same_checks(toy):
    trace = final(beam, toy, BeamParams(num_beams=5), [4, 4], 8)
    seen = check_rules_by_hand(trace, 5, PruneRules(), 8, toy.eos_ids)
    assert not any(status == "pruned" for status, _ in seen)


# --- stochastic beam search -----------------------------------------------------------------


def sequence_distribution(lm, prompt_ids, temperature):
    """Probability of every complete sequence of at most 2 tokens (EOS ends one early; the
    length limit ends the rest), under softmax(logits / T). Uncached forward passes."""
    eos = min(lm.eos_ids)
    with torch.no_grad():
        first = (lm.model(torch.tensor([prompt_ids])).logits[0, -1].double() / temperature).log_softmax(-1)
        xs = [x for x in range(lm.vocab_size) if x != eos]
        second = (lm.model(torch.tensor([prompt_ids + [x] for x in xs])).logits[:, -1].double()
                  / temperature).log_softmax(-1)
    probs = {(eos,): math.exp(first[eos])}
    for i, x in enumerate(xs):
        for y in range(lm.vocab_size):
            probs[(x, y)] = math.exp(first[x] + second[i, y])
    return probs


def test_stochastic_beam_samples_sequences_without_replacement(toy):
    """Gumbel-top-k with k = 2 over 1000 seeds.

    For each sequence with inclusion probability pi > 0.02, the inclusion frequency f is
    Binomial(N, pi) / N; |f - pi| <= 4.5 sd fails with probability < 7e-6 per check when the
    sampler is right (normal tail; pi N > 20), < 1e-4 over all checks. The first of the two
    (the largest perturbed score) is an exact sample, so its frequency must match p itself.
    Sampling with replacement, or deterministic beam search, would miss these bounds.
    """
    prompt_ids, temperature, runs = [4, 4], 1.6, 1000
    probs = sequence_distribution(toy, prompt_ids, temperature)
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-6)
    included, first = Counter(), Counter()
    for seed in range(runs):
        trace = final(stochastic_beam, toy, StochasticBeamParams(num_beams=2, temperature=temperature),
                      prompt_ids, 2, seed=seed, top_n=1)
        sample = [tuple(f["token_ids"]) for f in trace.beam["finished"]]
        assert len(sample) == 2 and len(set(sample)) == 2  # without replacement
        included.update(sample)
        first[sample[0]] += 1
        assert tuple(trace.token_ids) == sample[0]
    check_two_draws_without_replacement(probs, included, first, runs)


def test_conditional_gumbel_keeps_the_parent_maximum():
    g = torch.Generator().manual_seed(0)
    phi = torch.randn(3, 50, generator=g, dtype=torch.float64)
    perturbed = phi - torch.log(-torch.log(torch.rand(3, 50, generator=g, dtype=torch.float64)))
    parent = torch.tensor([[0.5], [-2.0], [10.0]], dtype=torch.float64)
    out = conditional_gumbel(parent, perturbed)
    assert torch.allclose(out.amax(-1, keepdim=True), parent)
    assert torch.equal(out.argsort(-1), perturbed.argsort(-1))  # a monotone map of the children
    assert torch.isfinite(out).all()


# --- sample-then-beam ---------------------------------------------------------------------------


def test_sample_beam_trees_continue_like_beam_search_on_their_prefix(toy):
    k, n, prefix = 3, 8, 2
    trace = final(sample_beam, toy, SampleBeamParams(num_beams=k, prefix_tokens=prefix, num_prefixes=3,
                                                     temperature=3.0, length_penalty=0.0), [4, 4], n, seed=5)
    trees = trace.beam["trees"]
    assert len(trees) == 3
    assert trace.beam["best"][0] in {nd["id"] for nd in trace.beam["nodes"] if nd["status"] == "sampled"}
    eos = toy.eos_ids
    for t in trees:
        if eos & set(t["prefix"]):
            continue  # a prefix that sampled EOS is a finished hypothesis by itself
        alone = final(beam, toy, BeamParams(num_beams=k, length_penalty=0.0), [4, 4] + t["prefix"], n - prefix)
        own = [f["token_ids"][prefix:] for f in trace.beam["finished"] if f["tree"] == t["tree"]]
        assert own == [f["token_ids"] for f in alone.beam["finished"]]
    best = max(trace.beam["finished"], key=lambda f: f["penalised"])
    assert trace.token_ids == best["token_ids"]


def test_sample_beam_without_prefix_is_beam_search(toy):
    a = final(sample_beam, toy, SampleBeamParams(num_beams=4, prefix_tokens=0, num_prefixes=5), [12, 3], 9)
    b = final(beam, toy, BeamParams(num_beams=4), [12, 3], 9)
    assert a.beam["finished"] == b.beam["finished"] and a.beam["nodes"] == b.beam["nodes"]


# --- small invariants -------------------------------------------------------------------------


def test_one_beam_that_stops_at_the_first_finish_is_greedy(toy):
    for prompt_ids in ([1, 2], [4, 4], [12, 3]):
        ours = final(beam, toy, BeamParams(num_beams=1, early_stopping=True), prompt_ids, 10)
        with torch.no_grad():
            ref = toy.model.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=10,
                                     eos_token_id=0, pad_token_id=13)[0, len(prompt_ids):].tolist()
        assert ours.token_ids == ref
        assert ours.beam["counters"]["cache_reorders"] == 0  # one row that never moves: never copied


@pytest.mark.parametrize("fn,params", [
    (beam, BeamParams(num_beams=4, relative_threshold=0.01)),
    (sample_beam, SampleBeamParams(num_beams=3, prefix_tokens=2, num_prefixes=2, temperature=2.0)),
    (stochastic_beam, StochasticBeamParams(num_beams=4, temperature=2.0)),
])
def test_traces_are_json_and_deterministic_for_a_seed(toy, fn, params):
    a = final(fn, toy, params, [4, 4], 9, seed=7)
    b = final(fn, toy, params, [4, 4], 9, seed=7)
    text = json.dumps(a.to_dict(timing=False), allow_nan=False)
    assert text == json.dumps(b.to_dict(timing=False), allow_nan=False)
    d = json.loads(a.to_json())
    nodes = d["beam"]["nodes"]
    assert [n["id"] for n in nodes] == list(range(len(nodes)))
    assert all(n["parent"] is None or n["parent"] < n["id"] for n in nodes)
    assert {n["status"] for n in nodes} <= {"kept", "finished", "pruned", "fell_off", "sampled"}
    assert d["beam"]["best"] and nodes[d["beam"]["best"][-1]]["token_id"] == d["tokens"][-1]["id"]
    assert len(d["steps"]) == len(d["tokens"])
    assert d["text"] == a.text


# --- charts ---------------------------------------------------------------------------------


def node_ids_in(fig) -> list[int]:
    return [i for tr in fig.data if (tr.meta or {}).get("role") == "nodes" for i in tr.customdata]


def best_ids_in(fig) -> list[int]:
    return [list(tr.customdata) for tr in fig.data if (tr.meta or {}).get("role") == "best"][0]


@pytest.mark.parametrize("fn,params", [
    (beam, BeamParams(num_beams=4, relative_threshold=0.05, max_candidates_per_node=2)),
    (sample_beam, SampleBeamParams(num_beams=3, prefix_tokens=2, num_prefixes=3, temperature=3.0)),
    (stochastic_beam, StochasticBeamParams(num_beams=3)),
])
def test_tree_figure_has_every_node_once_and_highlights_the_best_path(toy, fn, params):
    trace = json.loads(final(fn, toy, params, [4, 4], 9, seed=3).to_json())
    fig = tree_figure(trace)
    ids = node_ids_in(fig)
    assert sorted(ids) == [n["id"] for n in trace["beam"]["nodes"]]
    best = best_ids_in(fig)
    assert best == trace["beam"]["best"]
    assert [trace["beam"]["nodes"][i]["token_id"] for i in best] == [t["id"] for t in trace["tokens"]]
    titles = [v.title for v in views(trace)]
    assert titles == ["Beam tree", "Finished hypotheses", "Beam search work", "Beam width per step"]


def test_views_skip_traces_without_a_beam():
    assert views({"tokens": [], "steps": []}) == []


def test_beam_charts_import_no_torch():
    code = "import sys, playground.charts.beam; sys.exit('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


def test_dense_tree_stays_whole_and_hides_faded_candidates():
    lm = FakeLM()
    trace = json.loads(final(beam, lm, BeamParams(num_beams=16, early_stopping="never"), [5], 40).to_json())
    nodes = trace["beam"]["nodes"]
    assert len(nodes) == 16 * 2 * 39 + 32 > DENSE  # a 32-candidate pool at each of 40 steps
    fig = tree_figure(trace)
    assert sorted(node_ids_in(fig)) == list(range(len(nodes)))
    assert best_ids_in(fig) == trace["beam"]["best"]
    faded = [tr for tr in fig.data if (tr.meta or {}).get("status") == "fell_off"]
    assert faded and all(tr.visible == "legendonly" for tr in faded)
    hovers = [h for tr in fig.data if tr.hovertext for h in tr.hovertext]
    assert not any("<t" in h for h in hovers)  # token text escaped
    table = views(trace)[1].html
    assert "&lt;t" in table and "<t5>" not in table


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls,values,message", [
    (BeamParams, {"num_beams": 0}, "num_beams must be in [1, 16], got 0"),
    (BeamParams, {"num_beams": 100}, "num_beams must be in [1, 16], got 100"),
    (BeamParams, {"relative_threshold": -0.1}, "relative_threshold must be in [0, 1), got -0.1"),
    (BeamParams, {"relative_threshold": 1.0}, "relative_threshold must be in [0, 1), got 1"),
    (BeamParams, {"absolute_threshold": -1}, "absolute_threshold must be in [0, 100], got -1"),
    (BeamParams, {"local_threshold": -0.5}, "local_threshold must be in [0, 1), got -0.5"),
    (BeamParams, {"max_candidates_per_node": -1}, "max_candidates_per_node must be in [0, 16], got -1"),
    (BeamParams, {"length_penalty": 50}, "length_penalty must be in [-10, 10], got 50"),
    (BeamParams, {"early_stopping": "maybe"}, "early_stopping must be one of false, true, never, got 'maybe'"),
    (StochasticBeamParams, {"num_beams": 17}, "num_beams must be in [1, 16], got 17"),
    (StochasticBeamParams, {"temperature": 0}, "temperature must be in (0, 10], got 0"),
    (SampleBeamParams, {"prefix_tokens": -1}, "prefix_tokens must be in [0, 64], got -1"),
    (SampleBeamParams, {"num_prefixes": 9}, "num_prefixes must be in [1, 8], got 9"),
    (SampleBeamParams, {"top_p": 0}, "top_p must be in (0, 1], got 0"),
])
def test_bad_params_name_the_value_and_the_range(cls, values, message):
    with pytest.raises(InvalidRequest) as err:
        cls.from_dict(values)
    assert str(err.value) == message


def test_engine_rejects_bad_beam_params_before_loading(store):
    with pytest.raises(InvalidRequest, match=r"num_beams must be in \[1, 16\], got 100"):
        prepare(store, Request(model="toy", strategy="beam", prompt="1 2", params={"num_beams": 100}))
    assert BeamParams(early_stopping=True).early is True
    assert BeamParams(early_stopping="Never").early == "never"
