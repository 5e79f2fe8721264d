"""The break-even lanes draw a speculative run's recorded costs: each round's draft and verify time
as recorded, the plain lane at the baseline's plain step, a sentence whose numbers are the trace's,
and a verdict on the measured speedup's side of 1; without a baseline they say so."""
from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from playground.charts import break_even as be
from playground.charts.common import caption_of
from playground.charts.views import strategy_views
from playground.engine import Request, run

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting")]

REAL = {"chain": {"draft": "toy-small", "gamma": 3}, "eagle": {"draft": "eagle", "eagle_depth": 3},
        "lookup": {"draft": "prompt_lookup"}}


@pytest.fixture(scope="module")
def traces(store) -> dict[str, dict]:
    return {name: run(store, Request("toy", "speculative", "1 2 3 4 5 1 2 3", {**params, "measure_baseline": True},
                                     seed=1, max_new_tokens=14)).to_dict()
            for name, params in REAL.items()}


def lane(fig, name):
    return next(t for t in fig.data if t.name == name)


def made(draft_ms, verify_ms, step_ms, kept, speedup, verified=4):
    """A hand-made trace: every round drafts ``draft_ms`` and verifies ``verify_ms``; the plain step
    is ``step_ms``; round i keeps kept[i] tokens."""
    n = len(kept)
    seconds = n * (draft_ms + verify_ms) / 1000 + 0.001
    return {
        "strategy": "speculative", "finish_reason": "length", "params": {"measure_baseline": True},
        "rounds": [{"round": i, "committed": k, "target_tokens": verified} for i, k in enumerate(kept)],
        "speculative": {"draft": "toy-small", "draft_kind": "model", "tau": sum(kept) / n},
        "timing": {"rounds": [{"draft": draft_ms / 1000, "verify": verify_ms / 1000}] * n,
                   "speculative": {"seconds": seconds, "measured_speedup": speedup,
                                   "baseline": {"tokens": sum(kept), "seconds": (speedup or 1) * seconds,
                                                "prefill_seconds": 0.001, "step_seconds": step_ms / 1000}}},
    }


# --- real runs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(REAL))
def test_the_lanes_are_the_recorded_times(traces, name):
    trace = traces[name]
    rounds = trace["timing"]["rounds"]
    base = trace["timing"]["speculative"]["baseline"]
    fig = be.figure(trace)
    draft, verify, plain = lane(fig, "draft"), lane(fig, "verify"), lane(fig, "plain decoding")
    assert list(draft.x) == pytest.approx([1000 * r["draft"] for r in rounds])
    assert list(verify.x) == pytest.approx([1000 * r["verify"] for r in rounds])
    assert sum(draft.x) == pytest.approx(1000 * sum(r["draft"] for r in rounds))
    assert sum(verify.x) == pytest.approx(1000 * sum(r["verify"] for r in rounds))
    # rounds end to end: each verify starts where its drafting ended, the next round where it ended
    ends = [b + w for b, w in zip(verify.base, verify.x)]
    assert list(verify.base) == pytest.approx([b + w for b, w in zip(draft.base, draft.x)])
    assert list(draft.base) == pytest.approx([0.0] + ends[:-1])
    # the plain lane: the same tokens at the baseline's plain step
    assert list(plain.x) == pytest.approx([1000 * r["committed"] * base["step_seconds"] for r in trace["rounds"]])
    assert sum(plain.x) == pytest.approx(1000 * base["tokens"] * base["step_seconds"])
    assert base["tokens"] == len(trace["tokens"])


@pytest.mark.parametrize("name", list(REAL))
def test_the_sentence_is_the_trace_s(traces, name):
    trace = traces[name]
    rounds, step = trace["timing"]["rounds"], trace["timing"]["speculative"]["baseline"]["step_seconds"]
    draft = sum(r["draft"] for r in rounds) / len(rounds) / step
    verify = sum(r["verify"] for r in rounds) / len(rounds) / step
    tau = trace["speculative"]["tau"]
    text = be.sentence(trace)
    assert f"cost {be.sig(draft + verify)} plain steps a round (draft {be.sig(draft)}, verify {be.sig(verify)})" in text
    assert f"; {be.sig(tau)} kept per round; the break-even is {be.sig(draft + verify)};" in text
    sizes = [r.get("target_tokens", r.get("drafted", 0) + 1) for r in trace["rounds"]]
    assert f"drafting and verifying {be.sig(sum(sizes) / len(sizes))} tokens" in text
    assert caption_of(be.figure(trace)) == text


