"""The page in a real browser (Playwright driving Debian's Chromium), used the way a person would.

Where no browser can be had these tests skip with the reason; under CI=true they fail instead.
They also print the time from a click on Generate to the first streamed token and to the final
chart, on toy and on SmolLM2 (warm), and check that Stop ends a run between two steps.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from playground.engine import Request, run
from playground.models import MAX_NEW_TOKENS
from playground.ui.components import share_query
from playground.ui.examples import examples
from tests.browser import bar_count, pick, status, tokens, wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


def timed_generate(page, timeout_s: float = 180) -> tuple[float, float]:
    """Click Generate; seconds to the first token on screen and to the final chart."""
    before = status(page)
    page.locator("#pg-generate").click()
    started = time.perf_counter()
    # the previous run's text stays until the first new token replaces it: watch the status change too
    page.wait_for_function("(old) => document.getElementById('pg-status').innerText !== old "
                           "&& document.querySelectorAll('#pg-text .pg-tok').length > 0",
                           arg=before, timeout=timeout_s * 1000, polling=20)
    first = time.perf_counter() - started
    wait_done(page, timeout_s=timeout_s)
    page.wait_for_function("() => document.querySelectorAll('#pg-dist .barlayer .point path').length > 0",
                           timeout=10_000, polling=20)
    return first, time.perf_counter() - started


def test_pick_strategy_move_slider_generate_and_share(browser, page, url, store):
    page.goto(url)
    pick(page, "Model", re.compile(r"^toy · "))
    pick(page, "Strategy", "gumbel")
    from playwright.sync_api import expect

    # the controls the strategy reads, and only those (one control per parameter, shared by the strategies)
    expect(page.locator("#pg-p-temperature")).to_be_visible()
    expect(page.locator("#pg-p-num_beams")).to_be_hidden()
    page.locator("#pg-p-temperature input[type=range]").fill("1.5")
    assert page.locator("#pg-p-temperature input[type=number]").input_value() == "1.5"
    page.locator("#pg-prompt textarea").fill("1 2")
    page.locator("#pg-seed input").fill("4")
    page.locator("#pg-max-new input[type=number]").fill("12")
    page.locator("#pg-max-new input[type=number]").press("Tab")

    timed_generate(page)  # warm-up: the first run also pays for the first plotly layout
    first, final = timed_generate(page)
    print(f"\n[timing] toy: click -> first token {first:.2f} s, click -> final chart {final:.2f} s")

    ref = run(store, Request("toy", "gumbel", "1 2", {"temperature": 1.5}, seed=4, max_new_tokens=12))
    shown = tokens(page)
    assert shown == [t.text for t in ref.tokens]  # the page shows exactly the seeded run's tokens
    assert bar_count(page) > 0 and bar_count(page, "pg-overview-main") == len(ref.tokens)
    assert "gumbel" in status(page) and "seed 4" in status(page)

    # clicking a token selects its step in the charts below
    page.locator("#pg-text .pg-tok").nth(1).click()
    page.wait_for_function("() => /^Step 1( of \\d+)?( · [^:]*)?:/.test(document.querySelector('#pg-dist .gtitle')?.textContent || '')",
                           timeout=20_000)
    assert page.locator("#pg-step input[type=number]").input_value() == "1"
    # ... and so does clicking a bar of the overview chart (plotly_click, forwarded by assets/playground.js)
    page.wait_for_function("() => document.querySelector('#pg-overview-main .js-plotly-plot')?.dataset.pgHooked",
                           timeout=10_000)
    bar = page.locator("#pg-overview-main .barlayer .point path").nth(3)
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] - 3)
    page.wait_for_function("() => /^Step 3( of \\d+)?( · [^:]*)?:/.test(document.querySelector('#pg-dist .gtitle')?.textContent || '')",
                           timeout=20_000)
    assert page.locator("#pg-text .pg-tok.pg-sel").get_attribute("data-step") == "3"

    page.locator("#pg-copy-link").click()
    link_box = page.locator("#pg-link textarea, #pg-link input").first
    page.wait_for_function("() => /^http/.test((document.querySelector('#pg-link textarea') || "
                           "document.querySelector('#pg-link input'))?.value || '')", timeout=20_000)
    link = link_box.input_value()
    assert "strategy=gumbel" in link and "p.temperature=1.5" in link and "run=generate" in link

    shared = browser.new_page(viewport={"width": 1500, "height": 1000})
    shared.goto(link)
    wait_done(shared)  # run=generate: the link reproduces the run
    assert shared.get_by_role("combobox", name="Model").input_value().startswith("toy")
    assert shared.get_by_role("combobox", name="Strategy").input_value() == "gumbel"
    expect(shared.locator("#pg-p-temperature")).to_be_visible()
    assert shared.locator("#pg-p-temperature input[type=number]").input_value() == "1.5"
    assert shared.locator("#pg-prompt textarea").input_value() == "1 2"
    assert shared.locator("#pg-seed input").input_value() == "4"
    assert shared.locator("#pg-max-new input[type=number]").input_value() == "12"
    assert tokens(shared) == shown  # seeded: the same output
    ARTIFACTS.mkdir(exist_ok=True)
    shared.screenshot(path=str(ARTIFACTS / "browser-shared-link.png"), full_page=True)
    shared.close()


def test_smollm2_timing_and_stop(page, url, store):
    store.get("smollm2-135m")  # warm: the model is loaded before the clicks are timed
    query = share_query("smollm2-135m", "sampling", "Name three colours of the sea.", "", True, 1, 16,
                        {"temperature": 0.8, "top_p": 0.9}, "greedy", {}, run="")
    page.goto(url.rstrip("/") + "/" + query)
    page.wait_for_function("() => document.querySelector('#pg-prompt textarea')?.value.startsWith('Name')")
    timed_generate(page)  # warm-up: first forward passes and the first plotly layout
    first, final = timed_generate(page)
    n = len(tokens(page))
    print(f"\n[timing] smollm2-135m (warm): click -> first token {first:.2f} s, "
          f"click -> final chart {final:.2f} s ({n} tokens)")
    assert n > 0 and bar_count(page) > 0

    # Stop lands between two steps: no token arrives after the one being computed when it was clicked
    page.locator("#pg-prompt textarea").fill("Write a long story about a dragon and a lighthouse.")
    page.locator("#pg-max-new input[type=number]").fill(str(MAX_NEW_TOKENS))  # longer than the wait below
    page.locator("#pg-max-new input[type=number]").press("Tab")
    page.locator("#pg-generate").click()
    page.wait_for_function("() => /generating/.test(document.getElementById('pg-status').innerText) && "
                           "document.querySelectorAll('#pg-text .pg-tok').length >= 3", timeout=120_000, polling=20)
    t_a, n_a = time.perf_counter(), len(tokens(page))
    page.wait_for_function(f"() => document.querySelectorAll('#pg-text .pg-tok').length >= {n_a + 2}",
                           timeout=120_000, polling=20)
    per_token = (time.perf_counter() - t_a) / max(1, len(tokens(page)) - n_a)
    page.locator("#pg-stop").click()
    stopped_at = time.perf_counter()
    counts = []
    while time.perf_counter() - stopped_at < max(3.0, 4 * per_token):
        counts.append((time.perf_counter() - stopped_at, len(tokens(page))))
        page.wait_for_timeout(50)
    last_change = max((t for (t, c), (_, prev) in zip(counts[1:], counts) if c != prev), default=0.0)
    print(f"[timing] stop: last token {last_change:.2f} s after the click (one step takes {per_token:.2f} s)")
    # How soon the page stops drawing is a speed on a shared machine, printed above, not asserted (the
    # server's stop after the step in flight is timed in tests/browser/test_browser_stop.py). Asserted: the run
    # stopped short of its length, and the page ends on the stopped run's own tokens.
    wait_done(page, timeout_s=30)
    stopped = re.search(r"stopped at step (\d+)", status(page))
    assert stopped, status(page)
    assert len(tokens(page)) == int(stopped.group(1)) + 1 < MAX_NEW_TOKENS
    # and the app is ready for the next run
    page.get_by_role("button", name="Toy 70/30 · greedy").click()
    page.wait_for_function("() => /toy/.test(document.getElementById('pg-status').innerText) && "
                           "/finished|reached max/.test(document.getElementById('pg-status').innerText)",
                           timeout=60_000)
    ref = run(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=12))
    assert tokens(page) == [t.text for t in ref.tokens]


def test_stop_on_compare_ends_both_sides(page, url, store):
    store.get("smollm2-135m")
    query = share_query("smollm2-135m", "sampling", "Write a long story about a dragon and a lighthouse.", "",
                        True, 1, 200, {"temperature": 0.8}, "greedy", {}, run="")
    page.goto(url.rstrip("/") + "/" + query)
    page.wait_for_function("() => document.querySelector('#pg-prompt textarea')?.value.startsWith('Write')")
    page.get_by_role("tab", name="Compare").click()
    page.locator("#pg-compare-run").click()
    page.wait_for_function("() => document.querySelectorAll('#pg-text-a .pg-tok').length >= 3 && "
                           "document.querySelectorAll('#pg-text-b .pg-tok').length >= 3", timeout=120_000, polling=20)
    page.locator("#pg-stop").click()
    clicked = time.perf_counter()
    for sid in ("pg-status-a", "pg-status-b"):
        page.wait_for_function("(id) => /stopped/.test(document.getElementById(id)?.innerText || '')", arg=sid,
                               timeout=10_000, polling=20)
    settled = time.perf_counter() - clicked
    print(f"\n[timing] compare stop: both sides say stopped {settled:.2f} s after the click")
    assert settled < 5.0  # about a second on an idle machine; the bound leaves room for a loaded one
    n_a, n_b = len(tokens(page, "pg-text-a")), len(tokens(page, "pg-text-b"))
    assert 3 <= n_a < 200 and 3 <= n_b < 200
    page.wait_for_timeout(1000)
    assert (len(tokens(page, "pg-text-a")), len(tokens(page, "pg-text-b"))) == (n_a, n_b)  # nothing after Stop
    # both sides are drawn at their last step: Stop's chain says "stopped" first, then redraws the charts,
    # which on a loaded machine can take longer than the second above
    page.wait_for_function("() => ['pg-dist-a', 'pg-dist-b'].every("
                           "(id) => document.querySelectorAll(`#${id} .barlayer .point path`).length > 0)",
                           timeout=30_000, polling=100)
    print(f"[timing] compare stop: both sides drawn {time.perf_counter() - clicked:.2f} s after the click")
    assert (len(tokens(page, "pg-text-a")), len(tokens(page, "pg-text-b"))) == (n_a, n_b)


def test_speculative_round_detail_follows_the_selected_step(page, url, store):
    params = {"draft": "toy-small", "gamma": 2}
    ref = run(store, Request("toy", "speculative", "1 2", params, seed=5, max_new_tokens=12)).to_dict()
    rounds = [s["speculative"]["round"] for s in ref["steps"]]
    assert len(set(rounds)) >= 3  # the case needs several rounds
    query = share_query("toy", "speculative", "1 2", "", False, 5, 12, params, "greedy", {}, run="generate")
    page.goto(url.rstrip("/") + "/" + query)
    wait_done(page)
    title = "() => document.querySelector('#pg-view-0 .gtitle')?.textContent || ''"
    for k in (len(rounds) - 1, 0, rounds.index(rounds[-1]) - 1):
        page.locator("#pg-text .pg-tok").nth(k).click()
        page.wait_for_function(f"() => ({title})().startsWith('round {rounds[k]}:')", timeout=20_000)
        page.wait_for_function(f"() => document.querySelector('#pg-step input[type=number]').value === '{k}'")


def test_an_examples_note_stays_with_its_run_and_goes_with_the_next_other_run(page, url):
    """The note under the examples says what the example's run shows: the example run again keeps it,
    a run of other settings (here another seed) clears it, so it never describes an unrelated run."""
    example = next(ex for ex in examples() if ex.config.model == "toy" and ex.config.strategy == "sampling"
                   and ex.config.run == "generate" and not ex.config.grammar_kind)
    note = page.locator("#pg-example-note")
    page.goto(url)
    page.get_by_role("button", name=example.label, exact=True).click()
    page.wait_for_function("(label) => (document.getElementById('pg-example-note')?.innerText || '').includes(label)",
                           arg=example.label, timeout=30_000)
    wait_done(page)
    page.locator("#pg-copy-link").click()  # the link box shows; any run's start hides it
    page.locator("#pg-link").wait_for(state="visible")
    page.locator("#pg-generate").click()  # the example's own settings, run again
    page.locator("#pg-link").wait_for(state="hidden")
    page.wait_for_timeout(1000)
    wait_done(page)
    assert example.label in note.inner_text()
    page.locator("#pg-seed input").fill(str(example.config.seed + 1))
    page.locator("#pg-generate").click()
    page.wait_for_function("() => !(document.getElementById('pg-example-note')?.innerText || '').trim()",
                           timeout=30_000)
    wait_done(page)
    assert not note.inner_text().strip()
