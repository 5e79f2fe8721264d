"""The sampler stages beyond the basic five: parity with transformers' processors where one exists
(typical, epsilon, eta, no-repeat n-gram, sequence bias), with llama.cpp's test vectors and vLLM's formula
for the presence and frequency penalties, hand-computed tables for the others
(top-nσ, XTC, DRY, dynamic temperature, mirostat), the statistics of XTC's coin and of mirostat's
sampling at a fixed seed, and the parameters, orders and presets."""
import math
import re

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TypicalLogitsWarper,
)
from word_lm import WordLM

from playground.errors import InvalidRequest
from strategies.sampling.adaptive import DynamicTemperature, Mirostat
from strategies.sampling.chain import Multinomial, accept_chosen, record_chain
from strategies.sampling.repeats import DRY, NoRepeatNGram, PresenceFrequency, WordBias, presence_frequency_penalised
from strategies.sampling.samplers import PRESETS, SAMPLER_STAGES, SamplerParams, build_sampler_chain
from strategies.sampling.truncations import XTC, Epsilon, Eta, TopNSigma, TypicalP
from strategies.stages import STAGES, Outcome, on_values

NO_CONTEXT = torch.zeros((1, 0), dtype=torch.long)
SPELLED = {"word_bias": "w1=-2, w2"}  # word bias's words as the word LM spells them (" w<id>")


def probs_after(t, logits, context=NO_CONTEXT):
    return t.apply(logits, context).softmax(-1)[0]


# --- parity with transformers ---------------------------------------------------------------------

def sequence_bias_case(context: torch.Tensor, vocab: int, g: torch.Generator):
    """Single tokens, and two- and three-token sequences of which some end the first row's context."""
    seqs = [((int(torch.randint(0, vocab, (1,), generator=g)),), 2.5),
            ((int(torch.randint(0, vocab, (1,), generator=g)),), -1.5),
            ((int(context[0, -1]), int(torch.randint(0, vocab, (1,), generator=g))), -4.0),
            ((int(context[1, -2]), int(context[1, -1]), int(torch.randint(0, vocab, (1,), generator=g))), 3.0),
            ((int(torch.randint(0, vocab, (1,), generator=g)), int(torch.randint(0, vocab, (1,), generator=g))), 7.0)]
    return dict(seqs)


CASES = [
    (lambda v, c, g: TypicalP(0.2), lambda v, c, g: TypicalLogitsWarper(0.2)),
    (lambda v, c, g: TypicalP(0.9), lambda v, c, g: TypicalLogitsWarper(0.9)),
    (lambda v, c, g: TypicalP(0.995), lambda v, c, g: TypicalLogitsWarper(0.995)),
    (lambda v, c, g: Epsilon(3e-4), lambda v, c, g: EpsilonLogitsWarper(3e-4)),
    (lambda v, c, g: Epsilon(0.02), lambda v, c, g: EpsilonLogitsWarper(0.02)),
    (lambda v, c, g: Epsilon(0.9), lambda v, c, g: EpsilonLogitsWarper(0.9)),
    (lambda v, c, g: Eta(3e-4), lambda v, c, g: EtaLogitsWarper(3e-4)),
    (lambda v, c, g: Eta(0.05), lambda v, c, g: EtaLogitsWarper(0.05)),
    (lambda v, c, g: NoRepeatNGram(1), lambda v, c, g: NoRepeatNGramLogitsProcessor(1)),
    (lambda v, c, g: NoRepeatNGram(2), lambda v, c, g: NoRepeatNGramLogitsProcessor(2)),
    (lambda v, c, g: NoRepeatNGram(3), lambda v, c, g: NoRepeatNGramLogitsProcessor(3)),
]


