"""``eagle_tree='auto'``: the choice follows the measured costs (a flat verify cost takes a wide deep
tree, a verify cost that grows with its rows takes a short chain), the pass costs are measured once
per model and weights, and an auto run records its choice and stays greedy-exact."""
from __future__ import annotations

import html
import time

import pytest

from playground.engine import READING_REASON, Request, run, stream
from playground.errors import InvalidRequest
from playground.serving.budget import Budget
from playground.ui.handlers import generate
from strategies.speculative.eagle import auto_tree as auto
from strategies.speculative.eagle.auto_tree import SIZES, PassCosts, acceptance_rates, choose, expected_accepted
from strategies.speculative.eagle.head import ATTACHED_KEY, load_head

# Depth d reached 100 times each: the top draft is right half the time, the second the other half.
HALF_AND_HALF = {"reached": [100] * 5, "rank_hits": [[50, 50, 0]] * 5}


def costs(verify, head=lambda k: 0.0) -> PassCosts:
    return PassCosts(SIZES, tuple(verify(k) for k in SIZES), tuple(head(k) for k in SIZES))


def test_acceptance_rates_read_the_rank_counts():
    assert acceptance_rates(HALF_AND_HALF, 1) == [0.5] * 5
    assert acceptance_rates(HALF_AND_HALF, 2) == [1.0] * 5
    assert expected_accepted([0.5], 3) == pytest.approx(0.5 + 0.25 + 0.125)


def test_a_flat_verify_cost_takes_the_widest_tree_that_fits():
    """Verifying is free of its size (a GPU's picture): two children catch every token, so the deepest
    binary tree within 128 tree tokens wins (depth 6: 126 drafts), committing 7 tokens a pass."""
    got = choose(costs(lambda k: 1.0), HALF_AND_HALF)
    assert (got["depth"], got["branching"], got["nodes"]) == (6, 2, 126)
    assert got["expected_tau"] == pytest.approx(7.0) and got["expected_speedup"] == pytest.approx(7.0)


def test_a_verify_cost_that_grows_with_rows_takes_a_short_chain():
    """Each tree token costs a plain step: one draft (tau 1.5 for 2 steps) beats everything bigger."""
    got = choose(costs(lambda k: float(k)), HALF_AND_HALF)
    assert (got["depth"], got["branching"]) == (1, 1)
    assert got["expected_speedup"] == pytest.approx(0.75)


def test_a_slow_draft_shortens_the_tree():
    flat = choose(costs(lambda k: 1.0), HALF_AND_HALF)
    slow = choose(costs(lambda k: 1.0, head=lambda k: 1.0), HALF_AND_HALF)
    assert slow["depth"] < flat["depth"]


@pytest.fixture
def toy_auto(store):
    return run(store, Request("toy", "speculative", "1 2", {"draft": "eagle", "eagle_tree": "auto",
                                                            "temperature": 0.0, "measure_baseline": False},
                              max_new_tokens=20))


def test_an_auto_run_records_its_choice_and_is_greedy(store, toy_auto):
    plain = run(store, Request("toy", "sampling", "1 2", {"temperature": 0.0}, max_new_tokens=20))
    assert toy_auto.token_ids == plain.token_ids
    spec = toy_auto.extra["speculative"]
    choice = spec["auto_tree"]
    assert (spec["depth"], spec["branching"]) == (choice["depth"], choice["branching"])
    assert max(len(r["tree"]) - 1 for r in toy_auto.rounds) <= choice["nodes"]
    assert toy_auto.params["eagle_auto_tree"] == f"{choice['depth']}x{choice['branching']}"
    measured = toy_auto.timing.extra["speculative"]["auto_tree"]["costs"]  # measured: wall-clock, under timing
    assert measured["sizes"] == [k for k in SIZES if k + 16 <= 64]  # toy reads 64 tokens
    assert all(v > 0 for v in measured["verify_ms"] + measured["head_ms"])
    assert measured["verify_ms"] == sorted(measured["verify_ms"])
    assert choice["acceptance"] == load_head(store.get("toy"))[1]["held_out"]["acceptance"]