@pytest.mark.parametrize("name", list(REAL))
def test_the_verdict_is_the_measured_speedup_s(traces, name):
    trace = traces[name]
    speedup = trace["timing"]["speculative"]["measured_speedup"]
    text, title = be.sentence(trace), be.figure(trace).layout.title.text
    paid = speedup >= 1
    assert (f"this run paid ({be.speedup_text(speedup)}x)" in text) == paid
    assert (f"this run did not pay ({be.speedup_text(speedup)}x): " in text) == (not paid)
    assert title.endswith(f"{'paid' if paid else 'did not pay'}: {be.speedup_text(speedup)}x")


@pytest.mark.parametrize("name", list(REAL))
def test_one_break_even_view_for_every_draft_kind(traces, name):
    views = [v for v in strategy_views(traces[name]) if v.title == be.TITLE]
    assert len(views) == 1 and views[0].figure is not None


def test_without_a_baseline_it_says_not_measured(store):
    req = Request("toy", "speculative", "1 2 3", {"draft": "toy-small", "measure_baseline": False},
                  seed=0, max_new_tokens=8)
    trace = run(store, req).to_dict()
    assert trace["timing"]["speculative"]["baseline"] is None
    views = [v for v in strategy_views(trace) if v.title == be.TITLE]
    assert len(views) == 1 and views[0].figure is None
    drafted = sum(r["draft"] for r in trace["timing"]["rounds"])
    assert "not measured (measure_baseline is off)" in views[0].html
    assert f"Drafting took {be.sig(1000 * drafted)} ms" in views[0].html
    assert "paid (" not in views[0].html and "break-even is" not in views[0].html
    with pytest.raises(ValueError):
        be.figure(trace)
    no_timing = run(store, req).to_dict(timing=False)
    assert "no timing" in be.views(no_timing)[0].html


def test_a_stream_frame_says_the_baseline_comes_after_the_last_round(traces):
    trace = copy.deepcopy(traces["eagle"])
    trace["finish_reason"] = "running"
    trace["timing"]["speculative"]["baseline"] = None
    assert "timed after the last round" in be.views(trace)[0].html


def test_a_one_token_baseline_has_no_plain_step(traces):
    trace = copy.deepcopy(traces["chain"])
    trace["timing"]["speculative"]["baseline"]["step_seconds"] = None
    html = be.views(trace)[0].html
    assert "too few to time one plain step" in html and "break-even is" not in html


def test_missing_round_timings_are_said(traces):
    trace = copy.deepcopy(traces["chain"])
    trace["timing"]["rounds"] = trace["timing"]["rounds"][:-1]
    assert "no draft and verify time for each round" in be.views(trace)[0].html


def test_no_view_for_other_traces(store):
    trace = run(store, Request("toy", "greedy", "1 2", {}, seed=0, max_new_tokens=3)).to_dict()
    assert be.views(trace) == [] and be.TITLE not in [v.title for v in strategy_views(trace)]


# --- hand-made traces with known numbers ------------------------------------------------------------

def test_known_numbers_pay():
    # draft 1 ms + verify 4 ms = 5 ms = 2.5 plain steps of 2 ms; 3 tokens a round > 2.5
    trace = made(draft_ms=1, verify_ms=4, step_ms=2, kept=[3, 3], speedup=1.2)
    text = be.sentence(trace)
    assert text == ("drafting and verifying 4.0 tokens cost 2.5 plain steps a round (draft 0.5, verify 2.0); "
                    "3.0 kept per round; the break-even is 2.5; this run paid (1.2x)")
    fig = be.figure(trace)
    assert list(lane(fig, "draft").x) == pytest.approx([1, 1]) and list(lane(fig, "draft").base) == pytest.approx([0, 5])
    assert list(lane(fig, "verify").x) == pytest.approx([4, 4])
    assert list(lane(fig, "verify").base) == pytest.approx([1, 6])
    assert list(lane(fig, "plain decoding").x) == pytest.approx([6, 6])
    assert list(lane(fig, "plain decoding").base) == pytest.approx([0, 6])
    assert fig.layout.shapes[0].x0 == pytest.approx(10)  # the rounds end at 10 ms
    assert fig.layout.title.text == "a round cost 2.5 plain steps, kept 3.0 tokens · paid: 1.2x"


