"""Answer rules: extractors, each rule on hand-computed samples (ties included), DeepConf's and CoT-decoding's
confidences recomputed in float64 from the recorded log-probabilities, the records equal to what the
decoder saw, CoT-decoding's branches equal to forced greedy runs, and the resampled accuracy."""
import json
import math

import numpy as np
import pytest
import torch

from playground.cli import main
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.whatif.accuracy import accuracy_curve, wilson
from playground.whatif.answers import RuleSettings, answers
from playground.whatif.confidence import answer_margin, group_confidences, lowest_group_confidence, token_confidence
from playground.whatif.cot_decoding import branches
from playground.whatif.extractors import Answer, make_extractor
from playground.whatif.questions import load_questions, toy_task
from playground.whatif.rules import cot_decoding, deepconf, disagreements, highest_mean_logprob, majority, verifier
from playground.whatif.sample_records import draw_records, records_of_trace
from playground.whatif.step_record import Drawn, StepRecord
from playground.whatif.verifiers import make_verifier, same_answer


def step(top, raw_logprob=None, token=0):
    """A step whose top log-probabilities are ``top``; the chosen token's raw log-probability by default top[0]."""
    lp = top[0] if raw_logprob is None else raw_logprob
    return StepRecord(token, lp, lp, 0.0, 0.0, list(top))


def drawn(text, steps, seed=0):
    """A sample whose tokens are its characters (one step per character)."""
    return Drawn(seed, list(range(len(steps))), text, list(range(1, len(steps) + 1)), steps)


A, B, NONE = Answer("a", (0, 1)), Answer("b", (0, 1)), Answer(None)


# --- extractors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, text, value", [
    ("last_number", "7 + 5 = 12.", "12"), ("last_number", "about 1,024.50 of them", "1024.5"),
    ("last_number", "no digits", None), ("first_number", "12\nQuestion: 3 + 4", "12"),
    ("result_number", "7 + 5 is 12.", "12"), ("result_number", "75 + 3 = 78", "78"),
    ("result_number", "10 is 7 + 5", "10"), ("result_number", "the sum 7 + 5 =", None),
    ("regex:answer is (\\w+)", "the answer is Paris.", "Paris"), ("regex:\\d+", "x 42 y", "42"),
    ("json:answer.city", 'so {"answer": {"city": "Rome"}} ok', "Rome"), ("json:n", '{"n": 3}', "3"),
    ("json:n", "{broken", None), ("choices:Paris|Lyon", "Lyon, not Paris", "Lyon"),
    ("choices:New York|York", "in New York", "New York"), ('choices:["a b", "c"]', "C then a b", "c"),
    ("choices:cat|dog", "concatenate", None)])
def test_extractors(spec, text, value):
    answer = make_extractor(spec)(text)
    assert answer.value == value
    if value is not None and not spec.startswith(("last", "first", "result", "json:n")):
        assert value.casefold() in text[answer.span[0]:answer.span[1]].casefold()


@pytest.mark.parametrize("spec, message", [("median", "extractor must be one of"), ("regex:(", "does not compile"),
                                           ("json:a..b", "names separated by dots"), ("choices:", "choices must be")])
def test_bad_extractors_are_refused(spec, message):
    with pytest.raises(InvalidRequest, match=message):
        make_extractor(spec)


def test_same_answer_and_verifiers():
    assert same_answer(" Paris ", "paris") and same_answer("2.50", "2.5") and not same_answer(None, "1")
    s = drawn("xy", [step([-0.1]), step([-0.1])])
    assert make_verifier("exact:A")(s, A) and not make_verifier("exact:b")(s, A)
    assert make_verifier("regex:^x")(s, NONE) and not make_verifier("regex:z")(s, A)
    for bad in ("exact:", "regex:(", "json:{}", "sql:x"):
        with pytest.raises(InvalidRequest):
            make_verifier(bad)


# --- the rules on hand-computed cases ----------------------------------------------------------------------


def test_majority_counts_and_breaks_a_tie_by_seed_order():
    assert majority([B, A, A, B, NONE]).answer == "b"  # 2 : 2, b came first
    pick = majority([A, B, B, NONE])
    assert (pick.answer, pick.votes) == ("b", {"a": 1, "b": 2})
    assert majority([NONE, NONE]).answer is None


