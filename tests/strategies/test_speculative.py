"""The speculative strategy on real models: greedy parity, identical drafts, exact cache rollback,
refusals. Short runs on the session's one ModelStore."""
from __future__ import annotations

import json
import math

import pytest
import torch

import strategies.speculative.speculative as speculative_module
from playground.charts.break_even import sentence
from playground.engine import Request, prepare, run, stream
from playground.errors import InvalidRequest
from playground.models import LM, ModelSpec, ModelStore
from playground.ui.handlers import stopped
from strategies.context import Stopwatch
from strategies.sampling.chain import apply_chain, build_chain
from strategies.speculative.baseline import NO_TOKENS, OFF, STOPPED, reference
from strategies.speculative.drafts import ModelDraft, PromptLookupDraft, make_draft
from strategies.speculative.speculative import SpeculativeDecoder, SpeculativeParams, _next_gamma, verifier

TOY_PROMPT = "1 2 3 4 5 6 7 8 0 1 2"  # a second pass of the path, so prompt lookup has something to copy
SMOL_PROMPT = "Repeat this sentence twice: the quick brown fox jumps over the lazy dog."


def speculative(store: ModelStore, model: str, prompt: str, n: int, seed: int = 0, top_n: int = 20,
                **params) -> dict:
    params.setdefault("measure_baseline", False)
    return run(store, Request(model, "speculative", prompt, params, seed=seed, max_new_tokens=n,
                              top_n=top_n)).to_dict()


def greedy_ids(store: ModelStore, model: str, prompt: str, n: int) -> list[int]:
    return run(store, Request(model, "greedy", prompt, {}, max_new_tokens=n)).token_ids


@pytest.mark.parametrize("draft", ["toy-small", "early_exit", "prompt_lookup"])
@pytest.mark.parametrize("verify", ["rejection", "topk"])
def test_greedy_speculative_equals_greedy_on_toy(store, draft, verify):
    """rejection at T = 0 is greedy matching; topk is greedy only with K = 1 (its K is the model's own)."""
    expected = greedy_ids(store, "toy", TOY_PROMPT, 16)
    for gamma in (1, 3):
        t = speculative(store, "toy", TOY_PROMPT, 16, draft=draft, verify=verify, verify_top_k=1, gamma=gamma,
                        temperature=0)
        assert [tok["id"] for tok in t["tokens"]] == expected


LOOKUP_PROMPT = "once upon the hill rose high once upon"  # lookup drafts " the hill ...", greedy says " a"


def test_topk_at_temperature_zero_keeps_its_k(store):
    """K is taken on the target model's own distribution: T = 0 does not turn topk into greedy matching."""
    greedy = greedy_ids(store, "toy", LOOKUP_PROMPT, 6)
    five = speculative(store, "toy", LOOKUP_PROMPT, 6, draft="prompt_lookup", verify="topk", verify_top_k=5,
                       temperature=0, gamma=4)
    first = five["rounds"][0]
    d = first["draft"][0]
    assert d["text"] == " the" and d["accepted"] and d["p_target"] == 0.0  # T = 0 cut it; the model ranks it 2nd
    assert d["raw_p_target"] >= d["raw_kth"] > 0 and first["k"] == 5
    assert [tok["id"] for tok in five["tokens"]] != greedy
    one = speculative(store, "toy", LOOKUP_PROMPT, 6, draft="prompt_lookup", verify="topk", verify_top_k=1,
                      temperature=0, gamma=4)
    r = one["rounds"][0]
    assert not r["draft"][0]["accepted"] and r["draft"][0]["raw_p_target"] < r["draft"][0]["raw_kth"]
    assert r["resampled"]["id"] == greedy[0] and r["drawn_from"] == "target"  # the chained (processed) target
    assert one["steps"][0]["speculative"]["source"] == "target"


@pytest.fixture(scope="module")
def smol_greedy(store) -> list[int]:
    return greedy_ids(store, "smollm2-135m", SMOL_PROMPT, 16)


@pytest.mark.parametrize("draft,layer,gamma", [("early_exit", 4, 1), ("prompt_lookup", 0, 4),
                                               ("smollm2-135m", 0, 5)])
