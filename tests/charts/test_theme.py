"""Every figure takes its colours from the page theme, in one place (playground.charts.theme)."""
from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from playground.charts import palette
from playground.charts.common import CAPTION, CAPTION_ROW
from playground.charts.steps import step_figures
from playground.charts.theme import LEGEND_ROW, THEMES, TITLE_ROOM, legend_rows, themed
from playground.charts.views import strategy_views
from playground.engine import Request, run
from playground.ui.side import VIEW_PLOTS, ViewSlots

CASES = [("sampling", {"temperature": 1.5, "top_k": 5}), ("beam", {"num_beams": 3}),
         ("speculative", {"draft": "toy-small"}), ("contrastive", {"amateur": "toy-small"})]


@pytest.fixture(scope="module")
def figures(store) -> list:
    """The step charts and the strategy views of one run of each family, on toy."""
    out = []
    for strategy, params in CASES:
        d = run(store, Request("toy", strategy, "1 2", params, seed=2, max_new_tokens=8)).to_dict()
        out += list(step_figures(d, 0)) + [v.figure for v in strategy_views(d, 0) if v.figure is not None]
    return out


def _inks(layout: dict) -> list[str]:
    """Every text colour a figure's layout names: its font, title, legend, axes, annotations."""
    inks = [layout["font"]["color"], layout["title"]["font"]["color"], layout["legend"]["font"]["color"]]
    for name, axis in layout.items():
        if name.startswith(("xaxis", "yaxis")):
            inks += [axis["tickfont"]["color"], axis["title"]["font"]["color"]]
    return inks


# Semantic colours (chosen, kept, the top-k / top-p / min-p lines...) are mid-tones that read on both
# backgrounds; every other annotation is written in the theme's ink.
PALETTE = {c.lower() for c in (palette.KEPT, palette.CUT, palette.CHOSEN, palette.CUMULATIVE, palette.MIN_P,
                               palette.TOP_K, palette.RAW, palette.FINAL, palette.ENTROPY, palette.PENALISED,
                               palette.SAMPLED_PREFIX)}  # the last: a sampled prefix's label in the beam tree


@pytest.mark.parametrize("name", ["light", "dark"])
def test_every_figure_is_drawn_in_the_page_theme(figures, name):
    theme = THEMES[name]
    assert len(figures) >= 12
    for fig in figures:
        layout = json.loads(themed(fig, name).to_json())["layout"]
        assert layout["paper_bgcolor"] == layout["plot_bgcolor"] == "rgba(0,0,0,0)"  # the page shows through
        assert set(_inks(layout)) == {theme.ink}, layout.get("title")
        for ann in layout.get("annotations", []):
            assert ann["font"]["color"] == theme.ink or ann["font"]["color"].lower() in PALETTE, ann
        exported = json.loads(themed(fig, name, export=True).to_json())["layout"]
        assert exported["paper_bgcolor"] == theme.page  # a PNG looks like the page it came from


def test_the_page_handlers_draw_in_the_theme_they_are_given(store):
    d = run(store, Request("toy", "speculative", "1 2", {"draft": "toy-small"}, seed=2, max_new_tokens=8)).to_dict()
    slots = ViewSlots.make(VIEW_PLOTS, "pg-view")
    for name in ("light", "dark"):
        updates = slots.step_updates(d, 1, name)
        plots = [updates[slot]["value"] for slot in slots.plots if updates[slot].get("visible")]
        assert plots
        for plot in plots:
            layout = json.loads(plot.plot)["layout"]
            assert layout["font"]["color"] == THEMES[name].ink


def test_titles_wrap_on_a_phone_without_splitting_tags():
    from playground.charts.common import wrap
    assert wrap("Step 0: chose <b>·a</b> · p 0.700", 13) == ["Step 0: chose", "<b>·a</b> · p 0.700"]
    assert wrap("Step 0: chose <b>·a</b> · p 0.700", 12) == ["Step 0:", "chose <b>·a</b> · p", "0.700"]
    assert wrap("short", 40) == ["short"]
    assert wrap("one<br>two three", 5) == ["one", "two", "three"]


