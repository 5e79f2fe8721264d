"""Structured decoding on the page: the Z_t chart, the disallowed tokens in the distribution and the
waterfall, the forced tokens in the text, the grammar controls, share links and /generate.

Every chart value is read back from the figure's plotly dict and compared with the trace's record;
the property test checks that record itself against plain torch on the stage's input (a grammar
stage given a random mask, placed anywhere in a random sampler chain)."""
from __future__ import annotations

import dataclasses
import json
import random

import gradio as gr
import pytest
import torch
from figure_reading import bar_points, fig_dict, stage_points, waterfall_panels
from gradio_client import Client
from gradio_client.exceptions import AppError
from page_events import call
from word_lm import WordLM

from playground.charts import grammar as grammar_chart
from playground.charts.distribution import distribution_figure
from playground.charts.marks import BASES
from playground.charts.palette import CUT, FEASIBLE, FIGHTING
from playground.charts.text import token_html
from playground.charts.views import strategy_views
from playground.charts.waterfall import waterfall_figure
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models.dtypes import DEFAULT_DTYPE
from playground.trace import Trace
from playground.ui import share
from playground.ui.api import api_generate_stream
from playground.ui.components import share_query
from playground.ui.controls import NO_GRAMMAR, grammar_request
from playground.ui.examples import examples
from playground.ui.handlers import compare, generate, status_html
from playground.ui.page import build_demo
from playground.whatif.branches import branch_settings
from strategies.recording import make_step
from strategies.registry import get_strategy
from strategies.sampling.chain import Multinomial, record_chain
from strategies.sampling.grammar import GRAMMAR_REASON, masked, with_grammar
from strategies.sampling.samplers import SAMPLER_STAGES, SamplerParams, build_sampler_chain
from strategies.stages import TransformBase

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

CHOICES = '[" a hill rose high", " the hill rose high"]'  # toy: ' a' is likely, ' hill' after it is not
TOY_GRAMMAR = {"kind": "choices", "text": CHOICES}
TOL = 1e-5  # the trace keeps 6 significant digits


@pytest.fixture(scope="module")
def toy_trace(store) -> dict:
    """Toy, sampling under two choices; seed 1 takes ' a', then the grammar forces ' hill rose high'."""
    return run(store, Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=1, max_new_tokens=12,
                              grammar=TOY_GRAMMAR)).to_dict()


def grammar_stage(step: dict) -> dict:
    return next(st for st in step["stages"] if st["name"] == "grammar")


def z_points(fd: dict) -> dict:
    return next(t for t in fd["data"] if (t.get("meta") or {}).get("role") == "z")


# --- the Z chart --------------------------------------------------------------------------------------

def test_z_chart_draws_the_recorded_z_of_every_step(toy_trace):
    assert toy_trace["finish_reason"] == GRAMMAR_REASON and toy_trace["text"].strip() == "a hill rose high"
    fd = fig_dict(grammar_chart.z_figure(toy_trace, selected=1))
    points = z_points(fd)
    records = [grammar_stage(s)["decision"] for s in toy_trace["steps"]]
    assert list(points["x"]) == list(range(len(records)))
    for k, (y, row, d) in enumerate(zip(points["y"], points["customdata"], records)):
        assert row[0] == d["z"] and y == d["z"], k  # drawn as recorded
        assert row[1] == d["allowed_count"]  # on hover
        assert points["marker"]["color"][k] == (FIGHTING if d["z"] < grammar_chart.LOW_Z else FEASIBLE)
        assert points["marker"]["symbol"][k] == ("diamond" if d["forced"] else "circle")
    # step 1 is the fight: ' hill' after ' a' had almost nothing of the model's probability
    assert records[1]["z"] < 1e-3 and records[1]["forced"] and points["marker"]["color"][1] == FIGHTING
    assert records[0]["allowed_count"] == 2 and not records[0]["forced"]
    assert "the grammar is fighting the model</b> at 1 step" in fd["layout"]["title"]["text"]
    band = next(sh for sh in fd["layout"]["shapes"] if sh["type"] == "rect" and sh["y1"] == grammar_chart.LOW_Z)
    assert band["y0"] <= min(points["y"])  # every point below LOW_Z lies in the red band
    assert fd["layout"]["yaxis"]["type"] == "log"


