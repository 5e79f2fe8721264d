"""Each request's budget: decoding stops between two steps when its time is spent; beam rows x tokens capped."""
from __future__ import annotations

import time

import pytest

import strategies.speculative.baseline as baseline_module
from playground.charts.break_even import sentence
from playground.engine import Request, prepare, run, stream, timed
from playground.errors import InvalidRequest
from playground.serving import zerogpu
from playground.serving.budget import DEFAULT_SECONDS, Budget, Deadline
from playground.ui.handlers import default_decoder, generate, request_rows, status_html
from strategies.registry import all_strategies, get_strategy, register


class AfterChecks(Deadline):
    """A deadline that passes after ``n`` checks, so the stop lands on a known step."""

    def __init__(self, n: int) -> None:
        super().__init__(None)
        object.__setattr__(self, "left", n)

    def passed(self) -> bool:
        object.__setattr__(self, "left", self.left - 1)
        return self.left < 0


TOY = Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=3, max_new_tokens=12)


def budgeted(store, req: Request, checks: int):
    spec, params, ctx = prepare(store, req)
    return list(timed(spec.run(ctx, params), ctx, AfterChecks(checks)))


def test_the_time_budget_stops_between_steps_and_keeps_the_trace(store):
    full = run(store, TOY).to_dict(timing=False)
    traces = budgeted(store, TOY, 3)
    last = traces[-1].to_dict(timing=False)
    assert last["finish_reason"] == "time budget" and len(full["tokens"]) > 4
    assert len(last["tokens"]) == len(last["steps"]) == 4  # one token per step, then three more checks passed
    assert last["tokens"] == full["tokens"][:4] and last["steps"] == full["steps"][:4]
    assert last["text"] == store.get("toy").decode([t["id"] for t in last["tokens"]])
    assert traces[-1].timing.seconds > 0


def test_a_finished_run_is_never_relabelled(store):
    traces = budgeted(store, Request("toy", "greedy", "1 2", max_new_tokens=3), 10**6)
    assert traces[-1].finish_reason in ("eos", "length")


@pytest.mark.parametrize("strategy,params", [("beam", {"num_beams": 3}),
                                             ("speculative", {"draft": "toy-small", "gamma": 1}),  # several rounds
                                             ("contrastive", {"amateur": "toy-small"})])
def test_every_family_stops_with_its_trace_intact(store, strategy, params):
    req = Request("toy", strategy, "1 2", params, seed=1, max_new_tokens=10)
    last = budgeted(store, req, 1)[-1]
    assert last.finish_reason == "time budget" and last.tokens and last.text == store.get("toy").decode(
        last.token_ids)


def test_a_real_clock_budget_ends_the_run_and_the_page_says_so(store):
    slow = Request("toy", "beam", "1 2", {"num_beams": 8}, max_new_tokens=40)
    trace = run(store, slow, budget=Budget(seconds=1e-6))
    assert trace.finish_reason == "time budget" and 1 <= len(trace.beam["nodes"])
    said = status_html(trace.to_dict(), final=True)
    assert "time budget of 1e-06 s of decoding per run is used up ($PLAYGROUND_TIME_BUDGET; 0 lifts it)" in said
    frames = list(generate(store, Request("toy", "sampling", "1 2", max_new_tokens=40),
                           decoder=default_decoder(store, Budget(seconds=1e-6))))
    assert frames[-1].final and frames[-1].trace["finish_reason"] == "time budget"
    assert "time budget" in frames[-1].status