def test_the_costs_are_measured_once_per_model(store, toy_auto):
    again = run(store, Request("toy", "speculative", "3", {"draft": "eagle", "eagle_tree": "auto",
                                                           "temperature": 0.0, "measure_baseline": False},
                               max_new_tokens=8))
    first, second = (t.timing.extra["speculative"]["auto_tree"] for t in (toy_auto, again))
    assert second["costs_measured_now"] is False and second["costs"] == first["costs"]


def forget_measured_costs(lm, monkeypatch, tmp_path) -> None:
    """A machine that has not measured yet: an empty cache, and nothing kept with the model."""
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    for key in [k for k in lm.attached if isinstance(k, tuple) and k and k[0] == "measured"]:
        monkeypatch.delitem(lm.attached, key)


def test_measuring_the_costs_is_not_counted_in_the_run(store, monkeypatch, tmp_path):
    """The first auto run on fresh weights measures the pass costs; its seconds leave that out (the
    trace records them apart), so its wall-clock ratio is the decoding's."""
    import time
    lm = store.get("toy")
    forget_measured_costs(lm, monkeypatch, tmp_path)
    params = {"draft": "eagle", "eagle_tree": "auto", "temperature": 0.0, "measure_baseline": False}
    t0 = time.perf_counter()
    first = run(store, Request("toy", "speculative", "1 2", params, max_new_tokens=12))
    wall = time.perf_counter() - t0
    figures = first.timing.extra["speculative"]["auto_tree"]
    assert figures["costs_measured_now"] and figures["costs_seconds"] > 0
    assert first.timing.seconds <= wall - figures["costs_seconds"] + 1e-3
    again = run(store, Request("toy", "speculative", "1 2", params, max_new_tokens=12))
    assert again.timing.extra["speculative"]["auto_tree"]["costs_seconds"] == 0.0


def test_measuring_the_costs_is_not_counted_against_the_time_budget(store, monkeypatch, tmp_path):
    """A fresh server's first auto run measures the pass costs (a one-off, like loading): a budget
    shorter than the measurement still lets the run decode all its tokens (SmolLM2: several rounds, so
    the budget is checked between them; the toy's greedy run ends in its first)."""
    lm = store.get("smollm2-135m")
    forget_measured_costs(lm, monkeypatch, tmp_path)
    measure = auto.measure

    def slow(decoder, report=None):
        time.sleep(5.0)  # a slow machine's measurement
        return measure(decoder, report)

    monkeypatch.setattr(auto, "measure", slow)
    params = {"draft": "eagle", "eagle_tree": "auto", "temperature": 0.0, "measure_baseline": False}
    req = Request("smollm2-135m", "speculative", "Write a long story about the sea.", params, max_new_tokens=16)
    trace = run(store, req, budget=Budget(seconds=4.0))  # decoding: 1.2 s here, 1.6 s on the scalar kernels
    figures = trace.timing.extra["speculative"]["auto_tree"]
    assert figures["costs_measured_now"] and figures["costs_seconds"] >= 5.0 and len(trace.rounds) > 1
    assert trace.finish_reason == "length" and len(trace.tokens) == 16 and trace.timing.seconds < 4.0


MEASURING = "measuring this machine's pass costs for the auto tree (first use only)"
TOY_AUTO = {"draft": "eagle", "eagle_tree": "auto", "temperature": 0.0, "measure_baseline": False}


