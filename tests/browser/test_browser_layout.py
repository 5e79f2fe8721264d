"""The page's layout in a real browser (Playwright driving Debian's Chromium) at 1440x1000 in light and dark
mode and at 390x844: Seed within the sidebar's first screen, the advanced group folded and counting its
stages, a beam run's own view above the branches panel with the note that it does not branch, and the
slides view giving one chart most of the width and hiding every other strategy view slot.

Where no browser can be had these tests skip with the reason; under CI=true they fail instead.
"""
from __future__ import annotations

import re
from contextlib import contextmanager

import pytest

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

MODES = {"light": ((1440, 1000), ""), "dark": ((1440, 1000), "?__theme=dark"), "phone": ((390, 844), "")}


@contextmanager
def opened(browser, url, mode: str):
    """A page at ``mode``'s viewport and theme, closed afterwards."""
    (width, height), query = MODES[mode]
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        page.goto(url + query)
        yield page
    finally:
        page.close()


def pick(page, label: str, option: str | re.Pattern) -> None:
    page.get_by_role("combobox", name=label).click()
    page.get_by_role("option", name=option, exact=isinstance(option, str)).click()


def box(page, selector: str) -> dict:
    """The element's box in page coordinates (scrolling moves none of them)."""
    b = page.locator(selector).first.bounding_box()
    assert b is not None, f"{selector} is not shown"
    return dict(b, y=b["y"] + page.evaluate("() => window.scrollY"))


def wait_done(page, timeout_s: float = 120) -> None:
    page.wait_for_function(
        "() => /finished|reached max|stopped/.test(document.getElementById('pg-status')?.innerText || '')",
        timeout=timeout_s * 1000, polling=50)


@pytest.mark.parametrize("mode", list(MODES))
def test_layout_seed_first_beam_view_above_branches_and_slides(browser, url, mode):
    (width, height), _ = MODES[mode]
    with opened(browser, url, mode) as page:
        page.wait_for_selector("#pg-seed input")
        # Seed and Max new tokens are within the first screen of the sidebar, before the strategy's settings
        sidebar, seed, max_new = box(page, "#pg-sidebar"), box(page, "#pg-seed"), box(page, "#pg-max-new")
        assert seed["y"] - sidebar["y"] < height * 0.5 and max_new["y"] + max_new["height"] - sidebar["y"] < height
        if mode == "phone":  # the strategy's parameters start folded on a phone: open them
            page.wait_for_timeout(500)
            if page.locator("#pg-p-temperature").is_hidden():
                page.locator("#pg-params > button.label-wrap").click()
        assert seed["y"] < box(page, "#pg-p-temperature")["y"]
        advanced = page.locator("#pg-p-advanced")
        assert re.search(r"Advanced settings \(0 on\)", advanced.inner_text())
        assert page.locator("#pg-p-typical_p").is_hidden()  # folded
        # switching to toy keeps nothing typed away silently: the default prompt becomes toy's, with a note
        pick(page, "Model", re.compile(r"^toy · "))
        page.wait_for_function("() => document.querySelector('#pg-prompt textarea').value === '1 2'", timeout=20_000)
        page.wait_for_function("() => /token numbers/.test(document.getElementById('pg-prompt-note')?.innerText)",
                               timeout=20_000)
        # beam: its tree is right under the text, above the branches panel, and the chart says it does not branch
        pick(page, "Strategy", "beam")
        page.wait_for_function("() => /one-token-per-step/.test(document.getElementById('pg-dist-note')?.innerText)",
                               timeout=20_000)
        page.locator("#pg-generate").click()
        wait_done(page)
        # Generate brought the run's output into view: its status starts in the screen's upper part
        status = page.locator("#pg-status").bounding_box()
        assert status is not None and -2 <= status["y"] < height * 0.6, status
        page.wait_for_selector("#pg-view-0 .js-plotly-plot", timeout=30_000)
        view, branches, text = box(page, "#pg-view-0"), box(page, "#pg-branches"), box(page, "#pg-text")
        assert text["y"] < view["y"] < branches["y"]
        assert view["y"] < box(page, "#pg-dist")["y"]
        assert page.locator("#pg-branch-run").is_disabled()
        # slides view: the sidebar folds away and the chosen chart takes most of the width, titles large
        page.locator("#pg-slides input").check()
        page.wait_for_function("() => document.body.classList.contains('pg-slides')", timeout=10_000)
        page.wait_for_timeout(700)
        assert page.locator("#pg-sidebar").is_hidden() and page.locator("#pg-branches").is_hidden()
        assert page.locator("#pg-waterfall").is_hidden() and page.locator("#pg-view-0").is_hidden()
        dist = box(page, "#pg-dist")
        assert dist["width"] >= 0.7 * width, dist
        size = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('#pg-dist .gtitle')).fontSize)")
        assert size >= 28 or width < 700  # projector sizes; a phone keeps its own
        # the beam tree instead: it alone, as wide
        page.locator("#pg-slides-chart input").click()
        page.get_by_role("option", name="chart: strategy view", exact=True).click()
        page.wait_for_selector("#pg-dist", state="hidden", timeout=10_000)
        page.wait_for_timeout(700)
        assert box(page, "#pg-view-0")["width"] >= 0.7 * width and page.locator("#pg-view-1").is_hidden()
        page.locator("#pg-slides input").uncheck()
        page.wait_for_function("() => !document.body.classList.contains('pg-slides')", timeout=10_000)
        assert page.locator("#pg-sidebar").is_visible() and page.locator("#pg-waterfall").is_visible()


