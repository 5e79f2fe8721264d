"""The Sweep panel in a real browser: a tiny temperature sweep on the toy draws its chart, a grid of 13 values
is refused on the panel's status line with the allowed range, and the next sweep runs. Playwright drives
Debian's Chromium; where there is none these skip (and fail under CI=true). A link naming a sweep opens
with the panel set and runs it."""
from __future__ import annotations

import pytest

from playground.ui.components import share_query

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

STATUS_JS = "(pattern) => new RegExp(pattern).test(document.getElementById('pg-sweep-status')?.innerText || '')"
CHART_JS = """() => {
  const gd = document.querySelector('#pg-sweep-plot .js-plotly-plot');
  return gd && gd.data ? gd.data.map((t) => [t.name, (t.x || []).length]) : [];
}"""


def _fill(page, elem_id: str, value: str) -> None:
    page.locator(f"#{elem_id} input[type=number], #{elem_id} textarea, #{elem_id} input").first.fill(value)
    page.keyboard.press("Tab")


def test_a_tiny_sweep_draws_its_chart_and_a_bad_grid_is_refused(page, url):
    page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 0, 6, {}, "greedy", {}))
    page.wait_for_function("() => document.querySelector('#pg-prompt textarea')?.value === '1 2'")
    page.get_by_role("tab", name="What if").click()
    page.get_by_text("Sweep: one knob over its whole range").click()
    _fill(page, "pg-sweep-count", "13")
    page.locator("#pg-sweep-run").click()
    page.wait_for_function(STATUS_JS, arg="Not run", timeout=30_000)
    assert "the grid's values must be an integer in [1, 12], got 13" in page.locator("#pg-sweep-status").inner_text()
    _fill(page, "pg-sweep-count", "3")
    _fill(page, "pg-sweep-n", "8")
    _fill(page, "pg-sweep-tokens", "4")
    page.locator("#pg-sweep-run").click()
    page.wait_for_function(STATUS_JS, arg="done", timeout=120_000)
    assert "3 of 3 values" in page.locator("#pg-sweep-status").inner_text()
    # the status line and the figure come in one update, and plotly draws the figure after it: under load
    # the status read "done" while the plot still held no trace
    page.wait_for_function(f"() => ({CHART_JS})().some(([name]) => name === 'loop rate')", timeout=30_000)
    drawn = dict(page.evaluate(CHART_JS))
    assert drawn["loop rate"] == 3 and drawn["mean surprisal"] == 3 and drawn["mean length"] == 3
    assert "temperature sweep: sampling on toy" in page.locator("#pg-sweep-plot .gtitle").text_content()
    # a click on the second value's point opens its samples under the answer rules
    page.wait_for_function("() => document.querySelector('#pg-sweep-plot .js-plotly-plot')?.dataset.pgSweepHooked",
                           timeout=10_000)
    point = page.locator("#pg-sweep-plot .scatterlayer .trace").first.locator(".points path").nth(1)
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    value = page.evaluate("() => document.querySelector('#pg-sweep-plot .js-plotly-plot').data[0].x[1]")
    page.wait_for_function("(v) => (document.getElementById('pg-rules-table')?.innerText || '').startsWith("
                           "'temperature = ' + v + ':')", arg=f"{value:.4g}", timeout=20_000)
    assert page.locator("#pg-rules-table tr").count() == 9  # a header and its 8 samples


def test_the_panels_stop_ends_a_sweep_after_the_run_in_flight_and_keeps_what_is_done(page, url):
    """Beam's width sweeps one run per seed, so Stop lands between two runs of a value: the value's samples so
    far stand as its point and the sweep ends there."""
    page.goto(url.rstrip("/") + "/" + share_query("toy", "beam", "1 2", "", False, 0, 6, {}, "greedy", {}))
    page.wait_for_function("() => document.querySelector('#pg-prompt textarea')?.value === '1 2'")
    page.get_by_role("tab", name="What if").click()
    page.get_by_text("Sweep: one knob over its whole range").click()
    page.wait_for_function("() => document.querySelector('#pg-sweep-param input')?.value === 'num_beams'")
    _fill(page, "pg-sweep-count", "4")
    _fill(page, "pg-sweep-n", "200")
    page.locator("#pg-sweep-run").click()
    page.wait_for_function("() => /run \\d+ of 200/.test(document.getElementById('pg-sweep-status')?.innerText || '')",
                           timeout=60_000)
    page.locator("#pg-sweep-stop").click()
    page.wait_for_function(STATUS_JS, arg="stopped", timeout=60_000)
    status = page.locator("#pg-sweep-status").inner_text()
    done = int(status.split(" of 4 values")[0].split()[-1])
    assert 1 <= done < 4 and "one run per seed" in status, status
    drawn = dict(page.evaluate(CHART_JS))
    title = page.locator("#pg-sweep-plot .gtitle").text_content()
    assert drawn["loop rate"] == done and f"stopped after {done} of 4 values" in title


def test_a_link_with_a_sweep_opens_on_what_if_with_the_panel_set_and_runs_it(page, url):
    sweep = {"sweep": "top_k", "sweep_grid": "lin:1:3:2", "sweep_n": 3, "sweep_tokens": 2,
             "sweep_extract": "choices:a|the", "sweep_known": "a"}
    page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 0, 2, {}, "greedy", {},
                                                  run="", sweep=sweep))
    page.wait_for_function(STATUS_JS, arg="done", timeout=120_000)
    assert "2 of 2 values · 3 samples each" in page.locator("#pg-sweep-status").inner_text()
    assert page.locator("#pg-sweep-param input").input_value() == "top_k"
    assert page.locator("#pg-sweep-known textarea, #pg-sweep-known input").first.input_value() == "a"
    drawn = dict(page.evaluate(CHART_JS))
    assert drawn["loop rate"] == 2 and "top_k sweep: sampling on toy" in page.locator("#pg-sweep-plot .gtitle").text_content()
    assert page.get_by_role("tab", name="What if").get_attribute("aria-selected") == "true"
    assert page.locator("#pg-sweep-run").is_visible()
