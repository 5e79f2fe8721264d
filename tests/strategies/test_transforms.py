"""Each transform: a value table on [0.1, 0.2, 0.3, 0.4], parity with transformers' own
processors on seeded random logits, and the input is never modified."""
import math

import pytest
import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from strategies.sampling.chain import ChainParams, apply_chain, build_chain, run_chain
from strategies.sampling.transforms import MinP, RepetitionPenalty, Temperature, TopK, TopP

PROBS = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
LOGITS = PROBS.log()
NO_CONTEXT = torch.zeros((1, 0), dtype=torch.long)


def after(t, logits=LOGITS, context=NO_CONTEXT):
    return t.apply(logits, context).softmax(-1)[0].tolist()


@pytest.mark.parametrize("transform, expected", [
    (TopK(1), [0, 0, 0, 1]),
    (TopK(2), [0, 0, 3 / 7, 4 / 7]),
    (TopK(4), [0.1, 0.2, 0.3, 0.4]),
    (TopK(99), [0.1, 0.2, 0.3, 0.4]),  # clamped to the vocabulary
    (TopP(0.4), [0, 0, 0, 1]),  # the top token alone reaches 0.4
    (TopP(0.5), [0, 0, 3 / 7, 4 / 7]),  # 0.4 < 0.5, so 0.3 joins
    (TopP(0.69), [0, 0, 3 / 7, 4 / 7]),
    (TopP(0.71), [0, 2 / 9, 3 / 9, 4 / 9]),
    (TopP(1e-9), [0, 0, 0, 1]),  # at least one token always kept
    (MinP(0.49), [0, 2 / 9, 3 / 9, 4 / 9]),  # threshold 0.196
    (MinP(0.51), [0, 0, 3 / 7, 4 / 7]),
    (MinP(1.0), [0, 0, 0, 1]),
    (Temperature(0), [0, 0, 0, 1]),  # temperature 0 = greedy
    (Temperature(1.0), [0.1, 0.2, 0.3, 0.4]),
])
def test_value_table(transform, expected):
    got = torch.tensor(after(transform))
    torch.testing.assert_close(got, torch.tensor(expected, dtype=got.dtype), atol=1e-6, rtol=0)


def test_temperature_table():
    for t in (0.5, 2.0):
        expected = PROBS[0] ** (1 / t) / (PROBS[0] ** (1 / t)).sum()
        torch.testing.assert_close(torch.tensor(after(Temperature(t))), expected, atol=1e-6, rtol=0)


def test_repetition_penalty_table():
    # Logits [2, -1, 0.5, -3]; tokens 0 and 1 already seen, penalty 2.
    logits = torch.tensor([[2.0, -1.0, 0.5, -3.0]])
    out = RepetitionPenalty(2.0).apply(logits, torch.tensor([[0, 1, 1]]))
    assert out.tolist() == [[1.0, -2.0, 0.5, -3.0]]  # positive divided, negative multiplied


def plain(decision):
    """A decision's row 0 as plain numbers (its [batch] tensors read at row 0)."""
    out = {}
    for key, value in decision.items():
        if isinstance(value, torch.Tensor):
            out[key] = value[0].tolist()
        else:
            out[key] = value
    return out


@pytest.mark.parametrize("transform, expected", [
    (TopK(2), {"k": 2, "cut_logit": math.log(0.3), "cut_prob": 0.3}),
    (TopK(99), {"k": 4, "cut_logit": math.log(0.1), "cut_prob": 0.1}),  # k as clamped
    (TopP(0.5), {"p": 0.5, "rank": 2, "mass": 0.7, "cumulative": [1.0, 0.9, 0.7, 0.4]}),
    (TopP(1e-9), {"p": 1e-9, "rank": 1, "mass": 0.4, "cumulative": [1.0, 0.9, 0.7, 0.4]}),
    (MinP(0.49), {"min_p": 0.49, "top_prob": 0.4, "threshold": 0.196}),
    (Temperature(0.5), {"t": 0.5}),
    (Temperature(0), {"t": 0.0}),
])
def test_decision_table(transform, expected):
    """Each transform records the decision it made on the distribution it received."""
    before = LOGITS.clone()
    out, decision = transform.decide(LOGITS, NO_CONTEXT)
    got = plain(decision)
    assert set(got) == set(expected)
    for key, want in expected.items():
        assert got[key] == pytest.approx(want, rel=1e-6), key
    assert torch.equal(out, transform.apply(LOGITS, NO_CONTEXT)) and torch.equal(LOGITS, before)


