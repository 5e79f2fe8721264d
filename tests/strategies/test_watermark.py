"""The green-list watermark stage (strategies/sampling/watermark.py, strategies/green_lists.py): its
logits equal transformers' WatermarkLogitsProcessor bit for bit on three vocabularies, its trace record
is the stage's own decision, it steers greedy decoding as transformers' greedy search does, and the
strategies without a sampler chain refuse it."""
from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import WatermarkLogitsProcessor

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.whatif.watermark import detect_text
from strategies.green_lists import DEFAULT_KEY, green_mask
from strategies.sampling.chain import accept_chosen, record_chain
from strategies.sampling.samplers import PRESETS, SamplerParams, build_sampler_chain
from strategies.sampling.watermark import Watermark
from strategies.watermark_detect import detect

SETTINGS = [(2.0, 0.25, DEFAULT_KEY), (0.7, 0.5, 12345), (5.0, 0.1, 2**31 - 1)]


def contexts_and_logits(lm, prompts: list[list[int]], steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(context [1, seq], the model's next-token logits [1, vocab]) along greedy continuations of ``prompts``."""
    out = []
    for ids in prompts:
        context = torch.tensor([ids])
        for _ in range(steps):
            logits = lm.forward(context).logits[:, -1]
            out.append((context, logits))
            context = torch.cat([context, logits.argmax(-1, keepdim=True)], dim=1)
    return out


def assert_parity(cases, vocab: int, schemes: tuple[str, ...], settings=SETTINGS) -> None:
    checked = {False: 0, True: 0}  # cases where transformers added the bias / found no green candidate
    for scheme in schemes:
        for delta, gamma, key in settings:
            theirs = WatermarkLogitsProcessor(vocab, "cpu", greenlist_ratio=gamma, bias=delta, hashing_key=key,
                                              seeding_scheme=scheme)
            ours = Watermark(delta, gamma, scheme, key)
            for context, logits in cases:
                before = logits.clone()
                out = ours.apply(logits, context)
                assert torch.equal(logits, before)  # the input is left as it was
                try:
                    expected = theirs(context, logits)
                except IndexError:  # selfhash with none of the 40 candidates green: transformers indexes
                    assert scheme == "selfhash"  # with an empty float tensor; nothing gets the bias
                    assert not ours.decide(logits, context)[1]["green"].any()
                    expected = logits
                assert torch.equal(out, expected), (scheme, delta, gamma, key, context.tolist())
                checked[expected is logits] += 1
    assert checked[False] >= len(cases) * len(schemes) * len(settings) - 2  # the bias was added nearly always


def test_parity_with_transformers_on_toys_vocabulary(toy):
    # selfhash tries 40 candidates: transformers' processor fails on toy's 16 tokens, so lefthash only here
    cases = contexts_and_logits(toy, [[1, 2], [3], [9, 10, 11], [4, 4, 4]], steps=3)
    assert_parity(cases, toy.vocab_size, ("lefthash",))
    logits = torch.randn(2, toy.vocab_size, generator=torch.Generator().manual_seed(0))
    batch = torch.tensor([[1, 2], [5, 6]])
    theirs = WatermarkLogitsProcessor(toy.vocab_size, "cpu", 0.5, 2.0)(batch, logits)
    assert torch.equal(Watermark(2.0, 0.5, "lefthash", DEFAULT_KEY).apply(logits, batch), theirs)


def test_parity_with_transformers_on_smollm2s_vocabulary(smollm):
    prompts = [smollm.encode(p) for p in ("Write a poem about the sea.", "What is 2 + 2?")]
    prompts.append(smollm.encode("The capital of France is", chat=False))
    assert_parity(contexts_and_logits(smollm, prompts, steps=3), smollm.vocab_size, ("lefthash", "selfhash"))


def test_parity_with_transformers_on_gemmas_vocabulary(gemma):
    assert gemma.vocab_size == 262144
    prompts = [gemma.encode("Once upon a time", chat=False), gemma.encode("def add(a, b):", chat=False)]
    assert_parity(contexts_and_logits(gemma, prompts, steps=2), gemma.vocab_size, ("lefthash", "selfhash"),
                  settings=SETTINGS[:2])


def test_the_record_is_the_stages_decision_and_says_whether_the_chosen_token_is_green(toy):
    params = SamplerParams(watermark_delta=3.0, watermark_gamma=0.5, top_k=8)
    chain = build_sampler_chain(params, torch.Generator(), toy)
    names = [t.name for t in chain]
    assert names == ["top_k", "watermark"]
    context = torch.tensor([[1, 2]])
    logits = toy.forward(context).logits[:, -1]
    record = record_chain(chain, logits, context)
    received, out = record.logits[1][0], record.logits[2][0]
    decision = record.decisions[1]
    green = green_mask(2, toy.vocab_size, 0.5)
    assert torch.equal(decision["green"][0], green)
    assert torch.equal(out[green & torch.isfinite(received)], received[green & torch.isfinite(received)] + 3.0)
    assert torch.equal(out[~green], received[~green])
    assert float(decision["green_mass_before"][0]) == pytest.approx(float(received.softmax(-1)[green].sum()))
    assert float(decision["green_mass_after"][0]) == pytest.approx(float(out.softmax(-1)[green].sum()))
    assert decision["green_mass_after"][0] > decision["green_mass_before"][0]
    red = int((~green & torch.isfinite(received)).nonzero()[0])
    accept_chosen(chain, record, torch.tensor([red]), forced=False)
    assert record.decisions[1]["chosen_green"].tolist() == [False]


def test_a_runs_trace_carries_the_stages_records_and_they_agree_with_the_detector(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"watermark_delta": 2.0, "watermark_gamma": 0.5},
                               seed=4, max_new_tokens=12)).to_dict()
    ids = trace["prompt_ids"] + [t["id"] for t in trace["tokens"]]
    found = detect(ids, 16, 0.5, context=len(trace["prompt_ids"]))
    for step, mark in zip(trace["steps"], found.marks[len(trace["prompt_ids"]):]):
        record = next(st for st in step["stages"] if st["name"] == "watermark")
        d = record["decision"]
        assert d["chosen_green"] is mark.green
        assert (step["chosen"] in d["green"]) is mark.green
        green = set(d["green"])
        before = next(st for st in step["stages"] if st["name"] == "raw")
        assert not record.get("truncates", False)
        # the record's masses against the recorded candidates' probabilities (toy's 16 tokens are all listed)
        ids_ = [c["id"] for c in step["candidates"]]
        assert sorted(ids_) == list(range(16))
        assert d["green_mass_before"] == pytest.approx(sum(p for i, p in zip(ids_, before["probs"]) if i in green),
                                                       abs=1e-6)
        assert d["green_mass_after"] == pytest.approx(sum(p for i, p in zip(ids_, record["probs"]) if i in green),
                                                      abs=1e-6)


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
def test_the_runs_count_and_detect_on_its_text_score_the_same_tokens(store, scheme):
    """One rule, the text's tokens: a run that ends at the end-of-sequence token does not score it (the text
    does not hold it), so its last count and z are what ``detect`` finds on its text after its prompt."""
    params = {"watermark_delta": 2.0, "watermark_gamma": 0.5, "watermark_scheme": scheme}
    trace = run(store, Request("toy", "sampling", "1 2", params, seed=0, max_new_tokens=12)).to_dict()
    assert trace["finish_reason"] == "eos" and trace["tokens"][-1]["id"] in store.get("toy").eos_ids
    last = next(st for st in trace["steps"][-1]["stages"] if st["name"] == "watermark")["decision"]
    found = detect_text(store, "toy", trace["text"], "1 2", gamma=0.5, scheme=scheme)
    assert last["scored"] == found["scored"] == len(trace["tokens"]) - 1
    assert (last["green_count"], last["z"]) == (found["green"], pytest.approx(found["z"], rel=1e-5))  # six digits


