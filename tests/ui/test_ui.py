"""The page's handlers as plain functions: controls from the registry, figures that draw exactly what
the trace holds (kept/cut colours, thresholds, chain order), escaping of model text, streaming
frames, share links and compare. No browser, no server; the toy model only."""
from __future__ import annotations

import dataclasses
import html
import json
import math
import re
from dataclasses import dataclass

import gradio as gr
import pytest
from page_events import call

from playground.charts.distribution import BASIS_BUTTONS, distribution_figure
from playground.charts.overview import most_uncertain_step, overview_figure
from playground.charts.palette import CUT, KEPT
from playground.charts.steps import StepCharts, step_figures
from playground.charts.text import token_html
from playground.charts.waterfall import waterfall_figure
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models import ModelUnavailable
from playground.ui import share
from playground.ui.components import share_query
from playground.ui.controls import build_panel, controls_for, move_stage, strategies_in_order
from playground.ui.examples import examples
from playground.ui.export import export_pngs, png_export_available, write_trace_json
from playground.ui.handlers import compare, generate, select_step, status_html
from playground.ui.page import build_demo
from playground.ui.side import VIEW_PLOTS, ViewSlots
from strategies.params import MAX_BRIEF, Params, brief_help, check_value, describe, field_kind, param
from strategies.registry import REGISTRY, all_strategies, register
from strategies.sampling.samplers import PRESETS

CHAIN = {"temperature": 1.5, "top_k": 5, "top_p": 0.9, "min_p": 0.05}


@pytest.fixture(scope="module")
def chain_trace(store) -> dict:
    """Toy, sampling with every truncation on: step 0 is the 70/30 branch, cut to two tokens."""
    return run(store, Request("toy", "sampling", "1 2", CHAIN, seed=1, max_new_tokens=8)).to_dict()


def bars(fig) -> list:
    return [t for t in fig.data if t.type == "bar"]


# --- controls ---------------------------------------------------------------------------------------

def test_every_strategy_gets_controls_from_its_params_metadata():
    for spec in all_strategies():
        controls = controls_for(spec)
        described = {d["name"]: d for d in describe(spec.params)}
        assert [c.name for c in controls] == list(described), spec.name
        for c in controls:
            d = described[c.name]
            assert c.default == d["default"] and c.info == brief_help(d) and c.more == d["help"]
            # one line under the label: one sentence of at most MAX_BRIEF characters (the rest: "About")
            assert len(c.info) <= MAX_BRIEF and brief_help({"help": c.info}) == c.info, (spec.name, c.name, c.info)
            for name, allowed in c.when:  # read only at some values of another parameter of its own
                other = next(f for f in dataclasses.fields(spec.params) if f.name == name)
                assert c.name != name and allowed, (spec.name, c.name)
                for value in allowed:
                    check_value(name, value, other.metadata, field_kind(other))
            if d.get("choices"):
                assert c.kind == "dropdown" and c.choices == tuple(d["choices"])
            elif d["type"] == "bool":
                assert c.kind == "checkbox"
            elif d["type"] == "str" and c.custom:  # a draft or amateur: a menu that takes a typed hub id too
                assert c.kind == "dropdown" and c.name in ("draft", "amateur") and c.default in c.choices
            elif d["type"] == "str":
                assert c.kind == "textbox"
            elif c.kind == "slider":
                # the slider reaches an open end too: set there, the run is refused with the range
                assert c.minimum == pytest.approx(d["low"])
                top = d["ui_max"] if d.get("ui_max") is not None else d["high"]
                assert c.maximum >= d["default"] and c.maximum <= top
                assert c.minimum <= d["default"] or d["default"] == d["low"]


@dataclass(frozen=True)
class _ProbeParams(Params):
    ratio: float = param(0.5, "A float in [0, 2].", low=0.0, high=2.0, step=0.1)
    count: int = param(3, "An int with a friendlier slider end.", low=1, high=1000, ui_max=20)
    mode: str = param("a", "A choice.", choices=("a", "b"))
    label: str = param("x", "Free text.")
    flag: bool = param(False, "A switch.")


