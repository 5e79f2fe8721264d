"""The watermark's views in a real browser: a watermarked toy run shows its running z-score and its green
masses under the text, one point per token, on a desktop page and a phone's, inside the page's width.
Playwright drives Debian's Chromium; where there is none these skip (and fail under CI=true)."""
from __future__ import annotations

import pytest

from playground.ui.components import share_query
from tests.browser import tokens, wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

VIEWS_JS = """() => {
  const out = {};
  for (const gd of document.querySelectorAll('[id^=pg-view-] .js-plotly-plot')) {
    const title = gd.layout?.title?.text || '';
    if (!title.startsWith('Watermark') && !title.startsWith('Where the watermark')) continue;
    const box = gd.getBoundingClientRect();
    out[title.startsWith('Watermark') ? 'z' : 'mass'] = {
      title, points: gd.data[title.startsWith('Watermark') ? 0 : 2].x.length, left: box.left, right: box.right};
  }
  return out;
}"""


@pytest.mark.parametrize("size", [(1500, 1000), (390, 844)], ids=["desktop", "phone"])
def test_a_watermarked_run_shows_its_z_score_and_green_masses(browser, url, size):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    try:
        page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 3, 8,
                                                      {"watermark_delta": 2.0}, "greedy", {}, run="generate"))
        wait_done(page)
        page.wait_for_function(f"() => Object.keys(({VIEWS_JS})()).length === 2", timeout=60_000)
        found = page.evaluate(VIEWS_JS)
        n = len(tokens(page))
        assert found["z"]["points"] == found["mass"]["points"] == n > 0
        assert "δ 2, γ 0.25, lefthash" in found["z"]["title"]
        for view in found.values():
            assert view["left"] >= -1 and view["right"] <= size[0] + 1
    finally:
        page.close()


def test_the_what_if_tab_detects_the_runs_watermark(page, url):
    page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 4, 8,
                                                  {"watermark_delta": 3.0, "watermark_gamma": 0.5}, "greedy", {},
                                                  run="generate"))
    wait_done(page)
    shown_tokens = tokens(page)
    text = "".join(shown_tokens).replace("·", " ").strip()
    page.get_by_role("tab", name="What if").click()
    page.locator("#pg-whatif-text textarea").fill(text)
    page.locator("#pg-whatif-detect").click()
    page.wait_for_function("() => /z = /.test(document.getElementById('pg-whatif-detected')?.innerText || '')",
                           timeout=60_000)
    shown = page.locator("#pg-whatif-detected").inner_text()
    assert "green of" in shown and "0.5 expected without a watermark" in shown and "lefthash" in shown
    assert page.locator("#pg-whatif-detected span").count() == len(shown_tokens)  # one mark a token


def test_a_synthid_run_shows_its_running_scores(page, url):
    page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 2, 10,
                                                  {"synthid_keys": "5,6,7,8"}, "greedy", {}, run="generate"))
    wait_done(page)
    js = """() => { for (const gd of document.querySelectorAll('[id^=pg-view-] .js-plotly-plot')) {
        const t = gd.layout?.title?.text || '';
        if (t.startsWith('SynthID')) return {title: t, points: gd.data.find((d) => d.mode === 'markers').x.length}; }
      return null; }"""
    page.wait_for_function(f"() => ({js})() !== null", timeout=60_000)
    view = page.evaluate(js)
    assert "4 layers, n-gram 5" in view["title"] and view["points"] == len(tokens(page))