def test_highest_mean_logprob_ties_go_to_the_first_sample():
    samples = [drawn("x", [step([-1.0]), step([-1.0])]), drawn("y", [step([-0.5]), step([-1.5])]),
               drawn("z", [step([-0.2])])]
    pick = highest_mean_logprob(samples[:2], [A, B])
    assert pick.scores == [-1.0, -1.0] and (pick.answer, pick.sample) == ("a", 0)
    pick = highest_mean_logprob(samples, [A, B, NONE])  # the best sample has no answer: it cannot win
    assert (pick.answer, pick.sample) == ("a", 0)


def test_deepconf_by_hand():
    # token confidence C = -mean(top-k log-probabilities); with k = 2 and window 2:
    steps = {"s0": [step([-0.1, -3.0]), step([-0.2, -2.0]), step([-0.1, -4.0])],  # C = 1.55, 1.1, 2.05
             "s1": [step([-1.0, -1.0]), step([-0.1, -5.0]), step([-0.1, -5.0])],  # C = 1.0, 2.55, 2.55
             "s2": [step([-0.5, -2.5]), step([-0.5, -2.5])],                      # C = 1.5, 1.5
             "s3": [step([-0.05, -3.0])]}                                        # C = 1.525 (one group)
    lowest = {"s0": min((1.55 + 1.1) / 2, (1.1 + 2.05) / 2), "s1": min(1.775, 2.55), "s2": 1.5, "s3": 1.525}
    samples = [drawn("x", v, i) for i, v in enumerate(steps.values())]
    pick = deepconf(samples, [A, B, B, A], window=2, eta=50, k=2)
    assert pick.scores == pytest.approx(list(lowest.values()), abs=1e-12)
    # the top 50% (2 of 4): s1 (1.775) and s3 (1.525); votes b = 1.775, a = 1.525
    assert pick.kept == [False, True, False, True] and pick.votes == pytest.approx({"b": 1.775, "a": 1.525})
    assert pick.answer == "b"
    everyone = deepconf(samples, [A, B, B, A], window=2, eta=100, k=2)
    assert everyone.votes == pytest.approx({"a": 1.325 + 1.525, "b": 1.775 + 1.5}) and everyone.answer == "b"


def test_deepconf_tie_goes_to_the_first_answer():
    twins = [drawn("x", [step([-0.5, -1.5])], 0), drawn("y", [step([-0.5, -1.5])], 1)]
    assert deepconf(twins, [B, A], window=4, eta=100, k=2).answer == "b"
    assert deepconf(twins, [B, A], window=4, eta=50, k=2).kept == [True, False]  # equal confidence: seed order


def test_cot_decoding_margin_over_the_answer_tokens_only():
    # text "ab1": the answer "1" is the third token; its margin exp(-0.1) - exp(-2.5)
    b0 = Drawn(0, [5, 6, 7], "ab1", [1, 2, 3], [step([-0.7, -0.8]), step([-0.7, -0.8]), step([-0.1, -2.5])])
    b1 = Drawn(1, [8, 9], "c2", [1, 2], [step([-0.01, -6.0]), step([-0.6, -0.9])])
    pick = cot_decoding([b0, b1], [Answer("1", (2, 3)), Answer("2", (1, 2))])
    assert pick.scores == pytest.approx([math.exp(-0.1) - math.exp(-2.5), math.exp(-0.6) - math.exp(-0.9)])
    assert (pick.answer, pick.sample) == ("1", 0)
    tie = cot_decoding([b1, b1], [Answer("2", (1, 2)), Answer("3", (1, 2))])
    assert (tie.answer, tie.sample) == ("2", 0)
    b2 = Drawn(2, [8, 9], "c2", [1, 2], [step([-0.01, -6.0]), step([math.log(0.6), math.log(0.1)])])  # margin 0.5
    two = [Answer("1", (2, 3)), Answer("2", (1, 2)), Answer("2", (1, 2))]
    assert cot_decoding([b0, b2, b2], two).answer == "1"  # the largest single margin, 0.82
    summed = cot_decoding([b0, b2, b2], two, aggregate=True)  # the paper's aggregated form: 0.5 + 0.5 > 0.82
    assert (summed.answer, summed.sample) == ("2", 1) and summed.votes["2"] == pytest.approx(1.0)


def test_verifier_picks_the_first_sample_that_passes_and_disagreements():
    samples = [drawn("no", [step([-0.1])], 0), drawn("yes b", [step([-0.1])], 1), drawn("yes a", [step([-0.1])], 2)]
    pick = verifier(samples, [A, B, A], make_verifier("regex:yes"))
    assert (pick.answer, pick.sample, pick.votes) == ("b", 1, {"b": 1, "a": 1})
    assert verifier(samples, [A, B, A], make_verifier("regex:maybe")).answer is None
    d = disagreements([majority([A, A, B]), pick])
    assert not d["agree"] and d["answers"] == {"a": ["majority"], "b": ["verifier"]}


