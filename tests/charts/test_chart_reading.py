"""The charts as a first-time reader and a teacher read them, on real runs (toy and SmolLM2): counts
that agree with the trace, one unit and one name for each thing, tokens written one way, titles
rounded for reading, and a one-line caption inside every figure whose numbers are the trace's."""
from __future__ import annotations

import json
import math
import re

import pytest

from playground.charts import beam as beam_charts
from playground.charts import contrastive as contrastive_charts
from playground.charts import eagle as eagle_charts
from playground.charts import whatif
from playground.charts.common import TOKEN_MARKS, caption_of, num, show_token, token_text
from playground.charts.distribution import distribution_figure, switchable_distribution
from playground.charts.marks import selector_label
from playground.charts.overview import most_uncertain_step, overview_figure
from playground.charts.steps import step_figures
from playground.charts.theme import themed
from playground.charts.views import strategy_views
from playground.charts.waterfall import waterfall_figure
from playground.engine import Request, run
from playground.whatif.sample_many import sample_many
from playground.whatif.score import score, summary

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting")]

TOY_CASES = {
    "greedy": ("greedy", {}), "sampling": ("sampling", {}),
    "chain": ("sampling", {"top_k": 8, "top_p": 0.9, "min_p": 0.05}), "gumbel": ("gumbel", {"top_k": 5}),
    "beam": ("beam", {}), "stochastic_beam": ("stochastic_beam", {}), "sample_beam": ("sample_beam", {}),
    "contrastive": ("contrastive", {"amateur": "toy-small"}), "speculative": ("speculative", {"draft": "toy-small"}),
    "eagle": ("speculative", {"draft": "eagle"}),
}


@pytest.fixture(scope="module")
def toy_traces(store) -> dict[str, dict]:
    return {name: run(store, Request("toy", strategy, "1 2", params, seed=0, max_new_tokens=10)).to_dict()
            for name, (strategy, params) in TOY_CASES.items()}


@pytest.fixture(scope="module")
def smol_traces(store) -> dict[str, dict]:
    prompt = "The capital of France is"
    cases = {"greedy": ("greedy", {}), "sampling": ("sampling", {}), "chain": ("sampling", {"top_p": 0.9}),
             "beam": ("beam", {"num_beams": 3})}
    return {name: run(store, Request("smollm2-135m", strategy, prompt, params, seed=0, max_new_tokens=6)).to_dict()
            for name, (strategy, params) in cases.items()}


def every_figure(trace: dict) -> list:
    """The three step charts and every strategy view's figure, at the step the page opens on."""
    step = most_uncertain_step(trace)
    return [*step_figures(trace, step), *(v.figure for v in strategy_views(trace, step) if v.figure)]


def texts_of(fig) -> str:
    """Every label a reader sees or hovers, as one string."""
    return json.dumps(json.loads(fig.to_json()), ensure_ascii=False)


# --- 1. the kept count is what the decoder recorded --------------------------------------------------

@pytest.mark.parametrize("name", ["greedy", "sampling"])
def test_a_step_without_stages_says_the_vocabulary_kept_not_the_candidates(smol_traces, name):
    trace = smol_traces[name]
    step = trace["steps"][0]
    assert "stages" not in step and step["kept_count"] == 49152  # recorded: nothing truncated
    fig = waterfall_figure(trace, 0)
    panel = fig.layout.annotations[0].text
    assert "49,152 kept" in panel and f"{len(step['candidates'])} kept" not in panel
    assert "· 49,152 kept" in distribution_figure(trace, 0).layout.title.text


def test_with_a_stage_on_the_count_is_the_last_stage_s(smol_traces):
    trace = smol_traces["chain"]
    for k, step in enumerate(trace["steps"]):
        kept = step["stages"][-1]["kept_count"]
        assert kept < 49152
        panels = [a.text for a in waterfall_figure(trace, k).layout.annotations if a.yanchor == "bottom"]
        assert f"{kept:,} kept" in panels[-1] and "49,152 kept" in panels[0]
        assert f"· {kept:,} kept" in distribution_figure(trace, k).layout.title.text