def test_a_new_strategy_appears_on_the_page_without_touching_the_ui():
    @register("ui_probe", _ProbeParams, "A strategy the UI has never heard of.", family="probe")
    def probe(ctx, params):  # pragma: no cover - never run
        yield from ()

    try:
        assert "ui_probe" in [s.name for s in strategies_in_order()]
        kinds = {c.name: c.kind for c in controls_for(REGISTRY["ui_probe"])}
        assert kinds == {"ratio": "slider", "count": "slider", "mode": "dropdown", "label": "textbox",
                         "flag": "checkbox"}
        count = next(c for c in controls_for(REGISTRY["ui_probe"]) if c.name == "count")
        assert (count.minimum, count.maximum, count.integer) == (1, 20, True)
        demo = build_demo(store=None)  # type: ignore[arg-type]  (building needs no model)
        ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
        assert {"pg-p-ratio", "pg-p-flag", "pg-b-mode", "pg-b-label"} <= ids
    finally:
        REGISTRY.pop("ui_probe")


def test_one_control_per_parameter_read_by_the_selected_strategy():
    """Temperature is one component whichever strategy reads it; a strategy's params are the values of the
    controls it reads (a whole float as an int), and choosing it shows those and hides the rest."""
    with gr.Blocks():
        panel = build_panel("t", "sampling")
    names = [p.name for p in panel.params_]
    assert len(names) == len(set(names)) == len(panel.components)
    assert {s for s, _ in next(p for p in panel.params_ if p.name == "temperature").by_strategy.items()} \
        >= {"sampling", "gumbel", "speculative", "contrastive"}
    values = {panel.fields["temperature"]: 0.5, panel.fields["num_beams"]: 3.0, panel.fields["top_k"]: 7.0}
    assert panel.params("beam", values) == {"num_beams": 3}
    assert isinstance(panel.params("beam", values)["num_beams"], int)
    assert panel.params("sampling", values) == {"temperature": 0.5, "top_k": 7}
    shown = panel.select("greedy")
    assert shown[panel.fields["temperature"]]["visible"] is False and shown[panel.none_note]["visible"] is True
    shown = panel.select("sampling", {"temperature": 0.3, "xtc_probability": 0.5})
    assert shown[panel.fields["temperature"]]["value"] == 0.3 and shown[panel.fields["num_beams"]]["visible"] is False
    assert shown[panel.fields["top_k"]]["value"] == 0  # a link's missing value: the strategy's default
    assert shown[panel.advanced]["label"].endswith("(1 on)")
    # a paired menu's hub id box shows with its menu: speculative's draft, not contrastive's amateur
    shown = panel.select("speculative")
    assert shown[panel.hubs["draft"]]["visible"] is True and shown[panel.hubs["amateur"]]["visible"] is False