@pytest.mark.parametrize("ours, theirs", CASES)
@pytest.mark.parametrize("vocab", [10, 1000, 50000])
def test_parity_with_transformers(ours, theirs, vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn((3, vocab), generator=g, dtype=torch.float64) * 3
    # repeats so that n-grams recur even in a large vocabulary
    context = torch.randint(0, min(vocab, 6), (3, 40), generator=g)
    before = logits.clone()
    got = ours(vocab, context, g).apply(logits, context)
    want = theirs(vocab, context, g)(context, logits.clone())
    torch.testing.assert_close(got, want)
    assert torch.equal(logits, before), "the input logits were modified"


@pytest.mark.parametrize("vocab", [10, 1000, 50000])
def test_word_bias_parity_with_sequence_bias(vocab):
    g = torch.Generator().manual_seed(vocab + 1)
    logits = torch.randn((3, vocab), generator=g, dtype=torch.float64) * 3
    context = torch.randint(0, vocab, (3, 12), generator=g)
    bias = sequence_bias_case(context, vocab, g)
    before = logits.clone()
    got = WordBias(tuple(bias.items())).apply(logits, context)
    want = SequenceBiasLogitsProcessor([[list(k), v] for k, v in bias.items()])(context, logits.clone())
    torch.testing.assert_close(got, want)
    assert torch.equal(logits, before)


def test_bans_keep_the_top_token_when_they_would_remove_all():
    logits = torch.tensor([[1.0, 3.0, 2.0]])
    out = NoRepeatNGram(1).apply(logits, torch.tensor([[0, 1, 2]]))  # every token already seen
    assert torch.isfinite(out).tolist() == [[False, True, False]]
    out = WordBias((((0,), -math.inf), ((1,), -math.inf), ((2,), -math.inf))).apply(logits, NO_CONTEXT)
    assert torch.isfinite(out).tolist() == [[False, True, False]]


# --- hand-computed tables -------------------------------------------------------------------------

def test_top_nsigma_table():
    # logits [3, 2, 1, 0]: mean 1.5, sigma = sqrt((1.5² + 0.5² + 0.5² + 1.5²) / 4) = sqrt(1.25)
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    sigma = math.sqrt(1.25)
    for n, kept in [(0.5, [True, False, False, False]), (1.0, [True, True, False, False]),
                    (2.0, [True, True, True, False]), (3.0, [True, True, True, True])]:
        out, d = TopNSigma(n).decide(logits, NO_CONTEXT)
        assert torch.isfinite(out)[0].tolist() == kept, n
        assert float(d["sigma"][0]) == pytest.approx(sigma)
        assert float(d["threshold_logit"][0]) == pytest.approx(3.0 - n * sigma)
        # the probability of a token at the threshold logit: e^(thr) / sum e^logit
        z = sum(math.exp(x) for x in (3.0, 2.0, 1.0, 0.0))
        assert float(d["threshold_prob"][0]) == pytest.approx(math.exp(3.0 - n * sigma) / z)


def test_top_nsigma_keeps_the_same_set_at_any_temperature():
    logits = torch.randn((2, 500), generator=torch.Generator().manual_seed(3)) * 2
    for t in (0.3, 1.0, 3.0):
        assert torch.equal(torch.isfinite(TopNSigma(1.5).apply(logits / t, NO_CONTEXT)),
                           torch.isfinite(TopNSigma(1.5).apply(logits, NO_CONTEXT)))


def test_top_nsigma_leaves_cut_tokens_out_of_sigma():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, float("-inf")]])
    _, d = TopNSigma(1.0).decide(logits, NO_CONTEXT)
    assert float(d["sigma"][0]) == pytest.approx(math.sqrt(1.25))


PROBS = torch.tensor([[0.4, 0.3, 0.2, 0.1]])


@pytest.mark.parametrize("threshold, expected, removed", [
    (0.25, [0, 0.3 / 0.6, 0.2 / 0.6, 0.1 / 0.6], 1),  # 0.4 and 0.3 pass: 0.4 goes, 0.3 (the least) stays
    (0.15, [0, 0, 2 / 3, 1 / 3], 2),  # 0.4, 0.3, 0.2 pass: only 0.2 stays
    (0.09, [0, 0, 0, 1], 3),
    (0.35, [0.4, 0.3, 0.2, 0.1], 0),  # one token passes: XTC does not act
    (0.6, [0.4, 0.3, 0.2, 0.1], 0),  # above 0.5 two tokens can never pass
])
def test_xtc_table(threshold, expected, removed):
    out, d = XTC(1.0, threshold, torch.Generator().manual_seed(0)).decide(PROBS.log(), NO_CONTEXT)
    torch.testing.assert_close(out.softmax(-1)[0], torch.tensor(expected, dtype=torch.float32), atol=1e-6, rtol=0)
    assert int(d["removed"][0]) == removed and bool(d["acted"][0]) == (removed > 0)