def test_greedy_speculative_equals_greedy_on_smollm2(store, smol_greedy, draft, layer, gamma):
    t = speculative(store, "smollm2-135m", SMOL_PROMPT, 16, draft=draft, draft_layer=layer, temperature=0,
                    gamma=gamma)
    assert [tok["id"] for tok in t["tokens"]] == smol_greedy
    if draft != "early_exit":  # the copy and the self-draft are right often enough to save target passes
        assert t["speculative"]["rounds"] < 16


def test_identical_drafts_accept_every_token(store):
    for draft, layer in (("toy", 0), ("early_exit", 2)):  # toy has 2 layers: early exit at 2 is toy itself
        t = speculative(store, "toy", "1 2", 6, seed=3, draft=draft, draft_layer=layer, gamma=3)
        s = t["speculative"]
        assert s["alpha"] == 1.0 and s["accepted"] == s["drafted"] > 0
        assert all(r["resampled"] is None for r in t["rounds"])
    t = speculative(store, "smollm2-135m", SMOL_PROMPT, 6, seed=1, draft="early_exit", draft_layer=30, gamma=5)
    assert t["speculative"]["alpha"] == 1.0 and t["speculative"]["rounds"] == 1


def test_adaptive_gamma_follows_the_heuristic(store):
    t = speculative(store, "toy", "1 2", 7, seed=0, draft="toy", gamma=1, adaptive_gamma=True)
    assert [r["gamma"] for r in t["rounds"]] == [1, 3, 0]  # +2 after full acceptance; the budget caps the last
    assert _next_gamma(4, 4, 4) == 6 and _next_gamma(4, 4, 2) == 3 and _next_gamma(1, 1, 0) == 1
    assert _next_gamma(16, 16, 16) == 16 and _next_gamma(5, 0, 0) == 5


# --- cache rollback ------------------------------------------------------------------------------


def decode_rounds(target: LM, draft, prompt_ids: list[int], temperature: float, gamma: int, limit: int,
                  seed: int = 0) -> tuple[SpeculativeDecoder, int]:
    """Run rounds until the text would pass ``limit`` tokens; (decoder, rounds that rejected)."""
    params = SpeculativeParams(temperature=temperature)
    decoder = SpeculativeDecoder(target, draft, build_chain(params), verifier(params),
                                 torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1),
                                 list(prompt_ids), Stopwatch().now)
    rejected = 0
    with torch.inference_mode():
        decoder.prefill()
        while len(decoder.ids) + gamma + 1 <= limit:
            r = decoder.step(gamma)
            rejected += int(r.verdict.n_accepted[0]) < len(r.proposal.ids)
    return decoder, rejected


def assert_caches_are_exact(decoder: SpeculativeDecoder) -> None:
    """The rolled-back caches give the logits a fresh forward pass on the accepted text gives."""
    ids = decoder.ids
    target = decoder.target
    assert decoder.cache.get_seq_length() == len(ids) - 1
    fresh = target.forward(torch.tensor([ids])).logits[0, -1]
    cached = target.forward(torch.tensor([ids[-1:]]), decoder.cache).logits[0, -1]
    torch.testing.assert_close(cached, fresh, atol=2e-4, rtol=1e-4)
    draft = decoder.draft
    if isinstance(draft, ModelDraft):
        assert draft.seen <= len(ids) - 1 and draft.cache.get_seq_length() == draft.seen
        fresh = draft.lm.forward(torch.tensor([ids])).logits[0, -1]
        cached = draft.lm.forward(torch.tensor([ids[draft.seen:]]), draft.cache).logits[0, -1]
        torch.testing.assert_close(cached, fresh, atol=2e-4, rtol=1e-4)


def test_cache_rollback_is_exact_on_toy(store):
    target = store.get("toy")
    decoder, rejected = decode_rounds(target, ModelDraft(store.get("toy-small"), "model"), [1, 2], 2.0, 4, 60)
    assert rejected >= 5
    assert_caches_are_exact(decoder)


def test_cache_rollback_is_exact_on_smollm2(store):
    target = store.get("smollm2-135m")
    prompt = target.encode("Write a list of ten fruits.")
    decoder, rejected = decode_rounds(target, ModelDraft(target.truncated(4), "early_exit"), prompt, 1.0, 2,
                                      len(prompt) + 12)
    assert rejected >= 3
    assert_caches_are_exact(decoder)


