"""The SynthID Text stage (strategies/sampling/synthid.py, strategies/g_values.py): its logits equal
transformers' SynthIDTextWatermarkLogitsProcessor step by step on three vocabularies (cut tokens -inf here
where transformers writes the lowest float), its repeated contexts pass through, averaged over keys it
leaves the chain's distribution as it was while the green-list watermark does not (chi-square), its trace
record is its own decision, and the strategies without a sampler chain refuse it."""
from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import SynthIDTextWatermarkLogitsProcessor

from playground.engine import Request, run
from playground.errors import InvalidRequest
from strategies.g_values import tournament
from strategies.sampling.chain import accept_chosen, apply_chain, record_chain
from strategies.sampling.samplers import PRESETS, SamplerParams, build_sampler_chain
from strategies.sampling.synthid import SynthID
from strategies.sampling.watermark import Watermark
from strategies.stages import Outcome

EXAMPLE_KEYS = [654, 400, 836, 123, 340, 443, 597, 160, 57]  # transformers' docstring's keys
BIG_KEYS = torch.randint(0, 2**62, (30,), generator=torch.Generator().manual_seed(1)).tolist()
# keys, ngram_len, context_history_size, sampling_table_size, sampling_table_seed
SETTINGS = [(EXAMPLE_KEYS, 5, 1024, 2**16, 0), ([1, 2], 2, 4, 1000, 7), (BIG_KEYS, 3, 1024, 2**16, 0)]


def model_logits(lm, prompt: list[int], tokens: list[int], top_k: int) -> list[torch.Tensor]:
    """[1, vocab] next-token logits before each of ``tokens`` after ``prompt``, all but the top ``top_k`` cut."""
    out, context = [], list(prompt)
    for t in tokens:
        logits = lm.forward(torch.tensor([context])).logits[:, -1]
        kth = logits.topk(top_k).values[:, -1:]
        out.append(logits.masked_fill(logits < kth, float("-inf")))
        context.append(t)
    return out


def assert_parity(prompt: list[int], tokens: list[int], logits: list[torch.Tensor], settings=SETTINGS) -> None:
    """Our stage against transformers' processor along ``tokens`` (fed back as the chosen ones)."""
    for keys, ngram_len, history, table_size, table_seed in settings:
        theirs = SynthIDTextWatermarkLogitsProcessor(ngram_len, keys, table_size, table_seed, history, "cpu")
        ours = SynthID(",".join(map(str, keys)), ngram_len, history, table_size, table_seed)
        context = torch.tensor([prompt])
        repeated = []
        for step_logits, token in zip(logits, tokens):
            before = step_logits.clone()
            expected = theirs(context, step_logits.clone())
            out, decision = ours.decide(step_logits, context)
            assert torch.equal(step_logits, before)  # the input is left as it was
            lowest = torch.finfo(expected.dtype).min
            assert torch.equal(out[expected > lowest], expected[expected > lowest]), (keys, ngram_len, context)
            assert bool((out[expected == lowest] == float("-inf")).all())
            assert torch.equal(torch.isfinite(out), expected > lowest)
            repeated.append(bool(decision["repeated"][0]))
            ours.accept(Outcome(step_logits, out, decision, torch.tensor([token]), False))
            context = torch.cat([context, torch.tensor([[token]])], dim=1)
        assert any(repeated) and not all(repeated), (ngram_len, repeated)  # both paths ran


def test_parity_with_transformers_on_toys_vocabulary(toy):
    tokens = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 7, 2, 3]  # a repeated 4-token context
    prompt = [1, 2]
    assert_parity(prompt, tokens, model_logits(toy, prompt, tokens, top_k=6))
    # and a batch of two rows, on random logits
    theirs = SynthIDTextWatermarkLogitsProcessor(5, EXAMPLE_KEYS, 2**16, 0, 1024, "cpu")
    ours = SynthID(",".join(map(str, EXAMPLE_KEYS)), 5)
    logits = torch.randn(2, toy.vocab_size, generator=torch.Generator().manual_seed(0))
    batch = torch.tensor([[1, 2], [5, 6]])
    assert torch.equal(ours.apply(logits, batch), theirs(batch, logits))