def test_beam_rows_times_tokens_are_capped_with_the_numbers(store):
    cap = Budget(row_tokens=100)
    with pytest.raises(InvalidRequest, match=r"sample_beam with num_prefixes 8 x num_beams 4 x max_new_tokens 20 = "
                                             r"640 row-tokens; this server runs at most 100"):
        list(stream(store, Request("toy", "sample_beam", "1 2", {"num_prefixes": 8, "num_beams": 4},
                                   max_new_tokens=20), budget=cap))
    with pytest.raises(InvalidRequest, match=r"beam with num_beams 16 x max_new_tokens 20 = 320 row-tokens"):
        list(stream(store, Request("toy", "beam", "1 2", {"num_beams": 16}, max_new_tokens=20), budget=cap))
    assert run(store, Request("toy", "beam", "1 2", {"num_beams": 5}, max_new_tokens=20), budget=cap).tokens
    assert run(store, Request("toy", "sampling", "1 2", max_new_tokens=40), budget=cap).tokens  # not beam-like


def test_the_rows_a_step_runs_are_the_strategys_declared_factors_read_from_params_parsed_once(store, monkeypatch):
    """Each strategy names the parameters whose product is its rows (beams, prefixes); the budget's cap, the
    ZeroGPU duration and the page's estimate read them from the request's params, parsed once for the run."""
    declared = {spec.name: spec.rows for spec in all_strategies() if spec.rows}
    assert declared == {"beam": ("num_beams",), "stochastic_beam": ("num_beams",),
                        "sample_beam": ("num_prefixes", "num_beams")}
    req = Request("toy", "sample_beam", "1 2", {"num_prefixes": 2, "num_beams": 3}, max_new_tokens=4)
    spec = get_strategy("sample_beam")
    parses = []
    original = spec.params.from_dict
    monkeypatch.setattr(spec.params, "from_dict", lambda values: parses.append(values) or original(values))
    assert request_rows(req) == 6 and zerogpu.rows(req.row_factors()) == 6
    assert run(store, req, budget=Budget(row_tokens=24)).tokens and len(parses) == 1  # 6 rows x 4 tokens: the cap
    assert request_rows(Request("toy", "beam", "1 2", {"num_beams": 0})) == 1  # refused by the run, with its message
    with pytest.raises(RuntimeError, match=r"names rows \['num_heads'\] its params lack"):
        register("planted", spec.params, "", rows=("num_heads",))(lambda ctx, params: iter(()))


def test_the_budget_reads_the_environment(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_TIME_BUDGET", raising=False)
    monkeypatch.delenv("PLAYGROUND_MAX_ROW_TOKENS", raising=False)
    monkeypatch.delenv("SPACE_ID", raising=False)
    local = Budget.from_env()  # make run: one person's server, no time budget unless asked
    assert local.seconds is None and local.row_tokens and Budget() == Budget(None, None)  # the CLI: unlimited
    monkeypatch.setenv("SPACE_ID", "someone/decoding-playground")
    assert Budget.from_env().seconds == DEFAULT_SECONDS  # a Space is shared: a budget by default
    monkeypatch.setenv("PLAYGROUND_TIME_BUDGET", "0")
    monkeypatch.setenv("PLAYGROUND_MAX_ROW_TOKENS", "500")
    assert Budget.from_env() == Budget(None, 500)
    monkeypatch.setenv("PLAYGROUND_TIME_BUDGET", "soon")
    with pytest.raises(InvalidRequest, match=r"PLAYGROUND_TIME_BUDGET must be a number >= 0 .*got 'soon'"):
        Budget.from_env()


class SlowPage:
    """A consumer that holds every trace ``hold`` seconds, as a page drawing charts on a busy machine does."""

    def __init__(self, hold: float) -> None:
        self.hold = hold

    def read(self, traces):
        last = None
        for last in traces:
            time.sleep(self.hold)
        return last


def test_the_time_budget_counts_decoding_not_the_time_a_consumer_holds_each_token(store):
    """12 toy tokens decode in far less than 0.5 s; a page that holds each for 0.1 s spends 1.2 s on them.
    The budget is the decoder's clock, the one timing.seconds reports: the run makes all its tokens."""
    req = Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=3, max_new_tokens=12)
    run(store, req)  # warm
    last = SlowPage(0.1).read(stream(store, req, budget=Budget(seconds=0.5)))
    assert last.finish_reason in ("length", "eos") and last.timing.seconds < 0.5
    held = SlowPage(0.0).read(stream(store, req, budget=Budget(seconds=1e-6)))
    assert held.finish_reason == "time budget"  # a budget the decoding itself passes still stops it