def tiny_sliding_lm(store: ModelStore) -> LM:
    """A random 3-layer Gemma 3 with a 4-token sliding window, sharing the toy's 16-token tokenizer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    config = Gemma3TextConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=4,
                              max_position_embeddings=128, pad_token_id=13, eos_token_id=0, bos_token_id=15,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    with torch.random.fork_rng():  # weights are the only randomness here, and they stay local
        torch.manual_seed(0)
        model = Gemma3ForCausalLM(config).eval()
    toy = store.get("toy")
    return LM(ModelSpec("tiny-gemma3", "tiny sliding-window Gemma 3", "test"), model, toy.tokenizer, toy.device)


def test_sliding_window_caches_cannot_crop_by_default(store):
    """Why rollback_cache turns on past recording: transformers refuses to crop a full window."""
    lm = tiny_sliding_lm(store)
    cache = lm.forward(torch.tensor([[1, 2, 3, 4, 5, 6]]), lm.new_cache()).cache
    with pytest.raises(RuntimeError, match="activate_past_recording"):
        cache.crop(-2)


@pytest.mark.parametrize("prompt", [[1], [1, 2, 3]])  # one token: nothing to prefill, nothing to crop
def test_cache_rollback_is_exact_with_sliding_window_layers(store, prompt):
    lm = tiny_sliding_lm(store)
    # Random weights give near-uniform logits; a low temperature makes draft and target disagree.
    decoder, rejected = decode_rounds(lm, ModelDraft(lm.truncated(1), "early_exit"), prompt, 0.1, 3, 60)
    assert rejected >= 5
    assert_caches_are_exact(decoder)


def test_greedy_speculative_equals_greedy_with_sliding_window_layers(store):
    lm = tiny_sliding_lm(store)
    decoder, _ = decode_rounds(lm, ModelDraft(lm.truncated(2), "early_exit"), [1, 2, 3], 0.0, 3, 40)
    ids, out = [1, 2, 3], lm.forward(torch.tensor([[1, 2, 3]]))
    while len(ids) < len(decoder.ids):
        ids.append(int(out.logits[0, -1].argmax()))
        out = lm.forward(torch.tensor([ids[-1:]]), out.cache)
    assert decoder.ids == ids


# --- the trace --------------------------------------------------------------------------------------


def test_trace_rounds_and_totals(store):
    t = speculative(store, "toy", TOY_PROMPT, 12, seed=2, draft="toy-small", temperature=1.5, gamma=3,
                    measure_baseline=True)
    json.dumps(t)  # JSON-ready
    rounds, s, w = t["rounds"], t["speculative"], t["timing"]["speculative"]
    assert sum(r["committed"] for r in rounds) == len(t["tokens"]) == len(t["steps"])
    for r in rounds:
        n = r["accepted"]
        assert [d["accepted"] for d in r["draft"]] == [i < n for i in range(r["gamma"])]
        assert (r["resampled"] is None) == (n == r["gamma"]) and (r["bonus"] is None) == (n < r["gamma"])
        for d in r["draft"][: n + 1]:
            assert d["accept_prob"] == pytest.approx(min(1.0, d["p_target"] / d["q_draft"]), rel=1e-4)
            assert (d["u"] < d["accept_prob"]) == d["accepted"]
        added = r["resampled"] or r["bonus"]
        assert r["committed"] <= n or added["id"] == t["tokens"][r["start"] + n]["id"]
        assert r["drawn_from"] == ("residual" if r["resampled"] else "target")
        probs = [e["drawn_prob"] for e in r["drawn_top"]]
        assert probs == sorted(probs, reverse=True) and 0.9 < sum(probs) <= 1 + 1e-5
    assert s["accepted"] == sum(r["accepted"] for r in rounds)
    assert s["evaluated"] == sum(min(r["gamma"], r["accepted"] + 1) for r in rounds)
    assert s["tau"] == pytest.approx(len(t["tokens"]) / len(rounds), rel=1e-5)
    assert s["target_forward_passes"] == len(rounds) + 1  # the prompt, then one pass per round
    assert s["draft_forward_passes"] == t["timing"]["draft_forward_passes"] > 0
    assert w["baseline"]["tokens"] == len(t["tokens"]) and w["measured_speedup"] > 0 and w["c"] > 0
    assert len(t["timing"]["rounds"]) == len(rounds)


def test_every_token_says_where_it_was_drawn_from(store):
    """A resampled token was drawn from the residual: its logprob is there, the target's marginal beside it."""
    resampled = 0
    for seed in range(6):
        t = speculative(store, "toy", "once upon", 8, seed=seed, draft="toy-small", gamma=3)
        for r in t["rounds"]:
            for i in range(r["committed"]):
                step, tok = t["steps"][r["start"] + i], t["tokens"][r["start"] + i]
                rec = step["speculative"]
                chosen = next(c for c in step["candidates"] if c["id"] == tok["id"])
                assert rec["round"] == r["round"] and rec["p_target"] == chosen["prob"]
                assert math.exp(tok["logprob"]) == pytest.approx(rec["drawn_prob"], rel=1e-4)
                if i < r["accepted"]:
                    assert rec["source"] == "draft" and rec["drawn_prob"] == r["draft"][i]["q_draft"]
                else:
                    added = r["resampled"] or r["bonus"]
                    assert rec["source"] == r["drawn_from"] and rec["drawn_prob"] == added["drawn_prob"]
                    assert rec["p_target"] == added["p_target"]
            if r["resampled"] and abs(r["resampled"]["drawn_prob"] - r["resampled"]["p_target"]) > 0.05:
                resampled += 1
    assert resampled > 0  # some residual draw differed from the target's marginal, and both were recorded


