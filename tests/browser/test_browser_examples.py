"""The examples row in a real browser: a chip per family of the registry, and the chips of beam search and
the logit lens run to their phenomenon (beam's text beside greedy's, another text; the lens read after
the run and drawn under its button). Playwright drives Debian's Chromium; where there is none these skip
(and fail under CI=true)."""
from __future__ import annotations

import pytest

from playground.ui.examples import examples
from strategies.registry import REGISTRY
from tests.browser import tokens, wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

LENS_PLOT_JS = """() => {
  const gd = document.querySelector('#pg-lens-plot .js-plotly-plot');
  if (!gd || gd.getBoundingClientRect().width === 0) return null;
  const button = document.getElementById('pg-lens').getBoundingClientRect();
  return {title: gd.layout?.title?.text || '', gap: gd.getBoundingClientRect().top - button.bottom};
}"""


def click_example(page, label: str) -> None:
    page.get_by_role("button", name=label, exact=True).click()
    page.wait_for_function("(label) => (document.getElementById('pg-example-note')?.innerText || '').includes(label)",
                           arg=label, timeout=30_000)


def test_each_family_has_a_chip_and_the_beam_chip_writes_another_text_than_greedy(page, url):
    page.goto(url)
    page.locator("#pg-examples button").first.wait_for()
    shown = page.locator("#pg-examples button").all_inner_texts()
    for family in ("beam", "contrastive", "speculative"):
        assert any(REGISTRY[ex.config.strategy].family == family and ex.label in shown for ex in examples()), family
    beam = next(ex for ex in examples() if ex.config.strategy == "beam")
    click_example(page, beam.label)
    page.wait_for_timeout(500)
    wait_done(page, "pg-status-a")
    wait_done(page, "pg-status-b")
    a, b = "".join(tokens(page, "pg-text-a")), "".join(tokens(page, "pg-text-b"))
    assert a != b and "lived" in a, (a, b)  # beam's 'a time there lived happily ever', greedy's 'upon ...'


@pytest.mark.slow  # Gemma 3's first use in the server's process: a load, a run and the lens, about a minute
def test_the_lens_chip_reads_its_run_and_draws_the_lens_under_its_button(page, url):
    page.goto(url)
    lens = next(ex for ex in examples() if "lens" in ex.then)
    click_example(page, lens.label)
    page.wait_for_function(f"() => ({LENS_PLOT_JS})() !== null", timeout=240_000)
    drawn = page.evaluate(LENS_PLOT_JS)
    assert drawn["title"].startswith("Logit lens at step 0") and "Paris" in drawn["title"], drawn
    assert 0 <= drawn["gap"] <= 60, drawn
    # the flag is spent: the next Generate is a plain run, its lens not read
    page.locator("#pg-generate").click()
    page.wait_for_function(f"() => ({LENS_PLOT_JS})() === null", timeout=60_000)
    wait_done(page)
    page.wait_for_timeout(1500)
    assert page.evaluate(LENS_PLOT_JS) is None


def test_the_lockstep_chip_reads_its_text_and_brings_the_chart_into_view(page, url):
    """The lockstep sits at the What-if tab's foot: the chip opens it, reads its text and scrolls there."""
    page.goto(url)
    pair = next(ex for ex in examples() if ex.config.pair_a)
    click_example(page, pair.label)
    page.wait_for_function("() => ((document.querySelector('#pg-pair-plot .js-plotly-plot')?.layout?.title?.text)"
                           " || '').startsWith('A smollm2')", timeout=180_000)
    page.wait_for_timeout(500)
    box = page.locator("#pg-pair-run").bounding_box()
    assert box is not None and 0 <= box["y"] <= 1000 - box["height"], box  # the button on screen
    plot = page.locator("#pg-pair-plot").bounding_box()
    assert plot is not None and plot["y"] < 1000, plot  # its chart starts on screen under it


TOOLBAR_JS = """(id) => {
  const gd = document.querySelector(`#${id} .js-plotly-plot`);
  const bar = gd.querySelector('.modebar-container .modebar').getBoundingClientRect();
  const title = gd.querySelector('.gtitle').getBoundingClientRect();
  return {bar: {left: bar.left, right: bar.right, top: bar.top, bottom: bar.bottom, width: bar.width},
          title: {left: title.left, right: title.right, top: title.top, bottom: title.bottom}};
}"""


def test_the_toolbar_shown_on_hover_leaves_a_compare_sides_chart_title_clear(page, url):
    """On a Compare side (half the page) the beam chip's charts keep their titles readable under the
    pointer: plotly's toolbar keeps two buttons (camera, reset), not nine over the title's end."""
    page.goto(url)
    beam = next(ex for ex in examples() if ex.config.strategy == "beam")
    click_example(page, beam.label)
    page.wait_for_timeout(500)
    wait_done(page, "pg-status-a")
    wait_done(page, "pg-status-b")
    for chart in ("pg-overview-a", "pg-dist-a", "pg-overview-b"):
        # read once the chart is drawn: in a cold run beside other tests one had no title yet when read
        page.wait_for_function("(id) => !!document.querySelector(`#${id} .js-plotly-plot .gtitle`)", arg=chart,
                               timeout=30_000)
        page.locator(f"#{chart}").scroll_into_view_if_needed()
        page.locator(f"#{chart}").hover()
        page.wait_for_timeout(300)
        page.wait_for_function("(id) => !!document.querySelector(`#${id} .js-plotly-plot .gtitle`)"
                               " && !!document.querySelector(`#${id} .modebar`)", arg=chart, timeout=30_000)
        box = page.evaluate(TOOLBAR_JS, chart)
        bar, title = box["bar"], box["title"]
        assert bar["width"] > 0  # shown: the camera is still there
        apart = bar["left"] >= title["right"] or bar["bottom"] <= title["top"] or bar["top"] >= title["bottom"]
        assert apart, (chart, box)