def test_xtc_coin_comes_from_the_generator_and_is_recorded():
    g = torch.Generator().manual_seed(11)
    want = torch.rand((1,), generator=torch.Generator().manual_seed(11))
    out, d = XTC(0.5, 0.25, g).decide(PROBS.log(), NO_CONTEXT)
    assert torch.equal(d["coin"], want)
    assert bool(d["acted"][0]) == bool(want[0] < 0.5)
    assert torch.isfinite(out)[0, 0].item() == (not bool(want[0] < 0.5))


def test_xtc_acts_as_often_as_its_probability():
    """20,000 steps at seed 5: the coin is uniform (10 bins) and XTC acts in 30% of the steps."""
    g = torch.Generator().manual_seed(5)
    xtc = XTC(0.3, 0.25, g)
    logits = PROBS.log().repeat(20000, 1)
    _, d = xtc.decide(logits, NO_CONTEXT)
    bins = torch.histc(d["coin"], bins=10, min=0.0, max=1.0)
    assert chisquare(bins.tolist()).pvalue > 1e-3
    acted = int(d["acted"].sum())
    assert chisquare([acted, 20000 - acted], [6000, 14000]).pvalue > 1e-3
    assert chisquare([acted, 20000 - acted], [6600, 13400]).pvalue < 1e-6  # a rate of 0.33 is refused


def piece(token_id: int) -> str:
    return {0: "a", 1: "b", 2: "c", 3: "d", 4: "\n", 5: "x", 6: "y"}[token_id]


def test_dry_table():
    # context a b c d a b c: the suffix "a b c" (3 tokens) appeared before, followed by d;
    # d gets multiplier x base^(3 - allowed) = 1 x 2^(3 - 2) = 2; nothing else repeats
    logits = torch.zeros((1, 7))
    out, d = DRY(1.0, 2.0, 2, ("\n",), piece).decide(logits, torch.tensor([[0, 1, 2, 3, 0, 1, 2]]))
    assert out[0].tolist() == [0, 0, 0, -2.0, 0, 0, 0]
    assert [int(d[k][0]) for k in ("match_length", "span_start", "span_end", "repeat_start")] == [3, 0, 3, 4]
    assert d["ids"][0].tolist() == [False, False, False, True, False, False, False]
    # x y x y x: the suffix "x y x" appeared before y (positions 0..2, followed by y at 3): 1.75^(3-2)
    out = DRY(1.0, 1.75, 2, ("\n",), piece).apply(logits, torch.tensor([[5, 6, 5, 6, 5]]))
    assert out[0].tolist() == pytest.approx([0, 0, 0, 0, 0, 0, -1.75])
    # a repeat shorter than the allowed length goes unpenalised
    assert torch.equal(DRY(1.0, 2.0, 4, ("\n",), piece).apply(logits, torch.tensor([[0, 1, 2, 3, 0, 1, 2]])),
                       logits)


def test_dry_repeats_stop_at_sequence_breakers():
    logits = torch.zeros((1, 7))
    # a "\n" c d a "\n" c: the repeat "a \n c" would be 3 long, but the newline ends it: only "c" (1)
    out = DRY(1.0, 2.0, 2, ("\n",), piece).apply(logits, torch.tensor([[0, 4, 2, 3, 0, 4, 2]]))
    assert torch.equal(out, logits)
    # without the breaker the same context is penalised
    out = DRY(1.0, 2.0, 2, (":",), piece).apply(logits, torch.tensor([[0, 4, 2, 3, 0, 4, 2]]))
    assert out[0, 3] == -2.0