def test_a_phone_view_wraps_long_titles_and_keeps_the_theme(figures):
    fig = figures[0]
    wide = themed(fig, "dark:1440")
    narrow = themed(fig, "dark:390")
    assert "<br>" not in (wide.layout.title.text or "")
    assert "<br>" in narrow.layout.title.text and narrow.layout.font.color == THEMES["dark"].ink
    lines = narrow.layout.title.text.count("<br>") + 1
    assert narrow.layout.margin.t >= 34 + 19 * lines  # room above the plot for every title line
    assert narrow.layout.legend.y < 0  # the legend under the plot, not on the wrapped title


def test_on_a_phone_the_distribution_legend_sits_below_its_basis_buttons(store):
    d = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.5}, seed=2, max_new_tokens=4)).to_dict()
    for compact in (False, True):
        fig = step_figures(d, 0, compact)[0]
        below = [m.y for m in fig.layout.updatemenus if m.y is not None and m.y < 0]
        assert below  # the basis buttons sit under the axis
        narrow = themed(fig, "light:390")
        assert narrow.layout.legend.y < min(below) - 0.1 and narrow.layout.margin.b >= 190
        # a compare side's figure already made room: the phone view adds none again
        caption = next(a for a in narrow.layout.annotations if a.name == CAPTION)
        row = CAPTION_ROW * (caption.text.count("<br>") + 1)  # the caption's own row at the foot
        # (and any room its legend under the buttons lacked)
        assert narrow.layout.height >= row + (fig.layout.height if compact else (fig.layout.height or 460) + 80)


def test_a_legend_over_the_plot_gets_the_rows_it_wraps_into_under_the_title():
    """Beam search's legend names wrap into three rows at 1440 px (plotly lines them up in two columns):
    the top margin makes room for all three under the one-line title, and the plot keeps its height."""
    basis = "entered the beam (p adds to the beam score)"
    fig = go.Figure([go.Bar(x=[0], y=[1], name=f"kept · {basis}"), go.Bar(x=[1], y=[0], name=f"cut · {basis}"),
                     go.Scatter(x=[0], y=[1], name=basis), go.Scatter(x=[0], y=[1], name="model p (raw)"),
                     go.Scatter(x=[0], y=[1], name="cumulative")])
    fig.update_layout(template=palette.TEMPLATE, title="Step 2 of 8", height=460, legend=dict(y=1.01))
    assert legend_rows(fig, 744) == 3 and legend_rows(fig, 2000) == 1
    out = themed(fig, "light:1440")
    assert out.layout.margin.t >= TITLE_ROOM + 3 * LEGEND_ROW
    assert out.layout.height - out.layout.margin.t == 460 - 86  # the template's margins: the figure grew with its top margin


def test_the_chosen_word_sits_on_the_page_colour_in_each_theme_and_basis(store):
    """A taller neighbour's bar runs behind the word 'chosen' (on a phone bars are 14 px apart): the word
    gets a patch of the page's colour, in the figure and in the annotations each basis button swaps in."""
    d = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.0, "top_k": 5}, seed=4,
                           max_new_tokens=2)).to_dict()
    fig = step_figures(d, 0)[0]
    for name in ("light", "dark"):
        for view in (name, f"{name}:390"):
            out = themed(fig, view)
            words = [a for a in out.layout.annotations if a.name == "chosen-word"]
            assert len(words) == 1 and words[0].text == "chosen" and words[0].bgcolor == THEMES[name].page, view
            swapped = [a for m in out.layout.updatemenus for b in m.buttons if len(b.args) > 1
                       and isinstance(b.args[1], dict) for a in b.args[1].get("annotations") or ()
                       if (a.get("name") if isinstance(a, dict) else a.name) == "chosen-word"]
            assert swapped and all(a["bgcolor"] == THEMES[name].page for a in swapped), view