def test_a_strategy_shows_only_the_settings_its_current_values_read():
    """Speculative with its default early-exit draft shows the draft's layer and none of EAGLE's settings;
    an EAGLE draft shows EAGLE's (its tree's depth for a static tree, the auto choice for auto), and the
    draft menu's change event does that on the page; beam's keep_slot hides length_penalty; every
    strategy's settings are listed with their whole help under "About these settings"."""
    with gr.Blocks() as demo:
        strategy = gr.Dropdown(["speculative", "contrastive", "beam"], value="speculative")
        panel = build_panel("t", "speculative")
        panel.wire(strategy)
    f = panel.fields

    def visible(shown, *names):
        return {n for n in names if shown[f[n]]["visible"]}
    eagle = ("eagle_tree", "eagle_depth", "eagle_branching", "eagle_total_tokens", "eagle_auto_tree", "eagle_vocab")
    others = ("draft_layer", "lookup_ngram", "verify_top_k", "gamma")
    assert f["eagle_depth"].visible is False and f["draft_layer"].visible is True  # as built
    assert visible(panel.select("speculative"), *eagle, *others) == {"draft_layer", "gamma"}
    assert visible(panel.select("speculative", current={"draft": "eagle"}), *eagle, *others) \
        == {"eagle_tree", "eagle_depth", "eagle_branching", "eagle_vocab", "gamma"}
    link = panel.select("speculative", {"draft": "eagle", "eagle_tree": "auto", "verify": "topk"})
    assert visible(link, *eagle, *others) == {"eagle_tree", "eagle_auto_tree", "eagle_vocab", "verify_top_k", "gamma"}
    assert visible(panel.select("contrastive", current={"amateur": "window"}), "amateur_window", "amateur_layer") \
        == {"amateur_window"}
    assert visible(panel.select("beam", {"finishing": "keep_slot"}), "length_penalty", "early_stopping", "num_beams") \
        == {"num_beams"}
    # the page's event on the draft menu: its inputs by component, its outputs the conditional controls
    show = next(fn for fn in demo.fns.values() if fn.fn.__name__ == "show")
    assert f["draft"] in show.inputs and f["eagle_depth"] in show.outputs and f["gamma"] not in show.outputs
    shown = call(show, lambda c: {f["draft"]: "prompt_lookup", strategy: "speculative"}.get(c, c.value))
    assert {n for n in (*eagle, *others) if n in f and shown.get(f[n], {}).get("visible")} == {"lookup_ngram"}
    about = panel.select("speculative")[panel.about]
    assert "**eagle tree**: EAGLE draft tree: static (every node" in about and about.count("**") == 2 * len(
        [p for p in panel.params_ if p.of("speculative")])


# --- figures ----------------------------------------------------------------------------------------

def test_distribution_bars_are_coloured_kept_or_cut_as_the_trace_says(chain_trace):
    step = chain_trace["steps"][0]
    by_id = {c["id"]: c for c in step["candidates"]}
    fig = distribution_figure(chain_trace, 0)
    kept_bar, cut_bar = bars(fig)
    assert kept_bar.marker.color == KEPT and cut_bar.marker.color == CUT
    assert all(by_id[row[0]]["kept"] for row in kept_bar.customdata)
    assert not any(by_id[row[0]]["kept"] for row in cut_bar.customdata)
    assert len(kept_bar.x) == sum(c["kept"] for c in step["candidates"]) == 2
    # bar heights are the distribution that entered truncation: after temperature, the stage before top_k
    entering = dict(zip([c["id"] for c in step["candidates"]],
                        next(s["probs"] for s in step["stages"] if s["name"] == "temperature")))
    for b in (kept_bar, cut_bar):
        assert [entering[row[0]] for row in b.customdata] == pytest.approx(list(b.y))
    # sorted: the x positions run in decreasing order of height
    heights = sorted(zip(list(kept_bar.x) + list(cut_bar.x), list(kept_bar.y) + list(cut_bar.y)))
    assert all(a[1] >= b[1] for a, b in zip(heights, heights[1:]))