def test_repetition_penalty_records_the_ids_it_touched():
    out, decision = RepetitionPenalty(2.0).decide(torch.tensor([[2.0, -1.0, 0.5, -3.0]]), torch.tensor([[0, 1, 1]]))
    assert decision["penalty"] == 2.0 and decision["touched"].tolist() == [2]
    assert decision["ids"].tolist() == [[True, True, False, False]]


CASES = [
    (lambda: Temperature(0.7), lambda: TemperatureLogitsWarper(0.7)),
    (lambda: Temperature(1.9), lambda: TemperatureLogitsWarper(1.9)),
    (lambda: TopK(5), lambda: TopKLogitsWarper(5)),
    (lambda: TopK(40), lambda: TopKLogitsWarper(40)),
    (lambda: TopP(0.3), lambda: TopPLogitsWarper(0.3)),
    (lambda: TopP(0.9), lambda: TopPLogitsWarper(0.9)),
    (lambda: TopP(0.995), lambda: TopPLogitsWarper(0.995)),
    (lambda: MinP(0.05), lambda: MinPLogitsWarper(0.05)),
    (lambda: MinP(0.3), lambda: MinPLogitsWarper(0.3)),
    (lambda: RepetitionPenalty(1.3), lambda: RepetitionPenaltyLogitsProcessor(1.3)),
    (lambda: RepetitionPenalty(0.7), lambda: RepetitionPenaltyLogitsProcessor(0.7)),
]


@pytest.mark.parametrize("ours, theirs", CASES)
@pytest.mark.parametrize("vocab", [10, 1000, 50000])
def test_parity_with_transformers(ours, theirs, vocab):
    g = torch.Generator().manual_seed(vocab)
    # float64, so that top-p's cumulative sums (summed in opposite directions by the two
    # implementations) cannot straddle a threshold by rounding.
    logits = torch.randn((3, vocab), generator=g, dtype=torch.float64) * 3
    context = torch.randint(0, vocab, (3, 12), generator=g)
    before = logits.clone()
    got = ours().apply(logits, context)
    want = theirs()(context, logits.clone())
    torch.testing.assert_close(got, want)
    assert torch.equal(logits, before), "the input logits were modified"


def test_chain_default_order_matches_transformers():
    from transformers.generation.logits_process import LogitsProcessorList
    g = torch.Generator().manual_seed(7)
    logits = torch.randn((2, 500), generator=g) * 2
    context = torch.randint(0, 500, (2, 30), generator=g)
    p = ChainParams(temperature=0.8, top_k=50, top_p=0.9, min_p=0.02, repetition_penalty=1.2)
    theirs = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.2), TemperatureLogitsWarper(0.8),
                                  TopKLogitsWarper(50), TopPLogitsWarper(0.9), MinPLogitsWarper(0.02)])
    torch.testing.assert_close(apply_chain(build_chain(p), logits, context), theirs(context, logits.clone()))


def test_order_changes_the_result_and_stages_follow_it():
    logits = torch.tensor([[3.0, 2.5, 2.0, 1.0, 0.0]])
    a = ChainParams(temperature=3.0, top_p=0.6)  # temperature first: flatter, more tokens reach the nucleus
    b = ChainParams(temperature=3.0, top_p=0.6, order="penalty,top_p,temperature,top_k,min_p")
    kept_a = torch.isfinite(apply_chain(build_chain(a), logits, NO_CONTEXT)).sum()
    kept_b = torch.isfinite(apply_chain(build_chain(b), logits, NO_CONTEXT)).sum()
    assert kept_a > kept_b
    assert [t.name for t in build_chain(b)] == ["top_p", "temperature"]
    stages = run_chain(build_chain(b), logits, NO_CONTEXT)
    assert len(stages) == 3 and torch.equal(stages[0], logits)


def test_noop_values_drop_out_of_the_chain():
    assert build_chain(ChainParams()) == []
    assert [t.name for t in build_chain(ChainParams(top_k=3, min_p=0.1))] == ["top_k", "min_p"]