def test_the_stage_draws_nothing_from_the_runs_generator(toy):
    generator = torch.Generator().manual_seed(9)
    start = generator.get_state()
    for scheme in ("lefthash", "selfhash"):
        chain = build_sampler_chain(SamplerParams(watermark_delta=2.0, watermark_scheme=scheme), generator, toy)
        record = record_chain(chain, torch.randn(1, 64), torch.tensor([[1, 2]]))
        accept_chosen(chain, record, torch.tensor([3]), forced=False)
    assert torch.equal(generator.get_state(), start)


def test_presets_put_the_watermark_last_before_synthid_and_the_stages_that_pick():
    for names in PRESETS.values():
        assert names[-4:] == ("watermark", "synthid", "mirostat", "adaptive_p")
    llama = PRESETS["llama.cpp"]
    assert llama.index("watermark") == llama.index("temperature") + 1
    hf = PRESETS["transformers"]
    assert hf.index("watermark") > max(hf.index(n) for n in ("temperature", "top_k", "top_p", "min_p", "typical_p",
                                                             "epsilon", "eta"))


@pytest.mark.parametrize("order", list(PRESETS))
def test_temperature_0_runs_the_watermark_before_its_argmax(order):
    names = SamplerParams(temperature=0.0, watermark_delta=2.0, order=order).order.split(",")
    assert names.index("watermark") == names.index("temperature") - 1
    assert SamplerParams(temperature=0.0, order=order).order.split(",") == list(PRESETS[order])
    assert SamplerParams(temperature=0.7, watermark_delta=2.0, order=order).order.split(",") == list(PRESETS[order])