def test_distribution_draws_the_chains_thresholds_where_they_apply(chain_trace):
    fig = distribution_figure(chain_trace, 0)
    step = chain_trace["steps"][0]
    recorded = {s["name"]: s for s in step["stages"]}
    shapes = fig.layout.shapes
    top_p = [s for s in shapes if s.yref == "y2"]
    assert len(top_p) == 1 and top_p[0].y0 == CHAIN["top_p"] == recorded["top_p"]["decision"]["p"]
    # min-p received the distribution renormalised by top-k and top-p: its line is the threshold it
    # recorded, min_p x its own top probability, drawn over its own markers
    min_p = [s for s in shapes if s.yref == "y" and s.y0 == s.y1]
    threshold = recorded["min_p"]["decision"]["threshold"]
    assert len(min_p) == 1 and min_p[0].y0 == threshold
    into_min_p = next(s["probs"] for s in step["stages"] if s["name"] == "top_p")
    assert threshold == pytest.approx(CHAIN["min_p"] * max(into_min_p), rel=1e-5)
    entering = next(t for t in fig.data if (t.meta or {}).get("stage") == "min_p")
    ids = [c["id"] for c in step["candidates"]]
    assert list(entering.y) == [into_min_p[ids.index(row[0])] for row in entering.customdata]
    # top-k ran on the bars themselves: a cut after its kept bars
    top_k = [s for s in shapes if s.x0 == s.x1 and s.xref == "x"]
    assert len(top_k) == 1 and top_k[0].x0 == pytest.approx(recorded["top_k"]["kept_count"] - 0.5)
    assert recorded["top_k"]["kept_count"] == CHAIN["top_k"]
    # the running mass is top-p's own record, which is the running sum of what entered it (after top_k)
    kept_bar, cut_bar = bars(fig)
    cum = next(t for t in fig.data if (t.meta or {}).get("role") == "cumulative")
    into_top_p = dict(zip(ids, next(s["probs"] for s in step["stages"] if s["name"] == "top_k")))
    by_x = {x: row[0] for b in (kept_bar, cut_bar) for x, row in zip(b.x, b.customdata)}
    expected = [sum(into_top_p[by_x[j]] for j in range(x + 1)) for x in cum.x]
    assert list(cum.y) == pytest.approx(expected, abs=1e-5)
    # the chosen token is outlined and labelled
    chosen_x = next(x for b in bars(fig) for x, row in zip(b.x, b.customdata) if row[0] == step["chosen"])
    assert any(a.text == "chosen" and a.x == chosen_x for a in fig.layout.annotations)


def test_greedy_distribution_has_the_model_probabilities_and_no_thresholds(store):
    trace = run(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=4)).to_dict()
    fig = distribution_figure(trace, 0)
    kept = bars(fig)[0]
    raw = {c["id"]: c["raw_prob"] for c in trace["steps"][0]["candidates"]}
    assert list(kept.y) == pytest.approx([raw[row[0]] for row in kept.customdata])
    assert not fig.layout.shapes


def test_waterfall_has_one_panel_per_stage_in_chain_order(chain_trace):
    fig = waterfall_figure(chain_trace, 0)
    stage_bars = [t for t in fig.data if t.type == "bar" and t.x and t.x[0] is not None]
    assert [t.name for t in stage_bars] == ["raw", "temperature", "top_k", "top_p", "min_p"]
    step = chain_trace["steps"][0]
    for k, t in enumerate(stage_bars):
        probs = step["stages"][k]["probs"]
        assert [row[1] for row in t.customdata] == pytest.approx(
            [probs[i] for i in sorted(range(len(probs)), key=lambda i: -step["candidates"][i]["raw_prob"])][
                :len(t.customdata)])
        # blue = the stage's recorded kept flag, whatever the probability rounds to
        kept = {c["id"]: flag for c, flag in zip(step["candidates"], step["stages"][k]["kept"])}
        assert list(t.marker.color) == [KEPT if kept[row[2]] else CUT for row in t.customdata]


def test_overview_plots_each_chosen_tokens_model_probability_and_entropy(chain_trace):
    fig = overview_figure(chain_trace, selected=2)
    p_bar = bars(fig)[0]
    assert list(p_bar.y) == pytest.approx([math.exp(t["raw_logprob"]) for t in chain_trace["tokens"]])
    entropy = next(t for t in fig.data if t.name == "model entropy")
    assert list(entropy.y) == pytest.approx([s["raw_entropy"] for s in chain_trace["steps"]])
    assert fig.layout.shapes[0].x0 == pytest.approx(1.5)  # the selected step is shaded


def _hostile_trace() -> dict:
    evil = "<script>alert(1)</script>"
    cands = [{"id": 1, "text": evil, "raw_prob": 0.6, "prob": 0.6, "kept": True},
             {"id": 2, "text": '"><img src=x onerror=alert(2)>', "raw_prob": 0.4, "prob": 0.4, "kept": True}]
    return {"model": "m", "strategy": "greedy", "params": {}, "seed": 0, "prompt": "<b>p</b>", "chain": ["greedy"],
            "finish_reason": "length",
            "tokens": [{"id": 1, "text": evil, "logprob": math.log(0.6), "raw_logprob": math.log(0.6)}],
            "steps": [{"position": 0, "chosen": 1, "entropy": 0.67, "raw_entropy": 0.67, "candidates": cands}]}