def test_slides_view_hides_every_strategy_view_slot_but_the_chosen_chart(browser, url):
    """A speculative run on the toy fills every figure slot the page has (VIEW_PLOTS) and the HTML slot;
    in the slides view none of them shows beside the chosen chart, whichever it is: neither when the
    view is switched on after the run, nor when the run fills the slots after the view was switched on
    (Gradio first renders a slot when it is first shown)."""
    from playground.ui.side import VIEW_PLOTS
    slots = [f"#pg-view-{i}" for i in range(VIEW_PLOTS)]
    query = "?model=toy&strategy=speculative&prompt=1+2&p.draft=toy-small&seed=2&max_new_tokens=6"
    with opened(browser, url + query + "&run=generate", "light") as page:
        wait_done(page)
        for slot in slots:  # the run fills them all: a slot the slides view misses would show
            page.wait_for_selector(f"{slot} .js-plotly-plot", timeout=90_000)
        page.wait_for_selector("#pg-view-html", state="visible", timeout=90_000)
        page.locator("#pg-slides input").check()
        page.wait_for_function("() => document.body.classList.contains('pg-slides')", timeout=10_000)
        page.wait_for_timeout(700)
        shown = [s for s in [*slots, "#pg-view-html"] if page.locator(s).is_visible()]
        assert shown == [], f"shown beside the distribution in the slides view: {shown}"
        assert page.locator("#pg-dist").is_visible()
        page.locator("#pg-slides-chart input").click()
        page.get_by_role("option", name="chart: strategy view", exact=True).click()
        page.wait_for_selector("#pg-dist", state="hidden", timeout=10_000)
        page.wait_for_timeout(700)
        assert page.locator(slots[0]).is_visible() and page.locator("#pg-dist").is_hidden()
        shown = [s for s in [*slots[1:], "#pg-view-html"] if page.locator(s).is_visible()]
        assert shown == [], f"shown beside the strategy view in the slides view: {shown}"
    with opened(browser, url + query, "light") as page:  # the view on first, then the run
        page.wait_for_selector("#pg-slides input")
        page.locator("#pg-slides input").check()
        page.wait_for_function("() => document.body.classList.contains('pg-slides')", timeout=10_000)
        # the slides view hides Generate with the rest of the page: the run starts as a restored link's
        # does, once the restore has enabled it
        page.wait_for_function("() => document.getElementById('pg-generate')?.disabled === false", timeout=60_000)
        page.evaluate("() => document.getElementById('pg-generate').click()")
        wait_done(page)
        for slot in slots:
            page.wait_for_selector(f"{slot} .js-plotly-plot", state="attached", timeout=90_000)
        page.wait_for_timeout(700)
        shown = [s for s in [*slots, "#pg-view-html"] if page.locator(s).is_visible()]
        assert shown == [], f"shown beside the distribution when the run came after the slides view: {shown}"
        assert page.locator("#pg-dist").is_visible()