def test_the_z_chart_names_the_mass_the_record_states(toy_trace):
    """Every record says its mask is the grammar's feasible set, so the chart draws the feasible mass;
    records that do not say (a trace from a matcher that forced texts) are drawn as the allowed mass."""
    assert {grammar_stage(s)["decision"]["mask"] for s in toy_trace["steps"]} == {"feasible"}
    fd = fig_dict(grammar_chart.z_figure(toy_trace))
    assert fd["layout"]["title"]["text"].startswith(grammar_chart.TITLE + "<br>")
    assert "every token that continues a valid text" in json.dumps(fd["layout"]["annotations"])
    unstated = json.loads(json.dumps(toy_trace))
    for s in unstated["steps"]:
        del grammar_stage(s)["decision"]["mask"]
    fd = fig_dict(grammar_chart.z_figure(unstated))
    assert fd["layout"]["title"]["text"].startswith("Grammar: allowed mass Z_t per step<br>")
    assert "the tokens the matcher allowed" in json.dumps(fd["layout"]["annotations"])


def test_the_z_view_is_shown_only_for_a_trace_with_a_grammar_stage(store, toy_trace):
    assert grammar_chart.TITLE in [v.title for v in strategy_views(toy_trace)]
    plain = run(store, Request("toy", "sampling", "1 2", seed=1, max_new_tokens=4)).to_dict()
    assert grammar_chart.TITLE not in [v.title for v in strategy_views(plain)]
    assert grammar_chart.z_figure(plain) is None


def test_disallowed_candidates_are_crossed_and_struck_through(toy_trace):
    for k, s in enumerate(toy_trace["steps"]):
        allowed = set(grammar_stage(s)["decision"]["allowed"])
        fd = fig_dict(distribution_figure(toy_trace, k))
        bars = bar_points(fd)
        crossed = set(stage_points(fd, "grammar", "disallowed") or {})
        assert crossed == {tok for tok in bars if tok not in allowed}
        ticks = fd["layout"]["xaxis"]["ticktext"]
        for tok, bar in bars.items():
            assert ticks[bar["x"]].startswith("<s>") == (tok not in allowed)
            if tok not in allowed:
                assert bar["color"] == CUT
        # the bars are what the grammar received: here the model's own distribution
        raw = {c["id"]: c["raw_prob"] for c in s["candidates"]}
        assert all(bar["y"] == pytest.approx(raw[tok], abs=TOL) for tok, bar in bars.items())


def test_the_waterfall_shows_the_grammar_stage_with_its_allowed_count(toy_trace):
    s = toy_trace["steps"][0]
    d = grammar_stage(s)["decision"]
    fd = fig_dict(waterfall_figure(toy_trace, 0))
    assert [p["name"] for p in waterfall_panels(fd)] == ["raw", "grammar"]
    titles = [a["text"] for a in fd["layout"]["annotations"]]
    assert f"2. grammar<br>{d['allowed_count']} allowed · Z {d['z']:.3g}" in titles


def test_the_text_marks_the_tokens_the_grammar_forced(toy_trace):
    html = token_html(toy_trace, 1)
    spans = html.split('<span class="pg-tok')[1:]
    assert len(spans) == len(toy_trace["tokens"])
    for s, span in zip(toy_trace["steps"], spans):
        forced = grammar_stage(s)["decision"]["forced"]
        assert ("pg-grammar-forced" in span.split('"')[0]) == forced
        assert ("forced by the grammar" in span) == forced
    assert "·time 6.6e-05 (not allowed)" in spans[0]  # an alternative the grammar removed
    title = distribution_figure(toy_trace, 1).layout.title.text
    assert "forced by the grammar" in title


# --- the property: every grammar mark is the stage's record, and the record is the mask on its input --

class RandomMask(TransformBase):
    """The grammar stage's own decision (grammar.masked) on a fixed random mask."""

    name = "grammar"

    def __init__(self, allowed: torch.Tensor) -> None:
        self.mask = allowed

    def decide(self, logits, context):
        return masked(logits, self.mask[None].expand(logits.shape[0], -1), [False] * logits.shape[0], [0])