def test_parity_with_transformers_on_smollm2s_vocabulary(smollm):
    prompt = smollm.encode("Write a poem about the sea.")
    tokens = smollm.encode(" the cat sat on the mat, the cat sat on the mat, the end", chat=False)
    assert_parity(prompt, tokens, model_logits(smollm, prompt, tokens, top_k=50))


def test_parity_with_transformers_on_gemmas_vocabulary(gemma):
    assert gemma.vocab_size == 262144
    prompt = gemma.encode("Once upon a time", chat=False)
    tokens = gemma.encode(" a b a b a c", chat=False)
    assert_parity(prompt, tokens, model_logits(gemma, prompt, tokens, top_k=40), settings=SETTINGS[1:2])


def test_the_tournament_raises_the_expected_g_value_and_keeps_cut_tokens_cut():
    logits = torch.tensor([[2.0, 1.0, 0.5, float("-inf")]])
    g = torch.tensor([[[0, 1], [1, 1], [0, 0], [1, 1]]])
    out = tournament(logits, g)
    p, q = logits.softmax(-1), out.exp()
    assert float(q.sum()) == pytest.approx(1.0)
    assert out[0, 3] == float("-inf")
    mean_g = g.double().mean(-1)
    assert float((q * mean_g).sum()) > float((p * mean_g).sum())
    # one layer by hand: p (1 + g - E_p[g])
    one = tournament(logits, g[:, :, :1])
    expected = p * (1 + g[:, :, 0] - (p * g[:, :, 0]).sum())
    assert torch.allclose(one.exp(), expected)