def test_model_text_is_escaped_in_the_html_and_in_chart_labels():
    trace = _hostile_trace()
    out = token_html(trace, 0, show_prompt=True)
    assert "<script" not in out and "<img" not in out and "<b>" not in out
    assert html.escape("<script>alert(1)</script>") in out
    # the hover card is an attribute listing the alternatives: a quote in a token must not close it
    assert '"><img' not in out and "&quot;&gt;&lt;img" in out
    fig = distribution_figure(trace, 0)
    labels = list(fig.layout.xaxis.ticktext)
    assert all("<" not in lab for lab in labels) and "&lt;script&gt;alert(1)&lt;/script&gt;" in labels
    assert "<script" not in json.dumps(waterfall_figure(trace, 0).to_plotly_json()["layout"])


def test_status_line_escapes_what_it_shows():
    assert "<script" not in status_html({"model": "<script>", "strategy": "x"}, final=True)


# --- streaming handlers -----------------------------------------------------------------------------

def test_generate_streams_text_first_then_charts_and_ends_with_the_exact_trace(store):
    reading, *frames = generate(store, Request("toy", "sampling", "1 2", CHAIN, seed=1, max_new_tokens=8),
                                refresh_seconds=0, text_seconds=0)
    assert reading.trace["finish_reason"] == "reading" and not reading.trace["tokens"]  # before the prefill
    assert frames[0].figures is None and not frames[0].final  # first token: text only, as fast as it gets
    assert frames[1].figures is not None  # the charts follow from the second token on
    assert frames[-1].final and not any(f.final for f in frames[:-1])
    counts = [len(f.trace["tokens"]) for f in frames[:-1]]
    assert counts == list(range(1, len(counts) + 1))  # one frame per token
    reference = run(store, Request("toy", "sampling", "1 2", CHAIN, seed=1, max_new_tokens=8))
    assert frames[-1].trace["tokens"] == reference.to_dict()["tokens"]
    assert frames[-1].trace["steps"] == reference.to_dict()["steps"]
    assert frames[-2].trace["steps"] == frames[-1].trace["steps"]  # the streamed dicts match the final one
    dist, water, over = frames[-1].figures
    assert bars(dist) and bars(water) and bars(over)
    assert frames[-1].step == most_uncertain_step(frames[-1].trace)


def test_charts_are_redrawn_only_every_so_often_while_streaming(store):
    frames = list(generate(store, Request("toy", "sampling", "1 2", seed=0, max_new_tokens=8), refresh_seconds=60))
    # a run quicker than refresh_seconds is drawn once, at its end
    assert [f.figures is not None for f in frames] == [False] * (len(frames) - 1) + [True]


def test_tokens_decoded_faster_than_the_text_interval_go_out_together(store):
    """A page is sent the text at most every text_seconds: a fast run sends its first token alone, then
    only its end, and the end holds every token."""
    req = Request("toy", "sampling", "1 2", seed=0, max_new_tokens=40)
    frames = list(generate(store, req, refresh_seconds=60, text_seconds=60))[1:]  # after the "reading the prompt" frame
    assert [len(f.trace["tokens"]) for f in frames[:-1]] == [1] and frames[-1].final
    n = len(frames[-1].trace["tokens"])
    assert n >= 5  # a run long enough to coalesce
    every = list(generate(store, req, refresh_seconds=60, text_seconds=0))[1:]
    assert len(every) == n + 1 and every[-1].trace["tokens"] == frames[-1].trace["tokens"]