@pytest.mark.parametrize("kwargs, message", [({"window": 0}, "window must be an integer in"),
                                             ({"eta": 0}, "eta must be a percentage in"),
                                             ({"k": 21}, "deepconf_k must be an integer in")])
def test_bad_rule_settings_are_refused(kwargs, message):
    with pytest.raises(InvalidRequest, match=message):
        deepconf([drawn("x", [step([-0.1])])], [A], **kwargs)


def test_wilson_and_accuracy_curve():
    low, high = wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.27753, abs=1e-4)
    assert wilson(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-4)
    answers_ = ["a", "a", "b", "a"]  # a pick that is the first sample of the subset
    curve = accuracy_curve(lambda idx: answers_[idx[0]], 4, lambda a: a == "a", resamples=400, seed=1)
    assert [p["n"] for p in curve] == [1, 2, 3, 4] and curve[-1]["subsets"] == 1 and curve[-1]["accuracy"] == 1.0
    assert curve[0]["accuracy"] == pytest.approx(0.75, abs=0.06) and curve[0]["low"] < 0.75 < curve[0]["high"]
    with pytest.raises(InvalidRequest, match="resamples must be"):
        accuracy_curve(lambda idx: "a", 4, bool, resamples=0)


# --- on the toy: records, recomputation, branches ----------------------------------------------------------


@pytest.fixture(scope="module")
def toy_draw(store):
    return draw_records(store, Request(model="toy", strategy="sampling", prompt="1 2", max_new_tokens=8,
                                       params={"temperature": 1.5}), 40)


def test_records_are_what_the_decoder_saw(toy, toy_draw):
    assert toy_draw.batched and len(toy_draw.samples) == 40
    for s in toy_draw.samples[:5]:
        ids = torch.tensor([[1, 2] + s.ids])
        with torch.no_grad():
            raw = toy.model(ids).logits[0, 1:1 + len(s.ids)].double().log_softmax(-1)
        for i, rec in enumerate(s.steps):
            assert rec.id == s.ids[i] and rec.raw_logprob == pytest.approx(float(raw[i, rec.id]), abs=1e-5)
            assert rec.logprob == pytest.approx(float((raw[i] / 1.5).log_softmax(-1)[rec.id]), abs=1e-5)
            assert rec.top_raw_logprobs == pytest.approx(raw[i].sort(descending=True).values[:16].tolist(), abs=1e-5)
            assert rec.raw_entropy == pytest.approx(float(-(raw[i].exp() * raw[i]).sum()), abs=1e-5)
        assert s.text == toy.decode(s.ids)


def test_batched_records_equal_the_single_runs_traces(store, toy_draw):
    for s in toy_draw.samples[:3]:
        trace = run(store, Request(model="toy", strategy="sampling", prompt="1 2", max_new_tokens=8, seed=s.seed,
                                   params={"temperature": 1.5}, top_n=20))
        assert trace.token_ids == s.ids
        for a, b in zip(records_of_trace(trace), s.steps):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-5) and a.entropy == pytest.approx(b.entropy, abs=1e-5)
            assert a.top_raw_logprobs == pytest.approx(b.top_raw_logprobs, abs=1e-5)


def test_deepconf_is_the_papers_definition_in_float64_on_recorded_samples(toy_draw):
    window, k = 3, 5
    got = [Answer(s.text.split()[0] if s.text else None) for s in toy_draw.samples]
    pick = deepconf(toy_draw.samples, got, window=window, eta=90, k=k)
    for s, score in zip(toy_draw.samples, pick.scores):
        top = np.array([st.top_raw_logprobs[:k] for st in s.steps], dtype=np.float64)
        c = -top.mean(axis=1)  # C_i = -(1/k) sum_j log P_i(j)
        w = min(window, len(c))
        groups = np.convolve(c, np.ones(w) / w, mode="valid")  # C_G over each window of w tokens
        assert score == pytest.approx(float(groups.min()), rel=1e-12) == lowest_group_confidence(s.steps, window, k)
        assert group_confidences(s.steps, window, k) == pytest.approx(groups.tolist(), rel=1e-12)
        assert token_confidence(s.steps[0], k) == pytest.approx(c[0], rel=1e-12)
    kept = [i for i, keep in enumerate(pick.kept) if keep]
    assert len(kept) == 36 and min(pick.scores[i] for i in kept) >= max(
        pick.scores[i] for i in range(40) if i not in kept)
    by_hand: dict = {}
    for i in kept:
        by_hand[got[i].value] = by_hand.get(got[i].value, 0.0) + pick.scores[i]
    assert pick.votes == pytest.approx(by_hand) and pick.answer == max(by_hand, key=by_hand.get)