def test_dynamic_temperature_table():
    # uniform over 4: H = log 4, normalised 1 -> T = max
    _, d = DynamicTemperature(0.5, 2.0, 1.0).decide(torch.zeros((1, 4)), NO_CONTEXT)
    assert float(d["t"][0]) == pytest.approx(2.0)
    # p = [0.7, 0.1, 0.1, 0.1]: H = -(0.7 ln 0.7 + 3 x 0.1 ln 0.1); T = 0.5 + 1.5 (H / ln 4)^2
    p = [0.7, 0.1, 0.1, 0.1]
    h = -sum(x * math.log(x) for x in p)
    out, d = DynamicTemperature(0.5, 2.0, 2.0).decide(torch.tensor([p]).log(), NO_CONTEXT)
    t = 0.5 + 1.5 * (h / math.log(4)) ** 2
    assert float(d["t"][0]) == pytest.approx(t, rel=1e-5) and float(d["entropy"][0]) == pytest.approx(h, rel=1e-5)
    torch.testing.assert_close(out, torch.tensor([p]).log() / t)
    # tokens cut before the stage do not count in N: two live tokens, N = 2
    _, d = DynamicTemperature(0.5, 2.0, 1.0).decide(torch.tensor([[0.0, 0.0, -math.inf]]), NO_CONTEXT)
    assert float(d["normalized"][0]) == pytest.approx(1.0)


def test_mirostat_table():
    # p = [0.5, 0.25, 0.125, 0.125], tau 1: mu starts at 2 tau = 2 bits, so p >= 2^-2 = 0.25 survive
    logits = torch.tensor([[0.5, 0.25, 0.125, 0.125]]).log()
    m = Mirostat(1.0, 0.1)
    record = record_chain([m], logits, NO_CONTEXT)
    assert torch.isfinite(record.logits[-1])[0].tolist() == [True, True, False, False]
    assert float(record.decisions[0]["mu"][0]) == 2.0 and float(record.decisions[0]["threshold"][0]) == 0.25
    accept_chosen([m], record, torch.tensor([1]), forced=False)  # token 1 at 1/3 on the truncated distribution
    surprise = math.log2(3)
    assert float(record.decisions[0]["surprise"][0]) == pytest.approx(surprise)
    mu = 2.0 - 0.1 * (surprise - 1.0)
    assert float(record.decisions[0]["mu_after"][0]) == pytest.approx(mu)
    # the next step truncates at the new mu
    _, d = m.decide(logits, NO_CONTEXT)
    assert float(d["mu"][0]) == pytest.approx(mu) and float(d["threshold"][0]) == pytest.approx(2 ** -mu)


def test_mirostat_samples_its_truncated_distribution_and_mu_settles():
    """3,000 steps at seed 2 on a fixed Zipf-like distribution: the chosen tokens match the sum of
    each step's recorded truncated distribution (chi-square), not the untruncated one; and the
    average surprise approaches tau."""
    logits = (1.0 / torch.arange(1, 33, dtype=torch.float64)).log()[None] * 1.3
    m = Mirostat(3.0, 0.1)
    selector = Multinomial(torch.Generator().manual_seed(2))
    counts = torch.zeros(32, dtype=torch.float64)
    expected = torch.zeros(32, dtype=torch.float64)
    surprises = []
    for _ in range(3000):
        record = record_chain([m], logits, NO_CONTEXT)
        chosen, _ = selector.select(record.logits[-1])
        accept_chosen([m], record, chosen, forced=False)
        counts[chosen] += 1
        expected += record.logits[-1].softmax(-1)[0]
        surprises.append(float(record.decisions[0]["surprise"][0]))
    seen = expected > 1e-9
    assert counts[~seen].sum() == 0
    assert chisquare(counts[seen].tolist(), expected[seen].tolist()).pvalue > 1e-3
    untruncated = logits.softmax(-1)[0] * 3000
    assert chisquare(counts.tolist(), untruncated.tolist()).pvalue < 1e-6
    assert sum(surprises[1000:]) / 2000 == pytest.approx(3.0, abs=0.25)


def test_decisions_do_not_modify_inputs():
    logits = torch.randn((2, 40), generator=torch.Generator().manual_seed(1))
    context = torch.randint(0, 7, (2, 15), generator=torch.Generator().manual_seed(2))
    before = logits.clone()
    for t in (TypicalP(0.5), Epsilon(0.01), Eta(0.01), TopNSigma(1.0), XTC(1.0, 0.01, torch.Generator()),
              DRY(1.0, 2.0, 2, ("\n",), lambda i: f"t{i}"), DynamicTemperature(0.5, 1.5, 1.0), Mirostat(3.0, 0.1),
              NoRepeatNGram(2), WordBias((((3,), -2.0),)), PresenceFrequency(1.0, 0.5)):
        out, _ = t.decide(logits, context)
        assert torch.equal(logits, before), t.name
        assert bool(torch.isfinite(out).any(-1).all()), t.name