def random_step(rng: random.Random, seed: int, vocab: int = 40) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """One recorded step of a random sampler chain with the grammar at a random place:
    (its JSON, the logits the grammar received, its mask)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab, generator=g) * rng.uniform(0.5, 4.0)
    allowed = torch.rand(vocab, generator=g) < rng.uniform(0.05, 0.9)
    allowed[int(logits.argmax())] = True  # every truncation here keeps the top token: the grammar keeps one
    order = list(SAMPLER_STAGES)
    rng.shuffle(order)
    order.insert(rng.randrange(len(order) + 1), "grammar")
    params = SamplerParams(temperature=round(rng.uniform(0.3, 2.0), 3) if rng.random() < 0.7 else 1.0,
                           top_k=rng.randint(1, 30) if rng.random() < 0.5 else 0,
                           top_p=round(rng.uniform(0.2, 0.99), 3) if rng.random() < 0.5 else 1.0,
                           min_p=round(rng.uniform(0.01, 0.3), 3) if rng.random() < 0.5 else 0.0)
    chain = with_grammar(build_sampler_chain(params, g, WordLM("t{}")), RandomMask(allowed), ",".join(order))
    record = record_chain(chain, logits[None], torch.zeros(1, 0, dtype=torch.long))
    chosen, _ = Multinomial(g).select(record.logits[-1])
    stages, decisions = record.row(0)
    names = [t.name for t in chain]
    at = names.index("grammar")
    step, token = make_step(WordLM("t{}"), 0, stages, names, int(chosen[0]), 12, None, decisions)
    trace = Trace("random", "sampling", params.to_dict(), seed, "", [], chain=[*names, "multinomial"],
                  steps=[step], tokens=[token])
    return trace.to_dict(), stages[at], allowed


@pytest.mark.parametrize("seed", range(60))
def test_every_grammar_mark_is_the_stage_record_and_the_record_is_the_mask(seed):
    rng = random.Random(seed)
    d, entering, mask = random_step(rng, seed)
    s = d["steps"][0]
    rec = grammar_stage(s)["decision"]
    live = mask & torch.isfinite(entering)
    want_z = float(entering.float().softmax(-1)[live].sum())
    assert rec["z"] == pytest.approx(want_z, rel=TOL, abs=1e-9)
    assert rec["allowed_count"] == int((mask & torch.isfinite(entering)).sum())
    assert set(rec["allowed"]) == {c["id"] for c in s["candidates"] if live[c["id"]]}
    assert rec["forced"] == (rec["allowed_count"] == 1)
    # the Z chart: the record, as it is
    points = z_points(fig_dict(grammar_chart.z_figure(d)))
    assert points["customdata"][0][0] == rec["z"] and points["customdata"][0][1] == rec["allowed_count"]
    assert points["y"][0] == rec["z"] or (rec["z"] == 0 and points["y"][0] <= grammar_chart.FLOOR)
    # the distribution, on whichever basis: crosses on exactly the shown candidates the record leaves out
    for basis in BASES:
        fd = fig_dict(distribution_figure(d, 0, basis=basis))
        shown = bar_points(fd)
        crossed = stage_points(fd, "grammar", "disallowed") or {}
        assert set(crossed) == {tok for tok in shown if tok not in rec["allowed"]}
        for tok, pt in crossed.items():
            assert pt["x"] == shown[tok]["x"] and pt["y"] == shown[tok]["y"]


# --- the page: controls, share links, status, examples ---------------------------------------------

def test_grammar_controls_become_the_request_grammar():
    assert grammar_request(NO_GRAMMAR, "yes | no") is None
    assert grammar_request("json", "  ") is None
    assert grammar_request("regex", r"\d+") == {"kind": "regex", "text": r"\d+"}


def test_the_page_passes_the_grammar_controls_into_the_request(store):
    """The Explore run's handler, called with the page's own inputs: the grammar boxes reach the Request."""
    seen: list[Request] = []

    def decoder(req, progress=None):
        seen.append(req)
        yield run(store, req)

    demo = build_demo(store, decoder=decoder)
    fn = next(f for f in demo.fns.values() if f.api_name == "explore")
    set_to = {"pg-model": "toy", "pg-strategy": "greedy", "pg-prompt": "1 2", "pg-grammar-kind": "choices",
              "pg-grammar-text": CHOICES}
    frames = list(call(fn, lambda c: set_to.get(c.elem_id, c.value)))
    assert seen and seen[-1].grammar is not None and seen[-1].grammar.to_dict() == TOY_GRAMMAR
    status = next(c for c in fn.outputs if c.elem_id == "pg-status")
    assert frames[-1] and "the grammar is complete" in frames[-1][status]
    demo.close()


def test_the_page_writes_the_grammar_into_its_share_link_and_an_example_sets_the_grammar_controls(store):
    demo = build_demo(store, decoder=lambda req, progress=None: iter(()))
    ids = lambda comps: [getattr(c, "elem_id", None) for c in comps]  # noqa: E731
    link = next(f for f in demo.fns.values() if "pg-link" in ids(f.outputs) and len(f.inputs) > 5)
    set_to = {"pg-model": "toy", "pg-strategy": "greedy", "pg-prompt": "1 2", "pg-grammar-kind": "choices",
              "pg-grammar-text": CHOICES}
    # the link's states as a page opens them: no branch, the Explore tab, no lockstep
    update = call(link, lambda c: set_to.get(getattr(c, "elem_id", None), c.value))
    cfg, warnings = share.decode(update["value"])
    assert warnings == [] and (cfg.grammar_kind, cfg.grammar_text) == ("choices", CHOICES)
    # an example's button sets the grammar controls (and opens their group) through the link's path
    example = next(ex for ex in examples() if ex.config.grammar_kind == "regex")
    by_id = lambda updates: {getattr(c, "elem_id", None): v for c, v in updates.items()}  # noqa: E731
    on_example = next(f for f in demo.fns.values() if not f.inputs and "pg-grammar-kind" in ids(f.outputs)
                      and "pg-example-note" in ids(f.outputs))  # one event for every example's button
    button = next(b for b in demo.blocks.values() if isinstance(b, gr.Button) and b.value == example.label)
    values = by_id(on_example.fn(gr.EventData(button, None)))
    assert values["pg-grammar-kind"] == "regex" and values["pg-grammar-text"]["value"] == example.config.grammar_text
    assert values["pg-grammar"]["open"] is True
    demo.close()


def test_compare_constrains_both_sides(store):
    a, b = list(compare_runs(store))[-1]
    for frame in (a, b):
        assert frame.trace["grammar"] == TOY_GRAMMAR and frame.trace["finish_reason"] == GRAMMAR_REASON
        assert frame.trace["text"].strip() in ("a hill rose high", "the hill rose high")


def compare_runs(store):
    a = Request("toy", "greedy", "1 2", seed=4, max_new_tokens=12, dtype=DEFAULT_DTYPE, grammar=TOY_GRAMMAR)
    return compare(store, a, dataclasses.replace(a, strategy="sampling", params={"temperature": 1.0}))


def without_defaults(cfg: share.Config) -> share.Config:
    """``cfg`` as a link restores it: a link carries only what differs from the defaults, so a parameter
    at its strategy's default comes back as absent (the same run)."""
    fields = {f.name: f.default for f in dataclasses.fields(get_strategy(cfg.strategy).params)}
    return dataclasses.replace(cfg, params={k: v for k, v in cfg.params.items() if fields.get(k) != v})