def chain_distribution_and_draws(params: dict, vary: str, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The toy's next-token distribution after "1 2" under temperature 3 and top-k 4 without a watermark,
    and ``samples`` tokens each drawn from the chain with the watermark of ``params`` under another key."""
    context = torch.tensor([[1, 2]])
    logits = torch.tensor([[0.1, -2.0, 0.3, 4.0, -1.0, -3.0, 0.0, -0.5, -4.0, 3.2, -2.5, 0.2, -1.5, -3.5, 0.4, -0.2]])
    plain = apply_chain(build_sampler_chain(SamplerParams(temperature=3.0, top_k=4)), logits, context)
    keys = torch.randint(0, 2**31 - 1, (samples, 3), generator=torch.Generator().manual_seed(11)).tolist()
    generator = torch.Generator().manual_seed(12)
    draws = torch.zeros(logits.shape[-1], dtype=torch.long)
    for k in keys:
        value = ",".join(map(str, k)) if vary == "synthid_keys" else k[0]
        chain = build_sampler_chain(SamplerParams(temperature=3.0, top_k=4, **params, **{vary: value}))
        probs = apply_chain(chain, logits, context).softmax(-1)
        draws[int(torch.multinomial(probs[0], 1, generator=generator))] += 1
    return plain.softmax(-1)[0], draws


def chi_square_p(expected_probs: torch.Tensor, draws: torch.Tensor) -> float:
    kept = expected_probs > 0
    assert int(draws[~kept].sum()) == 0  # neither watermark brings back a cut token
    observed = draws[kept].double()
    probs = expected_probs[kept].double()
    return float(chisquare(observed.numpy(), (probs / probs.sum() * observed.sum()).numpy()).pvalue)


def test_over_keys_synthid_leaves_the_chains_distribution_as_it_was_and_the_green_list_does_not():
    """The paper's non-distortion: averaged over keys, the tournament's token is distributed as the chain's
    without it; the green list's delta moves mass to the tokens it happens to make green, and averaged over
    keys that still favours the less probable tokens."""
    samples = 6000
    expected, synthid_draws = chain_distribution_and_draws({}, "synthid_keys", samples)
    assert (expected > 0.05).sum() == 4  # four live tokens, none rare
    p_synthid = chi_square_p(expected, synthid_draws)
    _, green_draws = chain_distribution_and_draws({"watermark_delta": 2.0, "watermark_gamma": 0.5}, "watermark_key",
                                                  samples)
    p_green = chi_square_p(expected, green_draws)
    print(f"\nchi-square p over {samples} keys: synthid {p_synthid:.3g}, green list (delta 2) {p_green:.3g}")
    assert p_synthid > 0.01
    assert p_green < 1e-6


def test_the_record_is_the_stages_decision_and_accept_scores_the_chosen_token(toy):
    params = SamplerParams(synthid_keys="5,6,7", synthid_ngram_len=2, top_k=8)
    chain = build_sampler_chain(params, torch.Generator(), toy)
    assert [t.name for t in chain] == ["top_k", "synthid"]
    context = torch.tensor([[1, 2]])
    record = record_chain(chain, toy.forward(context).logits[:, -1], context)
    decision = record.decisions[1]
    assert decision["g_values"].shape == (1, toy.vocab_size, 3)
    assert torch.equal(decision["g_mean"], decision["g_values"].float().mean(-1))
    assert decision["depth"] == 3 and decision["keys"] == "5,6,7" and not decision["repeated"][0]
    received, out = record.logits[1], record.logits[2]
    assert torch.equal(out, tournament(received, decision["g_values"]))
    assert float(decision["g_mass_after"][0]) >= float(decision["g_mass_before"][0])
    accept_chosen(chain, record, torch.tensor([3]), forced=False)
    learned = record.decisions[1]
    assert float(learned["chosen_g_mean"][0]) == pytest.approx(float(decision["g_mean"][0, 3]))
    # the first token ends no whole bigram of the text: nothing is scored yet
    assert learned["counted"].tolist() == [False] and learned["scored"].tolist() == [0]


def test_a_runs_trace_records_each_candidates_g_values_per_layer(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"synthid_keys": "9,8,7,6", "synthid_ngram_len": 3},
                               seed=3, max_new_tokens=8)).to_dict()
    for step in trace["steps"]:
        record = next(st for st in step["stages"] if st["name"] == "synthid")
        d = record["decision"]
        ids = [c["id"] for c in step["candidates"]]
        assert len(d["g_values"]) == len(ids) and all(len(g) == 4 and set(g) <= {0, 1} for g in d["g_values"])
        assert d["g_mean"] == [pytest.approx(sum(g) / 4) for g in d["g_values"]]
        chosen = d["g_values"][ids.index(step["chosen"])]
        assert d["chosen_g_mean"] == pytest.approx(sum(chosen) / 4)
        assert not record.get("truncates", False)


def test_the_stage_draws_nothing_from_the_runs_generator(toy):
    generator = torch.Generator().manual_seed(9)
    start = generator.get_state()
    chain = build_sampler_chain(SamplerParams(synthid_keys="1,2"), generator, toy)
    record = record_chain(chain, torch.randn(1, 64), torch.tensor([[1, 2]]))
    accept_chosen(chain, record, torch.tensor([3]), forced=False)
    assert torch.equal(generator.get_state(), start)


def test_presets_put_synthid_right_after_the_green_list_watermark():
    for names in PRESETS.values():
        assert names[-4:] == ("watermark", "synthid", "mirostat", "adaptive_p")


@pytest.mark.parametrize("order", list(PRESETS))
def test_temperature_0_runs_synthid_before_its_argmax(order):
    names = SamplerParams(temperature=0.0, synthid_keys="1", order=order).order.split(",")
    assert names.index("synthid") == names.index("temperature") - 1
    both = SamplerParams(temperature=0.0, synthid_keys="1", watermark_delta=2.0, order=order).order.split(",")
    assert both.index("watermark") + 2 == both.index("synthid") + 1 == both.index("temperature")


def test_greedy_with_synthid_is_the_argmax_of_transformers_processor(store, toy):
    marked = run(store, Request("toy", "sampling", "9 10 11", {"temperature": 0.0, "synthid_keys": "3,1,4,1,5",
                                                               "synthid_ngram_len": 2}, max_new_tokens=10)).to_dict()
    processor = SynthIDTextWatermarkLogitsProcessor(2, [3, 1, 4, 1, 5], 2**16, 0, 1024, "cpu")
    context = torch.tensor([[9, 10, 11]])
    for _ in marked["tokens"]:
        logits = processor(context, toy.forward(context).logits[:, -1])
        context = torch.cat([context, logits.argmax(-1, keepdim=True)], dim=1)
    assert [t["id"] for t in marked["tokens"]] == context[0, 3:].tolist()


@pytest.mark.parametrize("strategy, extra", [
    ("beam", {"num_beams": 2}), ("stochastic_beam", {}), ("sample_beam", {}),
    ("speculative", {"draft": "toy-small"}), ("contrastive", {"amateur": "window", "amateur_window": 2}),
    ("greedy", {}),
])
def test_strategies_without_the_sampler_chain_refuse_synthid_by_name(store, strategy, extra):
    with pytest.raises(InvalidRequest, match="unknown parameter 'synthid_keys'"):
        run(store, Request("toy", strategy, "1 2", {**extra, "synthid_keys": "1,2"}, max_new_tokens=2))


@pytest.mark.parametrize("values, message", [
    ({"synthid_keys": "1,two,3"}, "synthid_keys must be integers in [0, 2^63 - 1], comma-separated, got '1,two,3'"),
    ({"synthid_keys": "1.5"}, "synthid_keys must be integers in [0, 2^63 - 1], comma-separated, got '1.5'"),
    ({"synthid_keys": "-4,5"}, "synthid_keys must be integers in [0, 2^63 - 1], comma-separated, got '-4,5'"),
    ({"synthid_keys": "1,,2"}, "synthid_keys must be integers in [0, 2^63 - 1], comma-separated, got '1,,2'"),
    ({"synthid_keys": str(2**63)}, f"synthid_keys must be integers in [0, 2^63 - 1], comma-separated, got '{2**63}'"),
    ({"synthid_keys": ",".join(["7"] * 65)}, "synthid_keys must hold 1 to 64 keys (one per tournament layer), got 65"),
    ({"synthid_ngram_len": 1}, "synthid_ngram_len must be in [2, 32], got 1"),
    ({"synthid_ngram_len": 33}, "synthid_ngram_len must be in [2, 32], got 33"),
    ({"synthid_context_history_size": 0}, "synthid_context_history_size must be in [1, 1048576], got 0"),
    ({"synthid_sampling_table_size": 2**24 + 1}, "synthid_sampling_table_size must be in [2, 16777216], got 16777217"),
])
def test_bad_settings_are_refused_with_their_range(values, message):
    with pytest.raises(InvalidRequest) as err:
        SamplerParams(**values)
    assert str(err.value) == message


def test_keys_are_written_back_without_spaces_and_empty_is_off():
    assert SamplerParams(synthid_keys=" 1, 2 ,3").synthid_keys == "1,2,3"
    assert "synthid" not in [t.name for t in build_sampler_chain(SamplerParams(synthid_keys=""))]
    assert "synthid" not in [t.name for t in build_sampler_chain(SamplerParams(synthid_keys="  "))]


def test_watermark_and_synthid_compose_in_the_chain(toy):
    chain = build_sampler_chain(SamplerParams(synthid_keys="1,2", watermark_delta=1.0), torch.Generator(), toy)
    assert [t.name for t in chain] == ["watermark", "synthid"]
    assert isinstance(chain[0], Watermark) and isinstance(chain[1], SynthID)