def test_bad_input_raises_the_validation_message(store):
    with pytest.raises(InvalidRequest, match=r"temperature must be in \[0, 100\], got -1"):
        next(generate(store, Request("toy", "sampling", "1 2", {"temperature": -1})))
    with pytest.raises(ModelUnavailable, match="toy"):
        next(generate(store, Request("no such model", "greedy", "1 2")))
    with pytest.raises(InvalidRequest, match="strategy must be one of"):
        next(generate(store, Request("toy", "nope", "1 2")))
    frames = generate(store, Request("toy", "greedy", "1 2", max_new_tokens=48))
    assert "reading the prompt (2 tokens)" in next(frames).status  # the prompt's prefill is announced
    assert next(frames).trace["tokens"]  # and the next one works


def test_select_step_clamps_and_marks_the_selected_token(chain_trace):
    text, charts = select_step(chain_trace, 99)
    dist = charts.distribution  # the step charts by name: the distribution, the chain, the overview
    assert charts._fields == ("distribution", "chain", "overview") and "chain" in charts.chain.layout.title.text.lower()
    last = len(chain_trace["steps"]) - 1
    assert f'class="pg-tok pg-special pg-sel" data-step="{last}"' in text or \
        f'class="pg-tok pg-sel" data-step="{last}"' in text
    assert re.match(rf"Step {last}( of \d+)?:", dist.layout.title.text)
    assert select_step(None, 0) is None
    plots = StepCharts(distribution="dist-plot", chain="chain-plot", overview="overview-plot")
    assert plots.by_name(StepCharts(overview=3, distribution=1, chain=2)) == {"dist-plot": 1, "chain-plot": 2,
                                                                              "overview-plot": 3}


def test_compare_runs_both_strategies_on_the_same_seed(store):
    a = Request("toy", "greedy", "1 2", seed=4, max_new_tokens=8)
    pairs = list(compare(store, a, dataclasses.replace(a, strategy="sampling", params={"temperature": 1.0}),
                         refresh_seconds=60))
    a, b = pairs[-1]
    assert a.final and b.final and a.step == b.step == 0
    for frame, strategy, params in ((a, "greedy", {}), (b, "sampling", {"temperature": 1.0})):
        ref = run(store, Request("toy", strategy, "1 2", params, seed=4, max_new_tokens=8))
        assert frame.trace["text"] == ref.text and frame.trace["tokens"] == ref.to_dict()["tokens"]
    with pytest.raises(InvalidRequest, match=r"^B \(sampling\): top_p must be"):
        list(compare(store, Request("toy", "greedy", "1 2"), Request("toy", "sampling", "1 2", {"top_p": 2})))


# --- share links and export ---------------------------------------------------------------------------

def test_share_link_round_trips_the_whole_configuration():
    cfg = share.Config(model="toy", strategy="sampling", prompt="1 2 & more?", system="be brief", chat=False,
                       seed=42, max_new_tokens=17, params={"temperature": 0.7, "top_k": 5, "order":
                                                           "temperature,penalty,top_k,top_p,min_p"},
                       compare_strategy="greedy", compare_params={}, run="generate", forced="0:9,3:12")
    back, warnings = share.decode(share.encode(cfg))
    assert warnings == [] and back == cfg and "force=0%3A9%2C3%3A12" in share.encode(cfg)
    query = share_query(cfg.model, cfg.strategy, cfg.prompt, cfg.system, cfg.chat, 42.0, 17.0, cfg.params,
                        "greedy", {}, forced="0:9,3:12")
    assert share.decode(query)[0] == cfg


def test_a_bad_link_value_is_dropped_with_a_warning_and_the_rest_restored():
    cfg, warnings = share.decode("?model=toy&strategy=sampling&p.temperature=-3&p.top_k=7&p.nope=1&b=zzz&x=1")
    assert cfg.model == "toy" and cfg.params == {"top_k": 7}
    assert any("temperature must be in" in w for w in warnings)
    assert any("nope" in w for w in warnings) and any("strategy must be one of" in w for w in warnings)
    assert any("'x'" in w for w in warnings)
    assert cfg.compare_strategy == share.DEFAULT_COMPARE
    cfg, warnings = share.decode("?model=toy&force=0:9,x:3")
    assert cfg.forced == "" and any("ignored force" in w and "'x:3'" in w for w in warnings)