EOS_PROMPT = "once upon a time there lived happily"  # the text ends after " ever"


class RunOnDraft(ModelDraft):
    """A draft that ignores the end of the text, as a careless one would."""

    def propose(self, ids, gamma, chain, generator, stop_ids):
        return super().propose(ids, gamma, chain, generator, frozenset())


@pytest.mark.parametrize("runs_on", [False, True])
def test_nothing_after_the_end_of_the_text_is_kept(store, monkeypatch, runs_on):
    """The draft stops at <eos>; a draft that runs on has its later tokens marked discarded; either way no
    bonus follows the end, and alpha and tau count only what the text reached."""
    if runs_on:
        monkeypatch.setattr(speculative_module, "make_draft", lambda lm, *a: RunOnDraft(store.get("toy"), "model"))
    t = speculative(store, "toy", EOS_PROMPT, 8, seed=0, draft="toy", gamma=4)
    assert [tok["text"] for tok in t["tokens"]] == [" ever", "<eos>"] and t["finish_reason"] == "eos"
    (r,) = t["rounds"]
    assert r["ended"] and r["bonus"] is None and r["resampled"] is None and r["drawn_top"] == []
    assert r["kept"] == r["committed"] == 2
    assert [d["discarded"] for d in r["draft"]] == [False, False] + [True] * (r["gamma"] - 2)
    assert r["gamma"] == (4 if runs_on else 2)
    s = t["speculative"]
    assert s["accepted"] == s["evaluated"] == s["drafted"] == 2 and s["alpha"] == 1.0 and s["tau"] == 2.0
    assert s["accepted_lengths"] == [2]


def test_each_position_is_chained_on_its_own_text(store):
    """The penalty at drafted position i sees the text up to draft i: every step's chained distribution
    equals the chain run on a fresh forward pass over the text before it."""
    params = {"temperature": 1.5, "repetition_penalty": 3.0}  # nothing cut: every token's mass is compared
    t = speculative(store, "toy", "once upon", 12, seed=4, draft="toy-small", gamma=4, top_n=16, **params)
    lm = store.get("toy")
    chain = build_chain(SpeculativeParams(**params))
    ids = list(t["prompt_ids"])
    assert max(r["accepted"] for r in t["rounds"]) >= 2  # some verification pass covered several drafts
    for step, tok in zip(t["steps"], t["tokens"]):
        context = torch.tensor([ids])
        probs = apply_chain(chain, lm.forward(context).logits[:, -1], context).softmax(-1)[0]
        for c in step["candidates"]:
            assert c["prob"] == pytest.approx(float(probs[c["id"]]), rel=1e-3, abs=1e-9)
        ids.append(tok["id"])