CLEAR_JS = """() => [...document.querySelectorAll('[id^=pg-view-a-] .js-plotly-plot, [id^=pg-view-b-] .js-plotly-plot')]
  .filter((gd) => gd.getBoundingClientRect().width > 0).map((gd) => {
    const svg = gd.querySelector('.main-svg').getBoundingClientRect();
    const texts = [...gd.querySelectorAll('.annotation, .gtitle')].map((el) => el.getBoundingClientRect());
    return {title: gd.layout?.title?.text || '', right: svg.right, widest: Math.max(...texts.map((r) => r.right))};
  })"""


def test_a_compare_sides_views_keep_their_titles_and_captions_inside_the_column(page, url):
    """The beam chip's Compare sides: the beam tree, its fates and the entropy map are drawn for the half
    column they sit in (their captions and titles wrap there, not cut at its right edge)."""
    page.goto(url)
    beam = next(ex for ex in examples() if ex.config.strategy == "beam")
    click_example(page, beam.label)
    page.wait_for_timeout(500)
    wait_done(page, "pg-status-a")
    wait_done(page, "pg-status-b")
    page.wait_for_timeout(1000)
    views = page.evaluate(CLEAR_JS)
    assert len(views) >= 3, views  # the tree and its fates on A, the entropy map on B at least
    for view in views:
        assert view["widest"] <= view["right"] + 1, view


CHOSEN_JS = """(id) => {
  const gd = document.querySelector(`#${id} .js-plotly-plot`);
  const word = [...gd.querySelectorAll('.annotation')].find((a) => a.textContent.trim() === 'chosen');
  const plot = gd.querySelector('.bglayer rect, .cartesianlayer .plot').getBoundingClientRect();
  return word && {left: word.getBoundingClientRect().left, plot: plot.left};
}"""


def test_the_chosen_word_over_the_first_bar_stays_right_of_the_y_axis(page, url):
    """Greedy's side of the beam chip chose its first bar: 'chosen' starts at its arrow, clear of the y axis's
    labels (centred, half of it ran over them)."""
    page.goto(url)
    beam = next(ex for ex in examples() if ex.config.strategy == "beam")
    click_example(page, beam.label)
    page.wait_for_timeout(500)
    wait_done(page, "pg-status-b")
    page.wait_for_function(f"(id) => !!document.querySelector(`#${{id}} .js-plotly-plot`) && !!({CHOSEN_JS})(id)",
                           arg="pg-dist-b", timeout=30_000)  # the chart drawn, a busy machine or not
    word = page.evaluate(CHOSEN_JS, "pg-dist-b")
    assert word is not None and word["left"] >= word["plot"], word


def test_no_blank_band_between_the_distribution_and_the_chain(page, url):
    """A sampling chip's run: the note under the distribution says nothing (a bar click branches) and takes
    no room, so the chain follows the distribution at the column's gap (the empty note was a 20 px band)."""
    page.goto(url)
    sampling = next(ex for ex in examples() if ex.config.strategy == "sampling" and ex.config.model == "toy"
                    and ex.config.run == "generate" and not ex.config.grammar_kind)
    click_example(page, sampling.label)
    page.wait_for_timeout(500)
    wait_done(page)
    gap = page.evaluate("() => document.getElementById('pg-waterfall').getBoundingClientRect().top"
                        " - document.getElementById('pg-dist').getBoundingClientRect().bottom")
    assert 0 <= gap <= 20, gap


def test_the_answer_rules_chip_opens_what_if_and_shows_the_rules_disagree(page, url):
    """The rules chip sets the sidebar (toy-think, T 3) and the rules' draw and checker, then picks the answers:
    majority vote 6, the confidence rules 9, with the button and the table on screen."""
    page.goto(url)
    rules = next(ex for ex in examples() if "rules" in ex.then)
    click_example(page, rules.label)
    page.wait_for_function("() => /The rules disagree/.test(document.getElementById('pg-rules-table')?.innerText || '')",
                           timeout=120_000)
    head = page.locator("#pg-rules-table").inner_text().split("\n")[0]
    assert "6 by majority vote" in head and "9 by highest mean logprob, DeepConf, CoT-decoding" in head, head
    box = page.locator("#pg-rules-run").bounding_box()  # brought to the screen's top (to a pixel's fraction)
    assert box is not None and -1 <= box["y"] <= 1000 - box["height"], box


def test_the_score_chip_scores_and_detects_and_the_branch_chip_shows_both_runs(page, url):
    """The score chip opens What if, scores its text (tokens drawn, the button on screen) and detects the
    watermark: z 6.20. The branch chip runs greedy, then its branch: the Branches panel lists both."""
    page.goto(url)
    scored = next(ex for ex in examples() if ex.config.score_text)
    click_example(page, scored.label)
    page.wait_for_function("() => (document.getElementById('pg-whatif-detected')?.innerText || '').includes('6.20')",
                           timeout=120_000)
    page.wait_for_function("() => document.querySelectorAll('#pg-whatif-tokens .pg-tok').length >= 80",
                           timeout=60_000)
    box = page.locator("#pg-whatif-score").bounding_box()
    assert box is not None and 0 <= box["y"] <= 1000 - box["height"], box
    branch = next(ex for ex in examples() if ex.config.branch)
    click_example(page, branch.label)
    page.wait_for_function("() => (document.getElementById('pg-branch-tree')?.innerText || '').includes('step 0 →')",
                           timeout=60_000)
    wait_done(page)
    assert "".join(tokens(page, "pg-text")).startswith(" the hill rose high")
