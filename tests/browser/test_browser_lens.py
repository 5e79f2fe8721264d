"""The logit lens in a real browser: a run's step read at every layer by the button under the step
slider, drawn right under that button (where the person who clicked is looking, not with the strategy's
views under the text, some 1,000 px above) with the layers the model has and the chosen token's rank per
layer, on a desktop page and a phone's; a new run takes it away. Playwright drives Debian's Chromium; where there
is none these skip (and fail under CI=true)."""
from __future__ import annotations

import pytest

from playground.ui.components import share_query
from tests.browser import wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

LENS_JS = """() => {
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const title = gd.layout?.title?.text || '';
    const box = gd.getBoundingClientRect();
    if (!title.startsWith('Logit lens') || box.width === 0) continue;  // a hidden slot keeps its last figure
    const heat = gd.data.find((t) => t.type === 'heatmap');
    const rank = gd.data.find((t) => t.type === 'scatter');
    const button = document.getElementById('pg-lens').getBoundingClientRect();
    return {title, rows: heat.y.length, ranks: Array.from(rank.x), width: box.width, right: box.right,
            under: !!gd.closest('#pg-lens-plot'), gap: box.top - button.bottom};
  }
  return null;
}"""


@pytest.mark.parametrize("size", [(1500, 1000), (390, 844)], ids=["desktop", "phone"])
def test_the_lens_button_draws_every_layer_of_the_shown_step(browser, url, store, size):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    try:
        page.goto(url.rstrip("/") + "/" + share_query("toy", "greedy", "1 2", "", False, 0, 5, {}, "greedy", {},
                                                      run="generate"))
        wait_done(page)
        assert page.evaluate(LENS_JS) is None  # not read until asked
        page.locator("#pg-text .pg-tok").nth(2).click()
        page.wait_for_function("() => document.querySelector('#pg-step input[type=number]').value === '2'")
        button = page.locator("#pg-lens")
        button.scroll_into_view_if_needed()
        box = button.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= size[0]  # on the screen
        button.click()
        page.wait_for_function(f"() => ({LENS_JS})() !== null", timeout=60_000)
        lens = page.evaluate(LENS_JS)
        assert lens["title"].startswith("Logit lens at step 2")
        assert lens["rows"] == store.get("toy").num_layers + 1 == len(lens["ranks"])
        assert lens["ranks"][-1] == 1  # greedy: the last layer ranks its own choice first
        assert lens["right"] <= size[0] + 1  # the chart stays on the page
        # drawn under the button that asked for it, once: not in the strategy's view slots above the charts
        assert lens["under"] and 0 <= lens["gap"] <= 60, lens
        assert page.locator("[id^=pg-view-] .js-plotly-plot").evaluate_all(
            "(gds) => gds.filter((gd) => (gd.layout?.title?.text || '').startsWith('Logit lens')"
            " && gd.getBoundingClientRect().width > 0).length") == 0
        # the next run is another text: the lens of the last one goes
        page.locator("#pg-generate").click()
        page.wait_for_function(f"() => ({LENS_JS})() === null", timeout=60_000)
    finally:
        page.close()