# --- parameters, orders, presets ------------------------------------------------------------------

def test_noop_values_drop_out_and_presets_order_the_stages():
    assert build_sampler_chain(SamplerParams(), torch.Generator(), WordLM()) == []
    every = {k: v for on in on_values(SAMPLER_STAGES).values() for k, v in on.items()} | SPELLED  # each stage's own "on"
    for preset, names in PRESETS.items():
        chain = build_sampler_chain(SamplerParams(order=preset, **every), torch.Generator(), WordLM())
        assert tuple(t.name for t in chain) == names
    # llama.cpp's default chain, its own stages in its order (its one penalties stage is the repetition
    # penalty, then presence and frequency); the samplers that pick the token last
    native = ("penalty", "presence_frequency", "dry", "top_nsigma", "top_k", "typical_p", "top_p", "min_p", "xtc", "temperature")
    assert tuple(n for n in PRESETS["llama.cpp"] if n in native) == native
    assert PRESETS["llama.cpp"][-2:] == PRESETS["transformers"][-2:] == ("mirostat", "adaptive_p")
    # transformers 5.x: temperature, then TopHLogitsWarper, then top-k, top-p, min-p, typical, epsilon, eta;
    # the watermark after all of them
    hf = ("temperature", "top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon", "eta", "watermark")
    assert tuple(n for n in PRESETS["transformers"] if n in hf) == hf


def test_each_stage_declares_values_that_switch_it_on_alone():
    """``@stage(on=...)``: the values the tests and the trace snapshot switch each stage on with."""
    for name in SAMPLER_STAGES:
        if STAGES[name].params:
            on = {k: SPELLED.get(k, v) for k, v in STAGES[name].on.items()}
            assert [t.name for t in build_sampler_chain(SamplerParams(**on), torch.Generator(), WordLM())] == [name]


def test_an_order_may_name_some_stages_and_the_rest_follow():
    p = SamplerParams(order="min_p, top_k", top_k=5, min_p=0.1, typical_p=0.5)
    assert p.order.split(",")[:2] == ["min_p", "top_k"] and sorted(p.order.split(",")) == sorted(SAMPLER_STAGES)
    assert [t.name for t in build_sampler_chain(p)] == ["min_p", "top_k", "typical_p"]


def test_each_run_gets_its_own_state():
    p = SamplerParams(mirostat_tau=3.0)
    a, b = build_sampler_chain(p), build_sampler_chain(p)
    assert a[0] is not b[0]


def test_word_bias_spells_each_word_with_and_without_a_leading_space():
    [wb] = build_sampler_chain(SamplerParams(word_bias="w3=-2, w4"), lm=WordLM())
    assert wb.sequences == (((3,), -2.0), ((4,), -math.inf))


@pytest.mark.parametrize("kwargs, message", [
    (dict(typical_p=0.0), "typical_p must be in (0, 1], got 0"),
    (dict(epsilon_cutoff=1.0), "epsilon_cutoff must be in [0, 1), got 1"),
    (dict(eta_cutoff=-0.1), "eta_cutoff must be in [0, 1), got -0.1"),
    (dict(top_nsigma=-1.0), "top_nsigma must be in [0, 100], got -1"),
    (dict(xtc_probability=1.5), "xtc_probability must be in [0, 1], got 1.5"),
    (dict(xtc_threshold=-0.5), "xtc_threshold must be in [0, 1], got -0.5"),
    (dict(dry_multiplier=-1.0), "dry_multiplier must be in [0, 100], got -1"),
    (dict(dry_base=0.5), "dry_base must be in [1, 100], got 0.5"),
    (dict(dry_allowed_length=0), "dry_allowed_length must be in [1, 1000], got 0"),
    (dict(dry_sequence_breakers="oops"), "dry_sequence_breakers must be comma-separated quoted strings"),
    (dict(dynatemp_min=0.0), "dynatemp_min must be in (0, 100], got 0"),
    (dict(dynatemp_min=2.0, dynatemp_max=1.5), "dynatemp_min must be at most dynatemp_max (1.5), got 2"),
    (dict(mirostat_tau=-1.0), "mirostat_tau must be in [0, 100], got -1"),
    (dict(mirostat_eta=0.0), "mirostat_eta must be in (0, 1], got 0"),
    (dict(no_repeat_ngram_size=-2), "no_repeat_ngram_size must be in [0, 100], got -2"),
    (dict(presence_penalty=2.5), "presence_penalty must be in [-2, 2], got 2.5"),
    (dict(frequency_penalty=-2.05), "frequency_penalty must be in [-2, 2], got -2.05"),
    (dict(penalty_last_n=-2), "penalty_last_n must be in [-1, 1000000], got -2"),
    (dict(word_bias="paris=lots"), "word_bias entries must be word or word=bias with bias in [-100, 100] or -inf"),
    (dict(order="top_k,nope"), "order must be transformers or llama.cpp, or stage names"),
    (dict(order="top_k,top_k"), "order must be transformers or llama.cpp, or stage names"),
])
def test_bad_values_name_value_and_range(kwargs, message):
    with pytest.raises(InvalidRequest) as err:
        SamplerParams(**kwargs)
    assert message in str(err.value)