def test_generate_clicked_the_moment_a_link_opens_runs_the_links_settings(browser, url):
    """Generate waits for the link's settings: it is enabled once the load event has restored them.
    The click is made by script in the first animation frame, from the moment the load event leaves
    for the server, in which the button is enabled; before the gate it ran the page's defaults
    (SmolLM2 sampling)."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        with page.expect_request(lambda r: "/queue/join" in r.url, timeout=60_000):
            page.goto(url + "?model=toy&strategy=beam&prompt=1+2&seed=3&max_new_tokens=4")
        page.wait_for_function("""() => {
            const b = document.getElementById('pg-generate');
            if (!b || b.disabled) return false;
            b.click();
            return true;
        }""", timeout=60_000, polling="raf")
        wait_done(page)
        line = page.locator("#pg-status").inner_text()
        assert line.startswith("toy (float32) · beam ·") and "seed 3 · 4 tokens" in line, line
    finally:
        page.close()


def test_after_stop_the_branches_panel_names_the_stopped_run_and_a_branch_hangs_under_it(browser, url, store):
    store.get("smollm2-135m")
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(url)
        page.wait_for_selector("#pg-seed input")
        page.locator("#pg-max-new input[type=number]").fill("200")
        page.locator("#pg-max-new input[type=number]").press("Tab")
        page.locator("#pg-prompt textarea").fill("Write a long story about a lighthouse keeper.")
        page.locator("#pg-generate").click()
        page.wait_for_function("() => document.querySelectorAll('#pg-text .pg-tok').length >= 4", timeout=120_000)
        page.locator("#pg-stop").click()
        wait_done(page)
        page.wait_for_function("() => /run: /.test(document.getElementById('pg-branch-tree')?.innerText || '')",
                               timeout=20_000)
        shown = "".join(page.locator("#pg-text .pg-tok").all_inner_texts()).replace("·", " ").strip()
        label = page.locator("#pg-branch-tree label").first.inner_text()
        assert " ".join(shown.split())[:20] in " ".join(label.split()), (shown, label)
        # a bar of the stopped run's distribution branches it: the branch hangs under the stopped run
        page.wait_for_function("() => document.querySelector('#pg-dist .js-plotly-plot')?.dataset.pgBranchHooked",
                               timeout=20_000)
        page.locator("#pg-text .pg-tok").nth(1).click()  # step 1, then a short budget for the branch
        page.wait_for_function("() => /^Step 1\\b/.test(document.querySelector('#pg-dist .gtitle')?.textContent || '')",
                               timeout=20_000)
        page.locator("#pg-max-new input[type=number]").fill("8")
        page.locator("#pg-max-new input[type=number]").press("Tab")
        page.wait_for_function("() => document.querySelector('#pg-dist .js-plotly-plot')?.dataset.pgBranchHooked",
                               timeout=20_000)
        bar = page.locator("#pg-dist .barlayer .point path").nth(1)
        bar.scroll_into_view_if_needed()
        b = bar.bounding_box()
        page.mouse.move(b["x"] + b["width"] / 2, b["y"] + b["height"] - 3)  # plotly clicks the hovered point
        page.wait_for_timeout(300)
        page.mouse.click(b["x"] + b["width"] / 2, b["y"] + b["height"] - 3)
        try:
            page.wait_for_function("() => document.querySelectorAll('#pg-branch-tree label').length >= 2",
                                   timeout=120_000)
        except Exception:
            page.screenshot(path="/tmp/shots23b/debug_stop.png", full_page=True)
            raise AssertionError(page.locator("#pg-status").inner_text() + " | "
                                 + page.locator("#pg-branch-tree").inner_text()) from None
        labels = page.locator("#pg-branch-tree label").all_inner_texts()
        assert labels[0].strip().startswith("run: ") and "└ step" in labels[1]
    finally:
        page.close()


@pytest.mark.parametrize("mode", ["light", "phone"])
def test_switching_to_toy_asks_before_replacing_a_typed_prompt(browser, url, mode):
    with opened(browser, url, mode) as page:
        page.wait_for_selector("#pg-prompt textarea")
        typed = "My own words about the sea"
        page.locator("#pg-prompt textarea").fill(typed)
        pick(page, "Model", re.compile(r"^toy · "))
        page.wait_for_function("() => /token numbers/.test(document.getElementById('pg-prompt-note')?.innerText)",
                               timeout=20_000)
        offer = page.locator("#pg-prompt-fit")
        assert page.locator("#pg-prompt textarea").input_value() == typed  # kept, not replaced unasked
        offer.wait_for(state="visible", timeout=20_000)
        assert "“1 2”" in offer.inner_text()
        offer.click()
        page.wait_for_function("() => document.querySelector('#pg-prompt textarea').value === '1 2'", timeout=20_000)
        offer.wait_for(state="hidden", timeout=20_000)
        # typing a prompt the toy cannot read brings the offer back; token numbers take it away
        page.locator("#pg-prompt textarea").fill("hello sea")
        offer.wait_for(state="visible", timeout=20_000)
        page.locator("#pg-prompt textarea").fill("3 4")
        offer.wait_for(state="hidden", timeout=20_000)
