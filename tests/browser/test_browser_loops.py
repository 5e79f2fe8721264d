"""Loops and the watch-list in a real browser: a toy run restored from a share link (greedy on "1 2" with " a"
forced at step 2, so the toy writes " a time" twice: a loop of period 2 found at step 3, where loop_stop ends the
run) shows the loops view, the loop's tokens marked in the text, the status line's words for the stop, the
watch-list view with one line per watched token and the watched tokens' labels coloured in the distribution,
on a desktop page (light and dark) and a phone's, inside the page's width. Playwright drives Debian's Chromium;
where there is none these skip (and fail under CI=true)."""
from __future__ import annotations

import pytest

from playground.ui.components import share_query
from tests.browser import status, wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

WATCH = "a, time, there"
PARAMS = {"loop_repeats": 2, "loop_stop": True, "watch": WATCH}

VIEWS_JS = """() => {
  const out = {};
  for (const gd of document.querySelectorAll('[id^=pg-view-] .js-plotly-plot')) {
    const title = gd.layout?.title?.text || '';
    const box = gd.getBoundingClientRect();
    const texts = [...gd.querySelectorAll('.annotation-text-g')].map((a) => a.getBoundingClientRect().right);
    const where = {title, left: box.left, right: box.right, written: Math.max(box.left, ...texts)};
    if (title.startsWith('Loop')) {
      const bands = gd.data.filter((t) => t.type === 'bar');
      out.loops = {...where, copies: bands.map((t) => t.x.length),
                   found: Array.from(gd.data.find((t) => t.type === 'scatter').x)};
    } else if (title.startsWith('Watch-list')) {
      const solid = gd.data.filter((t) => t.mode === 'lines+markers');
      out.watch = {...where, names: solid.map((t) => t.name), points: solid.map((t) => t.x.length),
                   dashed: gd.data.filter((t) => t.line?.dash === 'dash').length};
    }
  }
  return out;
}"""

MARKS_JS = """() => Array.from(document.querySelectorAll('#pg-text .pg-tok.pg-loop')).map((el) => ({
  step: el.dataset.step, copy: el.classList.contains('pg-loop-copy'), shadow: getComputedStyle(el).boxShadow}))"""

TICKS_JS = """() => [...document.querySelectorAll('#pg-dist .xtick tspan')]
  .filter((t) => (t.getAttribute('style') || '').includes('fill')).map((t) => t.textContent)"""


@pytest.mark.parametrize("size, theme", [((1500, 1000), ""), ((1500, 1000), "dark"), ((390, 844), "")],
                         ids=["desktop", "desktop-dark", "phone"])
def test_a_looping_run_shows_its_loop_and_its_watch_list(browser, url, toy, size, theme):
    a = toy.tokenizer("a", add_special_tokens=False)["input_ids"][0]
    query = share_query("toy", "greedy", "1 2", "", False, 0, 12, PARAMS, "greedy", {}, run="generate",
                        forced=f"2:{a}")
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    try:
        page.goto(url.rstrip("/") + "/" + query + (f"&__theme={theme}" if theme else ""))
        wait_done(page)
        assert "stopped: a loop of 2 tokens × 2 at step 3" in status(page)
        page.wait_for_function(f"() => Object.keys(({VIEWS_JS})()).length === 2", timeout=60_000)
        found = page.evaluate(VIEWS_JS)
        assert found["loops"]["copies"] == [2] and found["loops"]["found"] == [3]
        assert found["loops"]["title"].replace("<br>", " ") == "Loop: «a time» (period 2) ×2 · it stopped the run"
        assert found["watch"]["names"] == ["·a", "·time", "·there"]  # one line per watched token
        assert found["watch"]["points"] == [4, 4, 4] and found["watch"]["dashed"] == 3
        for view in found.values():
            assert view["left"] >= -1 and view["right"] <= size[0] + 1
            assert view["written"] <= view["right"] + 1  # the caption stays inside its chart
        coloured = page.evaluate(TICKS_JS)  # the toy's 16 tokens all have a bar: every watched one is there
        assert sorted(coloured) == sorted(["·a", "·time", "·there"])
        marks = page.evaluate(MARKS_JS)
        assert [m["step"] for m in marks] == ["0", "1", "2", "3"]
        assert [m["copy"] for m in marks] == [True, False, True, False]
        teal = "rgb(45, 212, 191)" if theme == "dark" else "rgb(13, 148, 136)"
        assert all(teal in m["shadow"] for m in marks)
    finally:
        page.close()