def test_a_word_the_vocabulary_cannot_write_is_refused(toy):
    with pytest.raises(InvalidRequest, match="word_bias: 'zebra' cannot be written with toy's vocabulary"):
        build_sampler_chain(SamplerParams(word_bias="zebra"), lm=toy)


def test_stages_that_need_the_generator_or_the_model_say_so():
    with pytest.raises(InvalidRequest, match="xtc needs the request's generator"):
        build_sampler_chain(SamplerParams(xtc_probability=0.5))
    with pytest.raises(InvalidRequest, match="dry needs the request's model"):
        build_sampler_chain(SamplerParams(dry_multiplier=0.5))


# --- presence and frequency penalties: llama.cpp's vectors, vLLM's formula ---------------------------

def told(stage: PresenceFrequency, tokens: list[int], forced: bool = False) -> PresenceFrequency:
    """``stage`` after the run chose ``tokens``, one step each (batch 1)."""
    for tok in tokens:
        stage.accept(Outcome(torch.zeros(1, 1), torch.zeros(1, 1), {}, torch.tensor([tok]), forced))
    return stage


# llama.cpp tests/test-sampling.cpp, test_penalties with repeat 1, frequency 5, presence 5 and the window
# the length of the tokens told: five tokens at p 0.2, and the probabilities after the penalties.
LLAMA_CPP_PENALTIES = [
    ([0], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997]),
    ([0, 1, 2], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966]),
    ([0, 1, 2, 0, 0], [0.000000, 0.000023, 0.000023, 0.499977, 0.499977]),
]


@pytest.mark.parametrize("last_tokens, expected", LLAMA_CPP_PENALTIES)
def test_presence_and_frequency_match_llama_cpps_test_vectors(last_tokens, expected):
    """llama.cpp runs these at 5, outside the OpenAI range the stage takes ([-2, 2]): the formula the stage
    applies runs them, on the counts the stage keeps over a window of len(last_tokens)."""
    logits = torch.full((1, 5), 0.2).log()
    stage = told(PresenceFrequency(1.0, 1.0, last_n=len(last_tokens)), last_tokens)
    count = stage.counts(1, 5, logits.device)
    assert count[0].tolist() == [last_tokens.count(t) for t in range(5)]
    out, _ = presence_frequency_penalised(logits, count, 5.0, 5.0)
    assert out.softmax(-1)[0].tolist() == pytest.approx(expected, abs=1e-5)  # llama.cpp's own tolerance


def test_presence_and_frequency_at_the_top_of_their_range_on_llama_cpps_distribution():
    """The third vector's tokens at presence = frequency = 2, by hand: token 0 seen 3 times loses 2 + 6,
    tokens 1 and 2 lose 2 + 2, tokens 3 and 4 nothing."""
    stage = told(PresenceFrequency(2.0, 2.0), [0, 1, 2, 0, 0])
    probs = stage.apply(torch.full((1, 5), 0.2).log(), NO_CONTEXT).softmax(-1)[0]
    weights = torch.tensor([math.exp(-8), math.exp(-4), math.exp(-4), 1.0, 1.0])
    assert probs.tolist() == pytest.approx((weights / weights.sum()).tolist(), rel=1e-5)