def test_measuring_the_costs_reports_its_progress_once(store, monkeypatch, tmp_path):
    """The measurement is a one-off of seconds, like loading: the run's progress callback hears it (a
    line per size measured, the share done rising from 0), and a run that reads the kept costs does not."""
    forget_measured_costs(store.get("toy"), monkeypatch, tmp_path)
    heard: list[tuple[float, str]] = []
    first = run(store, Request("toy", "speculative", "1 2", TOY_AUTO, max_new_tokens=8),
                progress=lambda fraction, message: heard.append((fraction, message)))
    measured = first.timing.extra["speculative"]["auto_tree"]
    assert measured["costs_measured_now"]
    fractions = [fraction for fraction, message in heard if message == MEASURING]
    assert len(fractions) == len(measured["costs"]["sizes"]) and fractions[0] == 0.0
    assert fractions == sorted(fractions) and fractions[-1] < 1.0
    heard.clear()
    again = run(store, Request("toy", "speculative", "1 2", TOY_AUTO, max_new_tokens=8),
                progress=lambda fraction, message: heard.append((fraction, message)))
    assert not again.timing.extra["speculative"]["auto_tree"]["costs_measured_now"]
    assert MEASURING not in [message for _, message in heard]


def test_the_status_line_says_the_costs_are_being_measured_while_they_are(store, monkeypatch, tmp_path):
    """The page's frames: "reading the prompt", then statuses that name the measurement (the first sent before
    it starts, nothing measured yet; then its progress), carrying no tokens; then the tokens."""
    forget_measured_costs(store.get("toy"), monkeypatch, tmp_path)
    heard: list[str] = []
    seen = []
    for frame in generate(store, Request("toy", "speculative", "1 2", TOY_AUTO, max_new_tokens=8),
                          progress=lambda fraction, message: heard.append(message)):
        seen.append((html.unescape(frame.status), len(frame.trace["tokens"]), MEASURING in heard))
    at = [i for i, (status, _, _) in enumerate(seen) if MEASURING in status]  # the announcement, then its progress
    assert at and at == list(range(at[0], at[-1] + 1)) and at[0] > 0 and "reading the prompt" in seen[at[0] - 1][0]
    _, tokens, measured_before = seen[at[0]]
    assert tokens == 0 and not measured_before and all(seen[i][1] == 0 for i in at)
    assert seen[-1][1] > 0 and all(MEASURING not in status for status, _, _ in seen[at[-1] + 1:])


def test_the_measurement_is_announced_only_to_a_stream_that_asks(store, monkeypatch, tmp_path):
    forget_measured_costs(store.get("toy"), monkeypatch, tmp_path)
    req = Request("toy", "speculative", "1 2", TOY_AUTO, max_new_tokens=8)
    assert READING_REASON not in [t.finish_reason for t in stream(store, req)]
    forget_measured_costs(store.get("toy"), monkeypatch, tmp_path / "again")
    announced = [t for t in stream(store, req, announce=True) if t.finish_reason == READING_REASON]
    assert [t.extra.get("setup") for t in announced] == [None, MEASURING]


def test_auto_sampling_is_a_static_tree(store):
    trace = run(store, Request("toy", "speculative", "1 2", {"draft": "eagle", "eagle_tree": "auto",
                                                             "temperature": 1.0, "measure_baseline": False},
                               seed=3, max_new_tokens=12))
    spec = trace.extra["speculative"]
    assert spec["tree"] == "auto" and spec["verify"] == "tree_rejection"
    assert all(len(r["tree"]) - 1 <= spec["auto_tree"]["nodes"] for r in trace.rounds)


def test_auto_without_measured_acceptance_is_refused(store, monkeypatch):
    lm = store.get("toy")
    head, record = load_head(lm)
    bare = {k: v for k, v in record.items() if k != "held_out"}
    monkeypatch.setitem(lm.attached, ATTACHED_KEY, (head, bare))
    with pytest.raises(InvalidRequest, match="measured acceptance"):
        run(store, Request("toy", "speculative", "1 2", {"draft": "eagle", "eagle_tree": "auto"}, max_new_tokens=4))