def test_an_auto_tree_says_what_it_chose_and_what_measuring_cost():
    trace = made(draft_ms=1, verify_ms=4, step_ms=2, kept=[3, 3], speedup=1.2)
    trace["speculative"]["auto_tree"] = {"depth": 2, "branching": 3, "expected_tau": 2.61}
    figures = {"tree_from": "measured pass costs", "expected_speedup": 1.274, "costs_seconds": 5.43}
    trace["timing"]["speculative"]["auto_tree"] = figures
    assert be.sentence(trace).endswith(
        "this run paid (1.2x); the auto tree chose depth 2, branching 3 (expected tau 2.6, 1.27x) after measuring "
        "this machine's pass costs in 5.4 s, once per model and weights, not counted in the run")
    figures["costs_seconds"] = 0.0  # measured by an earlier run
    assert be.sentence(trace).endswith("(expected tau 2.6, 1.27x)")
    # a replay of that tree: nothing measured
    trace["timing"]["speculative"]["auto_tree"] = {"tree_from": "the request", "costs_measured_now": False,
                                                   "costs_seconds": 0.0}
    assert be.sentence(trace).endswith(
        "the auto tree took depth 2, branching 3 (expected tau 2.6) from the request, without measuring")


def test_a_slow_draft_is_named():
    # drafting 2 steps + verify 1 step = 3 > tau 2.5; with a free draft 1 < 2.5 would pay
    text = be.sentence(made(draft_ms=4, verify_ms=2, step_ms=2, kept=[2, 3], speedup=0.8))
    assert "the break-even is 3.0; this run did not pay (0.8x): the draft is too slow" in text
    assert "drafting took 2.0 plain steps a round" in text


def test_a_slow_verify_is_named():
    # draft 0.1 step + verify 4 steps > tau 3; a one-step verify (1.1) would pay
    text = be.sentence(made(draft_ms=0.2, verify_ms=8, step_ms=2, kept=[3, 3], speedup=0.7))
    assert "this run did not pay (0.7x): the verify is too slow: one verify pass cost 4.0 plain steps" in text


def test_too_few_accepted_is_named():
    # draft 1 + verify 1.5: neither 2.0 (one-step verify) nor 1.5 (free draft) is paid by tau 1.2
    text = be.sentence(made(draft_ms=2, verify_ms=3, step_ms=2, kept=[1, 1, 1, 1, 2], speedup=0.5))
    assert "this run did not pay (0.5x): too few accepted: 1.2 tokens a round" in text
    assert "(2.0)" in text and "(1.5)" in text


def test_rounds_that_pay_in_a_run_that_did_not_blame_the_time_outside():
    trace = made(draft_ms=1, verify_ms=1, step_ms=2, kept=[3, 3], speedup=0.9)
    trace["timing"]["speculative"]["seconds"] = 0.010  # 4 ms of rounds in 10 ms
    text = be.sentence(trace)
    assert "this run did not pay (0.9x): its rounds paid, but the time outside them" in text
    assert "6.0 ms of the run's 10 ms, against plain decoding's 1.0 ms prefill" in text


def test_a_run_that_paid_with_rounds_that_did_not_says_so():
    text = be.sentence(made(draft_ms=3, verify_ms=4, step_ms=2, kept=[3, 3], speedup=1.05))
    assert "this run paid (1.05x), though its rounds cost more than the tokens they kept" in text


def test_no_measured_speedup_no_verdict():
    text = be.sentence(made(draft_ms=1, verify_ms=4, step_ms=2, kept=[3], speedup=None))
    assert "no measured speedup" in text and "paid (" not in text


def test_numbers_are_rounded_for_reading():
    assert [be.sig(x) for x in (2.14, 0.0473, 12.6, 153.2, 0.996, 0.5, 0)] == [
        "2.1", "0.047", "13", "153", "1.0", "0.5", "0"]
    assert be.speedup_text(0.996) == "0.996" and be.speedup_text(1.3) == "1.3"


def test_break_even_imports_no_torch():
    code = "import sys, playground.charts.break_even; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0