def test_share_link_round_trips_the_grammar():
    cfg = share.Config(model="toy", strategy="sampling", prompt="1 2", chat=False, seed=3, max_new_tokens=9,
                       params={"temperature": 1.0}, run="generate", grammar_kind="choices", grammar_text=CHOICES)
    query = share.encode(cfg)
    back, warnings = share.decode(query)
    assert warnings == [] and back == without_defaults(cfg) and "grammar=choices" in query
    again = share_query("toy", "sampling", "1 2", "", False, 3, 9, {"temperature": 1.0}, "greedy", {},
                        grammar_kind="choices", grammar_text=CHOICES)
    assert share.decode(again)[0] == without_defaults(cfg)
    none = share_query("toy", "greedy", "1 2", "", False, 0, 9, {}, "greedy", {}, grammar_kind=NO_GRAMMAR,
                       grammar_text="ignored")
    assert "grammar" not in none and share.decode(none)[0].grammar_kind == ""


def test_a_link_with_a_bad_grammar_opens_without_it_and_says_why():
    cfg, warnings = share.decode("?model=toy&grammar=json&grammar_text=%7Boops")
    assert (cfg.grammar_kind, cfg.grammar_text) == ("", "") and cfg.model == "toy"
    assert any("ignored grammar" in w and "JSON schema does not parse" in w for w in warnings)
    cfg, warnings = share.decode("?model=toy&grammar=yaml&grammar_text=a")
    assert cfg.grammar_kind == "" and any("kind must be one of" in w for w in warnings)


def test_status_says_why_a_grammar_run_ended(toy_trace):
    assert "finished: the grammar is complete" in status_html(toy_trace, final=True)
    dead = dict(toy_trace, finish_reason="grammar: no token allowed")
    assert "the grammar allows no token here" in status_html(dead, final=True)