def test_cot_branches_are_forced_greedy_runs_and_margins_come_from_their_records(store, toy):
    task = toy_task()
    got = branches(toy, [1, 2], 4, 8)
    with torch.no_grad():
        first = toy.model(torch.tensor([[1, 2]])).logits[0, -1].log_softmax(-1)
    assert [b.ids[0] for b in got] == first.topk(4).indices.tolist()
    for b in got:
        trace = run(store, Request(model="toy", strategy="greedy", prompt="1 2", max_new_tokens=8, forced={0: b.ids[0]}))
        assert trace.token_ids == b.ids
    extract = make_extractor(task["extract"])
    answers_ = [extract(b.text) for b in got]
    pick = cot_decoding(got, answers_)
    for b, a, score in zip(got, answers_, pick.scores):
        if a.span is None:
            assert score is None
            continue
        at = b.tokens_of_span(*a.span)
        p = np.exp(np.array([b.steps[i].top_raw_logprobs[:2] for i in at], dtype=np.float64))
        assert score == pytest.approx(float((p[:, 0] - p[:, 1]).mean()), rel=1e-12)
        assert answer_margin(b.steps, at) == score
    assert pick.answer == "a"  # branch 0 is greedy's 'a time ...', the larger margin at a tie goes to it


def test_answers_on_the_toy_task_is_json_and_agrees_with_the_rules(store):
    task = toy_task()
    req = Request(model="toy", strategy="sampling", prompt=task["prompt"], max_new_tokens=task["tokens"])
    out = answers(store, req, 24, task["extract"], verify="exact:a", expected=task["expected"], branches=3,
                  settings=RuleSettings(window=4, eta=50), resamples=50)
    json.dumps(out)
    rules = [p["rule"] for p in out["picks"]]
    assert rules == ["majority", "mean_logprob", "deepconf", "verifier", "cot_decoding"]
    shares = sum(s["answer"] == "a" for s in out["samples"]) / 24
    assert out["accuracy"]["majority"][0]["accuracy"] == pytest.approx(shares, abs=0.15)
    assert out["accuracy"]["verifier"][-1]["accuracy"] == 1.0 and len(out["accuracy"]["cot_decoding"]) == 3
    assert sum(task["distribution"].values()) == pytest.approx(1.0)


def test_the_question_set_reads():
    questions = load_questions()
    assert len(questions) == 40 and len({q.id for q in questions}) == 40
    assert {q.kind for q in questions} == {"arithmetic", "capital", "odd-one-out", "string"}


def test_cli_answers_prints_each_rule(capsys):
    assert main(["answers", "--model", "toy", "--prompt", "1 2", "--n", "6", "--tokens", "8", "--extract",
                 "choices:a|the", "--branches", "2", "--expected", "a"]) == 0
    out = capsys.readouterr().out
    assert "majority" in out and "deepconf" in out and "cot_decoding" in out and "accuracy N=1" in out
    assert main(["answers", "--model", "toy", "--prompt", "1 2", "--n", "2", "--window", "0"]) == 2
    assert "window must be an integer in [1, 4096], got 0" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, message", [
    ({"expected": [""]}, "expected must be a list of non-empty answers"),
    ({"branches": -1}, r"branches must be an integer in \[0, 16\] \(0: no branches\), got -1"),
    ({"resamples": 0}, r"resamples must be an integer in \[1, 10000\], got 0"),
    ({"extract": "median"}, "an extractor must be one of"), ({"verify": "exact:"}, "a verifier must be")])
def test_bad_answer_requests_are_refused(store, kwargs, message):
    args = {"extract": "choices:a|the"} | kwargs
    with pytest.raises(InvalidRequest, match=message):
        answers(store, Request(model="toy", strategy="sampling", prompt="1 2", max_new_tokens=4), 2, **args)
    with pytest.raises(InvalidRequest, match=r"eta must be a percentage in \(0, 100\], got 101"):
        RuleSettings(eta=101)