def vllm_penalties(logits, output_ids, presence, frequency):
    """vLLM's presence and frequency penalties (apply_penalties, vllm/model_executor/layers/utils.py),
    restated: bin counts of the output tokens only, then logits -= frequency x counts, then logits -=
    presence x (counts > 0)."""
    counts = torch.zeros_like(logits, dtype=torch.long).scatter_add(1, output_ids, torch.ones_like(output_ids))
    out = logits - frequency * counts
    return out - presence * (counts > 0)


@pytest.mark.parametrize("seed", range(5))
def test_presence_and_frequency_match_vllms_formula_on_random_runs(seed):
    g = torch.Generator().manual_seed(seed)
    batch, vocab, n = 3, 40, int(torch.randint(1, 30, (1,), generator=g))
    logits = torch.randn(batch, vocab, generator=g) * 3
    output = torch.randint(0, vocab, (batch, n), generator=g)
    prompt = torch.randint(0, vocab, (batch, 7), generator=g)  # read by the repetition penalty, never here
    presence, frequency = (float(x) for x in torch.rand(2, generator=g) * 4 - 2)
    stage = PresenceFrequency(presence, frequency)
    for i in range(n):
        stage.accept(Outcome(logits, logits, {}, output[:, i], forced=False))
    before = logits.clone()
    out, decision = stage.decide(logits, torch.cat([prompt, output], dim=1))
    assert torch.equal(logits, before)
    assert torch.allclose(out, vllm_penalties(logits, output, presence, frequency), atol=1e-5)
    assert decision["counted"].tolist() == [n] * batch
    assert torch.equal(decision["ids"], decision["count"] > 0)


def test_the_window_counts_only_the_last_n_tokens_of_the_run():
    tokens = [1, 1, 2, 3, 3, 3]
    logits = torch.zeros(1, 5)
    penalties = {}
    for last_n in (-1, 0, 2, 4, 6, 100):
        out, d = told(PresenceFrequency(0.5, 1.0, last_n=last_n), tokens).decide(logits, NO_CONTEXT)
        window = tokens if last_n < 0 else tokens[len(tokens) - last_n:] if last_n else []
        expected = [0.5 * (window.count(t) > 0) + window.count(t) for t in range(5)]
        assert (-out[0]).tolist() == expected and d["counted"].tolist() == [len(window)]
        penalties[last_n] = expected
    assert penalties[0] == [0.0] * 5 and penalties[2] == [0, 0, 0, 2.5, 0] and penalties[-1] == penalties[6]


def test_presence_and_frequency_count_forced_tokens_and_leave_cut_tokens_cut():
    logits = torch.tensor([[0.0, float("-inf"), 1.0]])
    stage = told(PresenceFrequency(-2.0, 0.0), [1, 2], forced=True)  # negative: a boost
    out, d = stage.decide(logits, NO_CONTEXT)
    assert out[0].tolist() == [0.0, float("-inf"), 3.0] and d["ids"][0].tolist() == [False, False, True]


@pytest.mark.parametrize("kwargs, message", [
    (dict(presence=2.5), "presence_penalty must be in [-2, 2], got 2.5"),
    (dict(presence=0.0, frequency=-3.0), "frequency_penalty must be in [-2, 2], got -3"),
    (dict(presence=0.5, last_n=-5), "penalty_last_n must be in [-1, 1000000], got -5"),
])
def test_a_presence_frequency_stage_built_out_of_range_raises(kwargs, message):
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        PresenceFrequency(**kwargs)


def test_a_run_records_each_steps_counts_of_the_tokens_generated_before_it(store):
    from playground.engine import Request, run
    trace = run(store, Request("toy", "sampling", "1 2 1 2", {"presence_penalty": 1.0, "frequency_penalty": 0.5},
                               seed=3, max_new_tokens=8)).to_dict()
    seen: list[int] = []
    for step in trace["steps"]:
        [rec] = [st for st in step["stages"] if st["name"] == "presence_frequency"]
        d, ids = rec["decision"], [c["id"] for c in step["candidates"]]
        assert d["count"] == [seen.count(i) for i in ids]  # the prompt's 1s and 2s are not counted
        assert d["penalty"] == pytest.approx([1.0 * (seen.count(i) > 0) + 0.5 * seen.count(i) for i in ids])
        seen.append(step["chosen"])