# --- 2. sample_beam: the tree, the table and the trace agree ---------------------------------------------

def test_sample_beam_counts_agree_and_no_hypothesis_cell_is_empty(toy_traces):
    trace = toy_traces["sample_beam"]
    beam = trace["beam"]
    sampled = sum(1 for n in beam["nodes"] if n["status"] == "sampled")
    candidates = beam["counters"]["candidates"]
    assert sampled and candidates == len(beam["nodes"]) - sampled
    title = beam_charts.tree_figure(trace).layout.title.text
    assert f"{candidates:,} candidates" in title and f"{len(beam['nodes'])} candidates" not in title
    assert f"<td>candidates considered</td><td>{candidates}</td>" in beam_charts.counters_html(beam)
    table = beam_charts.finished_table(trace)
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.split("<tbody>")[1])
    assert len(rows) == len(beam["finished"]) == beam["counters"]["finished"]
    for row in rows:
        hypothesis = re.findall(r"<td>(.*?)</td>", row)[2]
        assert hypothesis.strip(), row
    assert any(not r["text"] for r in beam["finished"]), "the run has a hypothesis that ended at once"
    assert "ended at once" in table


# --- 3. sample many: a drawn outcome never reads 0 -------------------------------------------------------

def test_sample_many_shows_every_drawn_outcome_s_probability_with_its_digits(store):
    result = sample_many(store, Request("toy", "sampling", "1 2", {"temperature": 3.0}, seed=0, max_new_tokens=3),
                         200)
    table = whatif.sample_table_html(result, top=1000)
    drawn = [o for o in result["outcomes"] if o["count"]]
    assert any(o["probability"] < 5e-5 for o in drawn), "the run draws an outcome that .4f would show as 0"
    cells = re.findall(r"<tr><td>(\d+)</td><td>[^<]*</td><td>([^<]*)</td>", table)
    assert len(cells) == len(result["outcomes"])
    for (count, exact), o in zip(cells, result["outcomes"]):
        assert float(exact) == pytest.approx(o["probability"], rel=1e-3)
        if int(count):
            assert float(exact) > 0 and exact not in ("0", "0.0000")
    assert whatif.exact_text(3.2e-7) == "3.200e-07" and whatif.exact_text(0.25) == "0.25"


# --- 4. the final distribution is named by what the selector did --------------------------------------

def legend_names(fig) -> set[str]:
    return {t.name for t in fig.data if t.name}


def test_beam_says_entered_the_beam_and_samples_nothing(toy_traces, smol_traces):
    for trace in (toy_traces["beam"], smol_traces["beam"]):
        for k in range(len(trace["steps"])):
            names = " ".join(legend_names(switchable_distribution(trace, k)))
            assert "sampled" not in names and "entered the beam" in names
    names = " ".join(legend_names(distribution_figure(toy_traces["chain"], 0)))
    assert "after chain (sampled from)" in names
    assert "argmax" in " ".join(legend_names(distribution_figure(toy_traces["contrastive"], 0)))
    assert "Gumbel" in selector_label(toy_traces["gumbel"], toy_traces["gumbel"]["steps"][0])


def test_a_beam_step_offers_only_the_bases_it_recorded(toy_traces):
    """A beam search records no cut before its selection: its bars are the model's own or what entered the
    beam, never "entering the cuts" or "after the samplers"; sampling whose first stage cuts has its model's
    own bars entering the cuts, one button for both."""
    for name in ("beam", "stochastic_beam", "sample_beam"):
        trace = toy_traces[name]
        searched = [k for k, s in enumerate(trace["steps"]) if (s.get("stages") or [{}])[-1].get("name")
                    in ("beam", "gumbel-top-k")]
        assert searched, name
        for k in searched:
            menus = switchable_distribution(trace, k).layout.updatemenus
            labels = [b.label for b in menus[-1].buttons]
            assert labels == ["model's own", "entered the beam"], (name, k, labels)
            assert menus[-1].active == 1  # the bars open on what entered the beam, as before
    labels = [b.label for b in switchable_distribution(toy_traces["chain"], 0).layout.updatemenus[-1].buttons]
    assert labels == ["model's own", "after the samplers"]