def test_greedy_with_the_watermark_is_transformers_greedy_search_with_its_processor(store, smollm):
    prompt = smollm.encode("Name three colours.")
    params = {"temperature": 0.0, "watermark_delta": 4.0}
    marked = run(store, Request("smollm2-135m", "sampling", "Name three colours.", params, seed=0,
                                max_new_tokens=16)).to_dict()
    plain = run(store, Request("smollm2-135m", "sampling", "Name three colours.", {"temperature": 0.0}, seed=0,
                               max_new_tokens=16)).to_dict()
    processor = WatermarkLogitsProcessor(smollm.vocab_size, "cpu", bias=4.0)
    context = torch.tensor([prompt])
    for _ in range(16):
        logits = processor(context, smollm.forward(context).logits[:, -1])
        context = torch.cat([context, logits.argmax(-1, keepdim=True)], dim=1)
    assert [t["id"] for t in marked["tokens"]] == context[0, len(prompt):].tolist()
    assert [t["id"] for t in marked["tokens"]] != [t["id"] for t in plain["tokens"]]


@pytest.mark.parametrize("strategy, extra", [
    ("beam", {"num_beams": 2}), ("stochastic_beam", {}), ("sample_beam", {}),
    ("speculative", {"draft": "toy-small"}), ("contrastive", {"amateur": "window", "amateur_window": 2}),
    ("greedy", {}),
])
def test_strategies_without_the_sampler_chain_refuse_the_watermark_by_name(store, strategy, extra):
    with pytest.raises(InvalidRequest, match="unknown parameter 'watermark_delta'"):
        run(store, Request("toy", strategy, "1 2", {**extra, "watermark_delta": 2.0}, max_new_tokens=2))


@pytest.mark.parametrize("values, message", [
    ({"watermark_delta": -1}, "watermark_delta must be in [0, 100], got -1"),
    ({"watermark_gamma": 1.0}, "watermark_gamma must be in (0, 1), got 1"),
    ({"watermark_gamma": 0}, "watermark_gamma must be in (0, 1), got 0"),
    ({"watermark_scheme": "minhash"}, "watermark_scheme must be one of lefthash, selfhash, got 'minhash'"),
    ({"watermark_key": -5}, "watermark_key must be in [0, 2147483647], got -5"),
])
def test_bad_settings_are_refused_with_their_range(values, message):
    with pytest.raises(InvalidRequest) as err:
        SamplerParams(**values)
    assert str(err.value) == message
