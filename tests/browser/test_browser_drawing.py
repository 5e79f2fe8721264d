"""What the charts draw keeps clear of itself in a real browser, at 1440 px light and dark and on a 390 px
phone: beam search's distribution legend under its title and only the basis buttons a beam run has,
top-H's cut label inside the plot (never over the y axis nor under a button), top-p's line labelled on the
cumulative axis it is read on, the Score view's caption
under its tilted token labels, contrastive decoding's legend clear of its titles, and the waterfall's
panel titles apart. Every check compares the boxes of the SVG text, legend and buttons plotly rendered.
Playwright drives Debian's Chromium; where there is none these skip (and fail under CI=true)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

from playground.ui import share  # noqa: E402
from tests.browser import wait_done  # noqa: E402

VIEWPORTS = {"light": (1440, 1000, "light"), "dark": (1440, 1000, "dark"), "phone": (390, 844, "light")}
SMOL_PROMPT = "Give me a name for a friendly robot."

# the boxes of one plot: its title, legend, in-chart buttons, annotations (subplot titles, line labels, the
# caption), tick labels, plot area and the whole SVG; page coordinates
BOXES_JS = """(id) => {
  const gd = document.querySelector('#' + id + ' .js-plotly-plot');
  const rect = (el) => { const b = el.getBoundingClientRect();
                         return {left: b.left, right: b.right, top: b.top, bottom: b.bottom}; };
  const shown = (el) => { const b = el.getBoundingClientRect(); return b.width > 0 && b.height > 0; };
  const title = gd.querySelector('.gtitle');
  const legend = gd.querySelector('.legend .bg') || gd.querySelector('.legend');
  return {
    title: title && shown(title) ? rect(title) : null,
    legend: legend && shown(legend) ? rect(legend) : null,
    buttons: [...gd.querySelectorAll('.updatemenu-button')].map((b) => ({label: b.textContent, ...rect(b)})),
    annotations: [...gd.querySelectorAll('.annotation')].filter(shown)
      .map((a) => ({text: a.textContent, ...rect(a.querySelector('.annotation-text-g') || a)})),
    xticks: [...gd.querySelectorAll('.xtick text')].filter(shown).map((t) => ({text: t.textContent, ...rect(t)})),
    yticks: [...gd.querySelectorAll('.ytick text')].filter(shown).map(rect),
    y2ticks: [...gd.querySelectorAll('.y2tick text')].filter(shown).map((t) => ({text: t.textContent, ...rect(t)})),
    plot: rect(gd.querySelector('.nsewdrag') || gd.querySelector('.bglayer rect')),
    svg: rect(gd.querySelector('.main-svg')),
  };
}"""


def overlap(a: dict, b: dict, slack: float = 0.5) -> bool:
    """Whether two boxes share more than ``slack`` px both ways."""
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > slack
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > slack)


def boxes_at(browser, url, query: str, plot: str, ready: str, before=None) -> dict:
    """The boxes of ``plot`` in each viewport after opening ``query`` (a share link), once ``ready`` (a
    script) holds; ``before`` drives the page first (the What-if tab's Score)."""
    out = {}
    for where, (width, height, theme) in VIEWPORTS.items():
        pg = browser.new_page(viewport={"width": width, "height": height}, color_scheme=theme)
        try:
            pg.goto(url.rstrip("/") + "/" + query + f"&__theme={theme}")
            if before is None:
                wait_done(pg, timeout_s=300)
            else:
                before(pg)
            pg.wait_for_function(ready, timeout=120_000)
            pg.locator(f"#{plot}").scroll_into_view_if_needed()
            pg.wait_for_timeout(600)  # plotly's last layout pass
            out[where] = pg.evaluate(BOXES_JS, plot)
        finally:
            pg.close()
    return out


def plotted(plot: str) -> str:
    return f"() => document.querySelectorAll('#{plot} .js-plotly-plot .main-svg').length > 0"


# --- beam search's distribution -------------------------------------------------------------------------

BEAM = share.encode(share.Config(model="toy", strategy="beam", prompt="1 2", max_new_tokens=8, run="generate"))


@pytest.fixture(scope="module")
def beam_boxes(browser, url):
    return boxes_at(browser, url, BEAM, "pg-dist", plotted("pg-dist"))


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_beam_distribution_legend_clears_its_title(beam_boxes, where):
    b = beam_boxes[where]
    assert b["title"] and b["legend"]
    assert not overlap(b["title"], b["legend"]), (where, b["title"], b["legend"])
    for button in b["buttons"]:
        assert not overlap(button, b["legend"]), (where, button)


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_beam_distribution_shows_only_the_bases_a_beam_run_has(beam_boxes, where):
    labels = {x["label"] for x in beam_boxes[where]["buttons"]}
    assert not labels & {"entering the cuts", "after the samplers"}, labels
    assert {"model's own", "entered the beam"} <= labels


# --- top-H's cut label ----------------------------------------------------------------------------------

TOP_H = share.encode(share.Config(model="toy", strategy="sampling", prompt="1 2", seed=4, max_new_tokens=8,
                                  params={"top_h": 0.4}, run="generate"))


@pytest.fixture(scope="module")
def top_h_boxes(browser, url):
    return boxes_at(browser, url, TOP_H, "pg-dist", plotted("pg-dist"))


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_top_h_label_sits_inside_the_plot(top_h_boxes, where):
    b = top_h_boxes[where]
    label = next((a for a in b["annotations"] if a["text"].startswith("top-H")), None)
    assert label is not None, [a["text"] for a in b["annotations"]]
    assert label["left"] >= b["plot"]["left"] - 1 and label["right"] <= b["svg"]["right"] + 1, (where, label, b["plot"])
    for tick in b["yticks"]:
        assert not overlap(label, tick), (where, label, tick)
    for button in b["buttons"]:  # readable: no in-chart button over it
        assert not overlap(label, button), (where, label, button)


# --- top-p's line label ---------------------------------------------------------------------------------

TOP_P = share.encode(share.Config(model="toy", strategy="sampling", prompt="1 2", seed=4, max_new_tokens=8,
                                  params={"temperature": 2.0, "top_p": 0.9}, run="generate"))


@pytest.fixture(scope="module")
def top_p_boxes(browser, url):
    return boxes_at(browser, url, TOP_P, "pg-dist", plotted("pg-dist"))


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_top_p_is_labelled_on_the_cumulative_axis_past_the_plot(top_p_boxes, where):
    """Top-p's line is drawn on the right (cumulative) axis and labelled among its ticks, right of the plot,
    never by the left axis, where its 0.9 read as a probability; no other tick label runs into it."""
    b = top_p_boxes[where]
    assert not any(a["text"].startswith("top-p") for a in b["annotations"])
    [label] = [t for t in b["y2ticks"] if t["text"].startswith("top-p")]
    assert label["left"] >= b["plot"]["right"] - 1 and label["right"] <= b["svg"]["right"] + 1, (where, label)
    for tick in b["y2ticks"]:
        assert tick is label or not overlap(label, tick), (where, label, tick)


# --- the Score view's caption ---------------------------------------------------------------------------

SCORE = share.encode(share.Config(model="smollm2-135m", strategy="sampling", prompt=SMOL_PROMPT))
SCORED = "I would call it Sparky, because it is bright and friendly."


def score(pg) -> None:
    pg.wait_for_function("() => document.querySelector('#pg-prompt textarea')?.value.includes('robot')",
                         timeout=60_000)
    pg.get_by_role("tab", name="What if").click()
    pg.locator("#pg-whatif-text textarea").fill(SCORED)
    pg.locator("#pg-whatif-score").click()


@pytest.fixture(scope="module")
def score_boxes(browser, url):
    ready = "() => document.querySelectorAll('#pg-whatif-score-0 .barlayer .point').length > 0"
    return boxes_at(browser, url, SCORE, "pg-whatif-score-0", ready, before=score)


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_score_caption_clears_the_tilted_token_labels(score_boxes, where):
    b = score_boxes[where]
    caption = next(a for a in b["annotations"] if "in tokens" in a["text"])
    assert b["xticks"]
    lowest = max(t["bottom"] for t in b["xticks"])
    assert caption["top"] >= lowest, (where, caption, lowest)
    assert caption["bottom"] <= b["svg"]["bottom"] + 1


# --- contrastive decoding's step chart ------------------------------------------------------------------

CONTRASTIVE = share.encode(share.Config(model="toy", strategy="contrastive", prompt="1 2", max_new_tokens=8,
                                        params={"amateur": "toy-small"}, run="generate"))


@pytest.fixture(scope="module")
def contrastive_boxes(browser, url):
    return boxes_at(browser, url, CONTRASTIVE, "pg-view-0", plotted("pg-view-0"))


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_contrastive_titles_clear_the_legend(contrastive_boxes, where):
    b = contrastive_boxes[where]
    assert b["title"] and b["legend"]
    assert not overlap(b["title"], b["legend"]), (where, b["title"], b["legend"])
    # a title wrapped on a phone reads without the space at its break
    panel_titles = [a for a in b["annotations"] if a["text"].replace(" ", "") in ("expertvsamateurlog-probability",
                                                                                  "contrastivescore")]
    assert len(panel_titles) == 2
    for t in panel_titles:
        assert not overlap(t, b["legend"]), (where, t, b["legend"])


# --- the waterfall's panel titles on a phone ------------------------------------------------------------

ADAPTIVE = share.encode(share.Config(model="smollm2-135m", strategy="sampling", prompt=SMOL_PROMPT, seed=1,
                                     max_new_tokens=6, params={"min_p": 0.02, "adaptive_p_target": 0.3},
                                     run="generate"))


@pytest.fixture(scope="module")
def waterfall_boxes(browser, url):
    return boxes_at(browser, url, ADAPTIVE, "pg-waterfall", plotted("pg-waterfall"))


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_waterfall_panel_titles_stay_apart(waterfall_boxes, where):
    b = waterfall_boxes[where]
    titles = [a for a in b["annotations"] if a["text"][:2] in ("1.", "2.", "3.")]
    assert len(titles) == 3 and any("aims at p" in t["text"] for t in titles), [a["text"] for a in b["annotations"]]
    for i, a in enumerate(titles):
        assert a["left"] >= b["svg"]["left"] - 1 and a["right"] <= b["svg"]["right"] + 1, (where, a)
        for other in titles[i + 1:]:
            assert not overlap(a, other), (where, a, other)