# --- 6. the step shown after a run says why ---------------------------------------------------------------

def test_the_most_uncertain_step_says_so(smol_traces):
    trace = smol_traces["sampling"]
    top = most_uncertain_step(trace)
    n = len(trace["steps"])
    assert distribution_figure(trace, top).layout.title.text.startswith(
        f"Step {top} of {n} · the most uncertain:")
    other = (top + 1) % n
    assert "most uncertain" not in distribution_figure(trace, other).layout.title.text
    h = max(s["raw_entropy"] for s in trace["steps"])
    assert f"most uncertain: step {top} (H {num(h)} nats)" in caption_of(overview_figure(trace, top))


# --- 7. one unit and one name ----------------------------------------------------------------------------

def test_the_score_table_is_in_nats_only(store):
    s = summary(score(store, "toy", "1 2 3 4"))
    table = whatif.score_html(s)
    assert "bits" not in table and "surprisal (nats)" in table
    for t in s["tokens"]:
        if t["prob"] is not None:
            assert f"<td>{-t['logprob']:.2f}</td>" in table
            assert -t["logprob"] == pytest.approx(t["surprisal"] * math.log(2), abs=1e-3)


def test_contrastive_says_strength_like_its_control(toy_traces):
    trace = toy_traces["contrastive"]
    fig = contrastive_charts.step_figure(trace, 0)
    assert "lambda" not in texts_of(fig).lower() and "λ" not in texts_of(fig)
    assert f"strength {trace['contrastive']['strength']:g}" in fig.layout.title.text


def test_bits_only_where_the_parameter_is_in_bits(toy_traces, smol_traces):
    for trace in [*toy_traces.values(), *smol_traces.values()]:
        for fig in every_figure(trace):
            assert "bits" not in texts_of(fig)


# --- 8. tokens written one way ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(TOY_CASES))
def test_tokens_are_written_one_way_in_every_chart(toy_traces, name):
    trace = toy_traces[name]
    pieces = {t["text"] for t in trace["tokens"]} | {c["text"] for s in trace["steps"] for c in s["candidates"]}
    for fig in every_figure(trace):
        text = texts_of(fig)
        for piece in pieces:
            assert json.dumps(repr(piece), ensure_ascii=False)[1:-1] not in text, (fig.layout.title.text, piece)
    shown = texts_of(distribution_figure(trace, 0))
    assert show_token(trace["tokens"][0]["text"]) in shown
    assert token_text(" a") == "·a" and token_text("x\ny") == "x↵y" and token_text("") == "∅"


def test_the_marks_are_explained_in_a_caption(toy_traces):
    assert TOKEN_MARKS in caption_of(distribution_figure(toy_traces["chain"], 0))


# --- 9. titles rounded for reading ----------------------------------------------------------------------

LONG_FLOAT = re.compile(r"\d\.\d{4,}")


def test_eagle_tau_titles_are_rounded(toy_traces):
    trace = toy_traces["eagle"]
    tau = trace["speculative"]["tau"]
    title = eagle_charts.tau_figure(trace).layout.title.text
    assert f"mean {tau:.2f}" in title and not LONG_FLOAT.search(title)
    for r in range(len(trace["rounds"])):
        assert not LONG_FLOAT.search(eagle_charts.tree_figure(trace, r).layout.title.text)


@pytest.mark.parametrize("name", list(TOY_CASES))
def test_no_title_shows_a_raw_float(toy_traces, name):
    for fig in every_figure(toy_traces[name]):
        assert not LONG_FLOAT.search(fig.layout.title.text or ""), fig.layout.title.text


# --- 21. a caption in every figure, from the trace --------------------------------------------------------