def test_an_invalid_grammar_is_refused_with_the_matchers_message(store):
    with pytest.raises(InvalidRequest, match=r"the regex '\(unclosed' is not valid: unclosed group"):
        list(generate(store, Request("toy", "greedy", "1 2", grammar={"kind": "regex", "text": "(unclosed"})))
    with pytest.raises(InvalidRequest, match="JSON schema does not parse"):
        list(generate(store, Request("toy", "greedy", "1 2", grammar={"kind": "json", "text": "{oops"})))


def test_the_grammar_examples_are_valid_and_the_toy_one_follows_its_choices(store):
    with_grammar_ = [ex for ex in examples() if ex.config.grammar_kind]
    assert {ex.config.grammar_kind for ex in with_grammar_} == {"json", "choices", "regex"}
    for ex in with_grammar_:
        back, warnings = share.decode(share.encode(ex.config))
        assert warnings == [] and back == without_defaults(ex.config), ex.label
    toy = next(ex.config for ex in with_grammar_ if ex.config.model == "toy")
    frames = list(generate(store, Request(toy.model, toy.strategy, toy.prompt, toy.params, toy.seed, toy.max_new_tokens,
                                          dtype=toy.dtype, grammar=grammar_request(toy.grammar_kind, toy.grammar_text))))
    assert frames[-1].trace["text"] in [c.strip() for c in json.loads(toy.grammar_text)]
    assert grammar_chart.TITLE in [v.title for v in frames[-1].views]


def test_a_branch_of_a_grammar_run_keeps_its_grammar_through_the_page_handler(store, toy_trace):
    """The branch panel runs ui.generate with the trace's settings: the grammar goes with them."""
    settings = branch_settings(toy_trace, 0, 9)  # ' the' at step 0: the other valid text
    frames = list(generate(store, Request(**settings, max_new_tokens=12), final_step=0))
    assert frames[-1].trace["text"].strip() == "the hill rose high"
    assert frames[-1].trace["grammar"] == TOY_GRAMMAR
    with pytest.raises(InvalidRequest, match="grammar does not allow token"):
        list(generate(store, Request(**branch_settings(toy_trace, 0, 4), max_new_tokens=12)))  # ' time': not allowed


# --- /generate ----------------------------------------------------------------------------------------

def test_api_stream_parses_the_grammar_argument(store):
    decoder = lambda req, progress=None: iter([run(store, req)])  # noqa: E731
    args = ("toy", "greedy", "1 2", "{}", 0, 12, "", "auto", "auto")
    *_, (text, trace_json) = api_generate_stream(decoder, *args, json.dumps(TOY_GRAMMAR))
    assert json.loads(trace_json)["grammar"] == TOY_GRAMMAR
    with pytest.raises(InvalidRequest, match="grammar must be a JSON object"):
        list(api_generate_stream(decoder, *args, "choices: a | b"))


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)  # the session's app server (tests/conftest.py)


def test_generate_with_a_grammar_returns_a_trace_that_follows_it(client, store):
    text, trace_json = client.predict(model="toy", strategy="sampling", prompt="1 2", params='{"temperature": 1.0}',
                                      seed=1, max_new_tokens=12, system="", chat="auto", dtype="auto",
                                      grammar=json.dumps(TOY_GRAMMAR), api_name="/generate")
    trace = json.loads(trace_json)
    assert text == trace["text"] and text.strip() in ("a hill rose high", "the hill rose high")
    assert trace["grammar"] == TOY_GRAMMAR and trace["finish_reason"] == GRAMMAR_REASON
    assert all(any(st["name"] == "grammar" for st in s["stages"]) for s in trace["steps"])
    ref = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=1, max_new_tokens=12,
                             grammar=TOY_GRAMMAR))
    assert trace["tokens"] == ref.to_dict()["tokens"]


def test_generate_with_an_invalid_grammar_is_a_clear_error(client):
    with pytest.raises(AppError, match=r"the regex '\(unclosed' is not valid: unclosed group"):
        client.predict(model="toy", strategy="greedy", prompt="1 2", params="{}",
                       grammar=json.dumps({"kind": "regex", "text": "(unclosed"}), api_name="/generate")
    with pytest.raises(AppError, match=r"grammar kind must be one of json, regex, choices, lark"):
        client.predict(model="toy", strategy="greedy", prompt="1 2", params="{}",
                       grammar=json.dumps({"kind": "yaml", "text": "a"}), api_name="/generate")
    text, trace = client.predict(model="toy", strategy="greedy", prompt="1 2", params="{}", max_new_tokens=4,
                                 api_name="/generate")
    assert text and "grammar" not in json.loads(trace)  # the next call, without one, works