def test_topk_rounds_have_no_uniform_draws(store):
    t = speculative(store, "toy", TOY_PROMPT, 10, draft="toy-small", verify="topk", verify_top_k=1, gamma=3)
    assert all(d["u"] is None for r in t["rounds"] for d in r["draft"])
    assert all(d["accept_prob"] in (0.0, 1.0) for r in t["rounds"] for d in r["draft"] if d["evaluated"])


# --- timing --------------------------------------------------------------------------------------------


def test_baseline_step_is_per_pass_after_the_prefill(store):
    w = speculative(store, "toy", "once upon", 5, seed=1, draft="toy-small", measure_baseline=True)["timing"]
    base = w["speculative"]["baseline"]
    # n tokens: the prompt pass gives the first, n - 1 passes give the rest
    assert base["step_seconds"] == pytest.approx((base["seconds"] - base["prefill_seconds"]) / (base["tokens"] - 1),
                                                 rel=1e-3)
    one = speculative(store, "toy", "once upon", 1, seed=1, draft="toy-small", measure_baseline=True)
    assert one["timing"]["speculative"]["baseline"]["step_seconds"] is None
    assert one["timing"]["speculative"]["c"] is None


# --- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("params,message", [
    ({"gamma": 40}, "gamma must be in [1, 16], got 40"),
    ({"gamma": 0}, "gamma must be in [1, 16], got 0"),
    ({"verify": "greedy"}, "verify must be one of rejection, topk, got 'greedy'"),
    ({"verify_top_k": 0}, "verify_top_k must be in [1, 1000], got 0"),
    ({"draft": ""}, "draft must be early_exit, prompt_lookup, eagle or a model key"),
    ({"draft": "two words"}, "draft must be early_exit, prompt_lookup, eagle or a model key"),
    ({"lookup_ngram": 9}, "lookup_ngram must be in [1, 8], got 9"),
    ({"temperature": -1}, "temperature must be in [0, 100], got -1"),
])
def test_bad_params_are_refused(params, message):
    with pytest.raises(InvalidRequest) as err:
        SpeculativeParams.from_dict(params)
    assert message in str(err.value)


def test_draft_layer_is_checked_against_the_model(store):
    for bad in (0, 3):
        with pytest.raises(InvalidRequest, match=rf"draft_layer must be in \[1, 2\] for toy, or -1 \(= 1\), got {bad}"):
            speculative(store, "toy", "1 2", 4, draft="early_exit", draft_layer=bad)


def test_mismatched_pair_is_refused(store):
    with pytest.raises(InvalidRequest, match="does not share the tokenizer of 'smollm2-135m'"):
        speculative(store, "smollm2-135m", SMOL_PROMPT, 4, draft="toy")
    with pytest.raises(InvalidRequest, match="'smollm2-135m' does not share the tokenizer of 'toy'"):
        make_draft(store.get("toy"), "smollm2-135m", 0, 3, store.get)


def test_unknown_draft_model_is_refused(store):
    with pytest.raises(InvalidRequest, match="cannot be loaded here"):
        make_draft(store.get("toy"), "toy-small", 0, 3, None)
    assert isinstance(make_draft(store.get("toy"), "prompt_lookup", 0, 2, None), PromptLookupDraft)


@pytest.mark.parametrize("draft", ["toy-small", "eagle"])
def test_a_stopped_run_records_why_it_has_no_baseline_and_the_page_says_it(store, draft):
    """Stop closes the run between two rounds: there is no plain reference, and the trace and the page say why."""
    frames = stream(store, Request("toy", "speculative", "1 2", {"draft": draft, "gamma": 1, "eagle_depth": 1},
                                   seed=1, max_new_tokens=24))
    first = next(frames)
    before = first.to_dict()  # what the page held when Stop came
    frames.close()
    w = first.timing.extra["speculative"]
    assert first.tokens and w["baseline"] is None and w["no_baseline"] == STOPPED
    for page_copy in (first.to_dict(), before):
        said = sentence(stopped(page_copy))
        assert STOPPED in said and "timed after the last round" not in said


def test_a_run_without_tokens_has_no_baseline_and_says_why(store):
    _, _, ctx = prepare(store, Request("toy", "speculative", "1 2", {"draft": "toy-small"}))
    assert reference(ctx, True, [], []) == (None, NO_TOKENS)
    assert reference(ctx, False, [3, 4], []) == (None, OFF)