def test_trace_json_download_is_the_trace(chain_trace, tmp_path):
    path = write_trace_json(chain_trace)
    assert json.loads(open(path, encoding="utf-8").read()) == chain_trace


def test_examples_are_valid_configurations():
    names = {s.name for s in all_strategies()}
    for ex in examples():
        cfg = ex.config
        assert cfg.strategy in names and cfg.compare_strategy in names and cfg.run in share.RUN_MODES
        REGISTRY[cfg.strategy].params.from_dict(cfg.params)  # raises if an example drifted out of range
        REGISTRY[cfg.compare_strategy].params.from_dict(cfg.compare_params)
        back, warnings = share.decode(share.encode(cfg), share.defaults())
        assert warnings == [] and with_defaults(back) == with_defaults(cfg)  # a link leaves defaults out


def with_defaults(cfg: share.Config) -> share.Config:
    """``cfg`` with every parameter of its two strategies filled in at its default (what the page shows)."""
    return dataclasses.replace(cfg, params={**share.strategy_defaults(cfg.strategy), **cfg.params},
                               compare_params={**share.strategy_defaults(cfg.compare_strategy), **cfg.compare_params})


@pytest.mark.skipif(not png_export_available(), reason="PNG export needs kaleido and a Chromium")
def test_server_side_png_export_writes_one_image_per_chart(chain_trace):
    paths = export_pngs(chain_trace, 0, scale=1)
    assert len(paths) == 4  # the step's three charts and the entropy map
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_every_registered_strategy_runs_through_the_page_handler(store):
    """The page names no strategy: each one in the registry streams, draws, and fills its view slots."""
    for spec in strategies_in_order():
        frames = list(generate(store, Request("toy", spec.name, "1 2", seed=0, max_new_tokens=6)))
        final = frames[-1]
        assert final.final and final.trace["strategy"] == spec.name and final.trace["tokens"], spec.name
        assert final.figures is not None and all(bars(f) for f in final.figures), spec.name
        slots = ViewSlots.make(VIEW_PLOTS, "pg-view")
        updates = slots.updates(final.views, "light")
        assert list(updates) == slots.components
        shown = [u for slot, u in updates.items() if slot is not slots.html and u.get("visible")]
        assert len(shown) == min(VIEW_PLOTS, sum(v.figure is not None for v in final.views)), spec.name


def test_stages_move_up_and_down_without_typing_names():
    order = move_stage("llama.cpp", "temperature", -1)
    names = order.split(",")
    assert names.index("temperature") == list(PRESETS["llama.cpp"]).index("temperature") - 1
    assert sorted(names) == sorted(PRESETS["llama.cpp"])
    assert move_stage(order, "temperature", 1).split(",") == list(PRESETS["llama.cpp"])
    first = PRESETS["transformers"][0]
    assert move_stage("transformers", first, -1).split(",") == list(PRESETS["transformers"])  # stays first
    assert move_stage("not a stage list", "xtc", 1).split(",")[-5:] == ["watermark", "xtc", "synthid", "mirostat",
                                                                       "adaptive_p"]


def test_distribution_switches_between_model_entering_and_final_bars(chain_trace):
    fig = step_figures(chain_trace, 0)[0]
    *_, menu = fig.layout.updatemenus  # the basis switch (after the scale and zoom buttons)
    assert [b.label for b in menu.buttons] == list(BASIS_BUTTONS.values())
    for button, basis in zip(menu.buttons, BASIS_BUTTONS):
        alone = distribution_figure(chain_trace, 0, basis=basis)
        shown = [t for t, v in zip(fig.data, button.args[0]["visible"]) if v]
        assert [(t.name, t.y) for t in shown] == [(t.name, t.y) for t in alone.data]
        assert button.args[1]["shapes"] == alone.layout.shapes
    model_bars = [t for t in distribution_figure(chain_trace, 0, basis="model").data if t.type == "bar"]
    raw = {c["id"]: c["raw_prob"] for c in chain_trace["steps"][0]["candidates"]}
    for t in model_bars:
        assert list(t.y) == [raw[row[0]] for row in t.customdata]