def test_top_p_sorts_only_what_it_needs_yet_matches_a_full_sort():
    # A flat distribution forces the growing top-k search past its first 64 entries.
    logits = torch.randn((1, 3000), generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.1
    logits[0, :5] = 4.0
    out = TopP(0.9).apply(logits, NO_CONTEXT)
    want = TopPLogitsWarper(0.9)(NO_CONTEXT, logits.clone())
    assert torch.equal(torch.isfinite(out), torch.isfinite(want))
    assert int(torch.isfinite(out).sum()) > 64


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-0.1), "temperature must be in [0, 100], got -0.1"),
    (dict(temperature=math.nan), "temperature must be in [0, 100], got nan"),
    (dict(top_p=1.5), "top_p must be in (0, 1], got 1.5"),
    (dict(top_p=0.0), "top_p must be in (0, 1], got 0"),
    (dict(top_k=-1), "top_k must be in [0, 1000000], got -1"),  # integers in full, never 1e+06
    (dict(top_k=2_000_000), "top_k must be in [0, 1000000], got 2000000"),
    (dict(top_k=True), "top_k must be an integer, got True"),  # a bool is no number
    (dict(temperature=True), "temperature must be a number, got True"),
    (dict(min_p=1.2), "min_p must be in [0, 1], got 1.2"),
    (dict(repetition_penalty=0.0), "repetition_penalty must be in (0, 10], got 0"),
    (dict(order="top_k,top_p"), "order must list each of"),
    (dict(top_k=2.5), "top_k must be an integer, got 2.5"),
])
def test_bad_values_name_value_and_range(kwargs, message):
    from playground.errors import InvalidRequest
    with pytest.raises(InvalidRequest) as err:
        ChainParams(**kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("value, text", [
    (2147483648, "2147483648"), (2.0**31, "2147483648"), (1e6, "1000000"), (0.0, "0"), (-1, "-1"),
    (1.5, "1.5"), (0.05, "0.05"), (1e-05, "1e-05"), (2147483648.5, "2147483648.5"), (math.inf, "inf"),
])
def test_numbers_in_messages_are_written_in_full(value, text):
    from strategies.params import number_text
    assert number_text(value) == text


@pytest.mark.parametrize("probs, p, kept", [
    ([0.3, 0.1, 0.1, 0.5], 0.8, [1, 0, 0, 1]),  # transformers' own test: 0.5 + 0.3 rounds to float32's 0.8
    ([0.15, 0.3, 0.3, 0.25], 0.8, [0, 1, 1, 1]),
    ([0.125, 0.5, 0.25, 0.125], 0.5, [0, 1, 0, 0]),  # exact in binary: the top token alone reaches 0.5
    ([0.125, 0.5, 0.25, 0.125], 0.75, [0, 1, 1, 0]),
    ([0.1, 0.2, 0.3, 0.4], 0.7, [0, 0, 1, 1]),  # 0.4 + 0.3 is 0.70000005 in float32, p 0.69999999
    ([0.1, 0.2, 0.3, 0.4], 0.9, [0, 1, 1, 1]),  # 0.89999998 both sides
])
def test_top_p_at_an_exact_boundary_keeps_the_smallest_set_that_reaches_p(probs, p, kept):
    logits = torch.tensor([probs]).log()
    out, decision = TopP(p).decide(logits, NO_CONTEXT)
    assert torch.isfinite(out)[0].int().tolist() == kept
    assert int(decision["rank"]) == sum(kept)


def test_top_p_keeps_k_tokens_when_p_is_the_float32_mass_of_the_top_k():
    """The rule, stated in float32 on both sides: with p the running sum of the k most probable tokens
    (as cumsum gives it), exactly k are kept, whatever that sum's rounding."""
    gen = torch.Generator().manual_seed(3)
    for _ in range(200):
        logits = torch.randn((1, 12), generator=gen) * 2
        running = logits.softmax(-1).sort(descending=True).values.cumsum(-1)[0]
        k = int(torch.randint(1, 11, (1,), generator=gen))
        if float(running[k - 1]) > 1 or float(running[k - 1]) == float(running[k]):
            continue
        out = TopP(float(running[k - 1])).apply(logits, NO_CONTEXT)
        assert int(torch.isfinite(out).sum()) == k