# --- speculative decoding's plain reference: measured after a cut, off the clock the budget reads -------------

CUT_RUNS = [{"draft": "toy-small", "gamma": 1}, {"draft": "early_exit", "gamma": 2},
            {"draft": "eagle", "eagle_depth": 2, "eagle_branching": 2}]


@pytest.fixture
def plain_runs(monkeypatch):
    """The plain loop the baseline runs, watched: the tokens of each run of it."""
    seen: list[list[int]] = []
    original = baseline_module.chain_loop

    def watched(ctx, trace, *args, **kwargs):
        for trace in original(ctx, trace, *args, **kwargs):
            yield trace
        seen.append(trace.token_ids)

    monkeypatch.setattr(baseline_module, "chain_loop", watched)
    return seen


@pytest.mark.parametrize("params", CUT_RUNS, ids=lambda p: p["draft"])
def test_a_speculative_run_the_budget_cuts_still_times_plain_decoding_of_its_tokens(store, plain_runs, params):
    req = Request("toy", "speculative", "1 2", params, seed=1, max_new_tokens=24)
    last = budgeted(store, req, 1)[-1]  # cut after its first round
    assert last.finish_reason == "time budget" and 0 < len(last.tokens) < 24
    w = last.timing.extra["speculative"]
    base = w["baseline"]
    assert plain_runs == [last.token_ids], "plain decoding ran once, on the tokens the run made"
    assert base["tokens"] == len(last.tokens) and base["same_tokens"] and "no_baseline" not in w
    assert w["measured_speedup"] == pytest.approx(base["seconds"] / last.timing.seconds, rel=1e-3)
    assert "so nothing says whether this run paid" not in sentence(last.to_dict())  # the page has its verdict


def test_a_real_clock_budget_cut_gets_its_baseline_and_the_page_its_verdict(store):
    trace = run(store, Request("toy", "speculative", "1 2", {"draft": "toy-small", "gamma": 1}, seed=1,
                               max_new_tokens=40), budget=Budget(seconds=1e-6))
    d = trace.to_dict()
    assert d["finish_reason"] == "time budget" and d["timing"]["speculative"]["baseline"]["tokens"] == len(d["tokens"])
    assert "this run paid" in sentence(d) or "this run did not pay" in sentence(d)


@pytest.mark.parametrize("params", [CUT_RUNS[0], CUT_RUNS[2]], ids=lambda p: p["draft"])
def test_the_baseline_counts_neither_in_the_run_nor_against_its_budget(store, monkeypatch, params):
    """Plain decoding slowed to 0.1 s a token (1.2 s for 12) after a run that decodes in far less than its 0.5 s
    budget: the run keeps all its tokens and its seconds, the baseline holds the slow seconds on its own
    stopwatch, and the clock the budget reads has not moved while it ran."""
    original = baseline_module.chain_loop

    def slow(*args, **kwargs):
        for trace in original(*args, **kwargs):
            time.sleep(0.1)
            yield trace

    req = Request("toy", "speculative", "1 2", params, seed=1, max_new_tokens=12)
    run(store, req)  # warm
    monkeypatch.setattr(baseline_module, "chain_loop", slow)
    spec, p, ctx = prepare(store, req)
    deadline = Budget(seconds=0.5).deadline(ctx.clock.now)
    traces = list(timed(spec.run(ctx, p), ctx, deadline))
    last = traces[-1]
    base = last.timing.extra["speculative"]["baseline"]
    assert last.finish_reason in ("length", "eos") and len(last.tokens) >= 1 and last.timing.seconds < 0.5
    assert base["tokens"] == len(last.tokens) and base["seconds"] >= 0.1 * len(last.tokens)
    assert not deadline.passed(), "the baseline's seconds ran on the clock the budget reads"
    assert last.finish_reason != "time budget"