def test_a_small_pass_never_costs_more_than_a_larger_one():
    from strategies.speculative.eagle.auto_tree import monotone
    assert monotone([15.9, 129.8, 9.6, 6.2, 1.6, 1.7]) == (1.6, 1.6, 1.6, 1.6, 1.6, 1.7)
    assert monotone([1.0, 2.0, 3.0]) == (1.0, 2.0, 3.0)


def test_the_trace_of_an_auto_run_replays_it_without_measuring(store):
    """The trace's params name the tree auto chose; a request with those params takes it without
    measuring and gives the same trace less ``timing`` (what a share link of the run restores)."""
    params = {"draft": "eagle", "eagle_tree": "auto", "temperature": 1.0, "measure_baseline": False}
    first = run(store, Request("toy", "speculative", "1 2", params, seed=5, max_new_tokens=12))
    spec = first.extra["speculative"]
    assert first.params["eagle_auto_tree"] == f"{spec['depth']}x{spec['branching']}"
    again = run(store, Request("toy", "speculative", "1 2", dict(first.params), seed=5, max_new_tokens=12))
    assert again.to_json(timing=False) == first.to_json(timing=False)
    assert again.timing.extra["speculative"]["auto_tree"]["tree_from"] == "the request"
    assert "costs" not in again.timing.extra["speculative"]["auto_tree"]


def test_a_carried_tree_is_the_tree_the_run_uses(store):
    """A tree other than auto's own choice, carried by the request, is the one drafted: every round's
    tree has at most its nodes, and its longest path is its depth."""
    params = {"draft": "eagle", "eagle_tree": "auto", "eagle_auto_tree": "2X3", "temperature": 1.0,
              "measure_baseline": False}
    trace = run(store, Request("toy", "speculative", "1 2", params, seed=2, max_new_tokens=10))
    spec = trace.extra["speculative"]
    assert (spec["depth"], spec["branching"], spec["auto_tree"]["nodes"]) == (2, 3, 12)
    assert trace.params["eagle_auto_tree"] == "2x3"
    assert all(len(r["tree"]) - 1 <= 12 and max(n["depth"] for n in r["tree"]) <= 2 for r in trace.rounds)


@pytest.mark.parametrize("text", ["4", "0x2", "9x1", "4x9", "3x8", "ax2", "4x2x1", "-1x2"])
def test_a_carried_tree_auto_could_not_choose_is_refused_with_the_allowed_range(store, text):
    with pytest.raises(InvalidRequest, match=r"eagle_auto_tree must be empty or depth x branching .* got "):
        run(store, Request("toy", "speculative", "1 2", {"draft": "eagle", "eagle_tree": "auto",
                                                         "eagle_auto_tree": text}, max_new_tokens=4))


def test_the_costs_are_measured_once_per_machine_and_read_back(store, monkeypatch, tmp_path):
    """What one process measured is kept on disk: a model loaded afresh (another process) reads those
    costs instead of measuring, and so chooses the same tree."""
    lm = store.get("toy")
    forget_measured_costs(lm, monkeypatch, tmp_path)
    params = {"draft": "eagle", "eagle_tree": "auto", "temperature": 0.0, "measure_baseline": False}
    first = run(store, Request("toy", "speculative", "1 2", params, max_new_tokens=6))
    assert first.timing.extra["speculative"]["auto_tree"]["costs_measured_now"]
    assert list((tmp_path / "measured").glob("toy-float32-eagle_pass_costs-*.json"))
    forget_measured_costs(lm, monkeypatch, tmp_path)  # the process forgets; the machine's record stays
    again = run(store, Request("toy", "speculative", "1 2", params, max_new_tokens=6))
    figures = again.timing.extra["speculative"]["auto_tree"]
    assert figures["costs_measured_now"] is False
    assert figures["costs"] == first.timing.extra["speculative"]["auto_tree"]["costs"]
    assert again.to_json(timing=False) == first.to_json(timing=False)