@pytest.mark.parametrize("name", list(TOY_CASES))
def test_every_view_has_a_caption_inside_its_figure(toy_traces, name):
    trace = toy_traces[name]
    for fig in every_figure(trace):
        caption = caption_of(fig)
        assert caption, fig.layout.title.text
        out = themed(fig, "light:1440")  # on its way to the page: a row of its own at the foot
        ann = next(a for a in out.layout.annotations if a.name == "caption")
        assert ann.yref == "paper" and ann.y == 0 and ann.yshift < 0
        assert out.layout.margin.b >= -ann.yshift + 20 and out.layout.height > (fig.layout.height or 0)


def test_caption_numbers_are_the_trace_s(toy_traces, smol_traces):
    chain = smol_traces["chain"]
    for k, step in enumerate(chain["steps"]):
        caption = caption_of(distribution_figure(chain, k))
        assert f"({step['stages'][-1]['kept_count']:,} kept of the vocabulary)" in caption
        top_p = next(st for st in step["stages"] if st["name"] == "top_p")["decision"]
        assert f"top-p line: p {top_p['p']:g} · mass {top_p['mass']:.3f}" in caption
        assert f"H {num(step['raw_entropy'])} nats" in caption
    greedy = smol_traces["greedy"]
    assert "(49,152 kept of the vocabulary)" in caption_of(distribution_figure(greedy, 0))
    assert "49,152 tokens of the vocabulary left" in caption_of(waterfall_figure(greedy, 0))

    eagle = toy_traces["eagle"]
    assert f"the mean tau {num(eagle['speculative']['tau'])}" in caption_of(eagle_charts.tau_figure(eagle))
    sb = toy_traces["sample_beam"]
    finished = sum(1 for n in sb["beam"]["nodes"] if n["status"] == "finished")
    assert f"the {finished} finished" in caption_of(beam_charts.tree_figure(sb))
    con = toy_traces["contrastive"]
    s = con["steps"][0]
    caption = caption_of(contrastive_charts.step_figure(con, 0))
    assert f"at {num(s['alpha_threshold'])}, {s['plausible_count']} plausible" in caption
    chosen = next(c for c in s["candidates"] if c["id"] == s["chosen"])
    assert f"score {num(chosen['score'])}" in caption


def test_a_phone_wraps_the_caption_and_thins_token_ticks(smol_traces):
    trace = smol_traces["chain"]
    fig = switchable_distribution(trace, 0)
    out = themed(fig, "light:390")
    caption = next(a for a in out.layout.annotations if a.name == "caption")
    lines = caption.text.split("<br>")
    assert len(lines) > 1 and all(len(re.sub(r"<[^>]+>", "", line)) <= 52 for line in lines)
    assert out.layout.xaxis.tickangle == -90
    shown = [t for t in out.layout.xaxis.ticktext if t]
    assert 0 < len(shown) < len(out.layout.xaxis.ticktext)


def test_the_basis_buttons_keep_the_caption_in_its_row(toy_traces):
    """A click on a basis button swaps in that basis's annotations: their caption sits where the shown one does."""
    out = themed(switchable_distribution(toy_traces["chain"], 0), "dark:1440")
    placed = next(a for a in out.layout.annotations if a.name == "caption")
    for button in out.layout.updatemenus[-1].buttons:
        [swapped] = [a for a in button.args[1]["annotations"] if a.get("name") == "caption"]
        assert swapped["yshift"] == placed.yshift and swapped["text"].startswith("bars: ")


def test_the_winning_paths_labels_sit_on_the_side_its_edges_leave_free():
    """Ranks drawn top down: a peak's label above, a valley's below (the edges leave that side free), a
    slope or a flat run alternating with the label before (two labels a step apart never meet)."""
    top, bottom = "top center", "bottom center"
    # root 0, then 0 (flat), 1, 2, 2 (a flat pair on a slope), 1 (a peak), 10 (a valley), 0 (a peak), 3
    ys = [0, 0, 1, 2, 2, 1, 10, 0, 3]
    assert beam_charts.label_sides(ys) == [top, bottom, top, bottom, top, top, bottom, top, bottom]
    assert beam_charts.label_sides([0]) == [top]
