"""Structured decoding in a real browser (Playwright driving Debian's Chromium): the JSON example on
SmolLM2 runs from its button, the Grammar group shows the schema, the Z chart and the struck-through
tokens are on the page. Screenshots (1440x1000 light and dark, 390x844) go to /tmp/grammar_shots/.

Where no browser can be had these tests skip with the reason; under CI=true they fail instead.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from playground.charts.grammar import TITLE
from playground.engine import Request, run
from playground.ui.components import share_query
from playground.ui.examples import examples
from tests.browser import wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
              pytest.mark.usefixtures("smollm")]  # loaded before the clicks, so they time decoding, not loading
SHOTS = Path(os.environ.get("GRAMMAR_SHOTS", "/tmp/grammar_shots"))
SIZES = (("light", 1440, 1000, ""), ("dark", 1440, 1000, "?__theme=dark"), ("phone", 390, 844, ""))


def z_view(page) -> str:
    """The id of the view slot that holds the Z chart ('' when none does)."""
    return page.evaluate("(title) => [...document.querySelectorAll('[id^=pg-view-] .gtitle')]"
                         ".find((t) => t.textContent.startsWith(title))?.closest('[id^=pg-view-]')?.id || ''",
                         TITLE.replace("<br>", ""))


@pytest.mark.parametrize("name,width,height,query", SIZES, ids=[s[0] for s in SIZES])
def test_the_json_example_runs_and_shows_the_z_chart(browser, url, store, name, width, height, query):
    example = next(ex for ex in examples() if ex.config.grammar_kind == "json")
    cfg = example.config
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        page.goto(url.rstrip("/") + "/" + query)
        page.get_by_role("button", name=example.label).click()
        page.wait_for_function("() => /Ada/.test(document.querySelector('#pg-prompt textarea')?.value || '')",
                               timeout=30_000)
        page.wait_for_timeout(300)
        wait_done(page, timeout_s=180, polling=100)
        page.wait_for_function("(t) => [...document.querySelectorAll('[id^=pg-view-] .gtitle')]"
                               ".some((e) => e.textContent.startsWith(t))", arg=TITLE, timeout=30_000)
        status = page.locator("#pg-status").inner_text()
        assert "the grammar is complete" in status, status
        # the page ran the example's grammar: the same text as the engine with it
        ref = run(store, Request(cfg.model, cfg.strategy, cfg.prompt, cfg.params, seed=cfg.seed,
                                 max_new_tokens=cfg.max_new_tokens, chat=cfg.chat, dtype="auto",
                                 grammar={"kind": cfg.grammar_kind, "text": cfg.grammar_text}))
        shown = "".join(page.locator("#pg-text .pg-tok").all_inner_texts())
        assert shown.replace("↵", "").replace("\n", "") == ref.text.replace("\n", "")
        json.loads(ref.text)  # the schema's text parses
        # the grammar group holds the schema; the distribution strikes through what the grammar cut
        assert page.locator("#pg-grammar-text textarea").input_value() == cfg.grammar_text
        assert page.locator("#pg-dist .xtick text[style*='line-through'], #pg-dist .xtick tspan"
                            "[style*='line-through']").count() > 0
        view = z_view(page)
        assert view
        drawn = page.evaluate("(id) => document.querySelector(`#${id} .js-plotly-plot`).data"
                              ".find((t) => t.meta && t.meta.role === 'z').customdata.map((r) => r[0])", view)
        recorded = [next(st.decision["z"] for st in s.stages if st.name == "grammar") for s in ref.steps]
        assert drawn == pytest.approx(recorded, abs=1e-6)  # the page's chart holds the recorded Z_t
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"json-{name}.png"), full_page=True)
        page.locator(f"#{view}").screenshot(path=str(SHOTS / f"z-chart-{name}.png"))
        page.locator("#pg-dist").screenshot(path=str(SHOTS / f"distribution-{name}.png"))
        page.locator("#pg-grammar").screenshot(path=str(SHOTS / f"grammar-group-{name}.png"))
    finally:
        page.close()


def test_the_toy_example_shows_the_grammar_fighting_the_model(browser, url, store):
    example = next(ex for ex in examples() if ex.config.grammar_kind and ex.config.model == "toy")
    cfg = example.config
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(url)
        page.get_by_role("button", name=example.label).click()
        page.wait_for_function("() => /toy/.test(document.getElementById('pg-status')?.innerText || '')",
                               timeout=60_000)
        wait_done(page, timeout_s=60, polling=100)
        ref = run(store, Request(cfg.model, cfg.strategy, cfg.prompt, cfg.params, seed=cfg.seed,
                                 max_new_tokens=cfg.max_new_tokens, dtype="auto",
                                 grammar={"kind": cfg.grammar_kind, "text": cfg.grammar_text}))
        assert page.locator("#pg-text .pg-tok").all_inner_texts() == [t.text for t in ref.tokens]
        assert page.locator("#pg-text .pg-grammar-forced").count() == sum(
            next(st.decision["forced"] for st in s.stages if st.name == "grammar") for s in ref.steps)
        page.wait_for_function("(t) => [...document.querySelectorAll('[id^=pg-view-] .gtitle')]"
                               ".some((e) => e.textContent.startsWith(t) && /fighting the model/.test(e.textContent))",
                               arg=TITLE, timeout=30_000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.locator(f"#{z_view(page)}").screenshot(path=str(SHOTS / "toy-z-chart-light.png"))
        page.locator("#pg-text").screenshot(path=str(SHOTS / "toy-text-light.png"))
    finally:
        page.close()


def test_a_grammar_that_does_not_parse_is_the_pages_normal_error(browser, url):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        query = share_query("toy", "greedy", "1 2", "", False, 0, 8, {}, "greedy", {}, run="",
                            grammar_kind="regex", grammar_text="(unclosed")
        page.goto(url.rstrip("/") + "/" + query)
        page.wait_for_function("() => document.querySelector('#pg-grammar-text textarea')?.value === '(unclosed'",
                               timeout=30_000)
        page.locator("#pg-generate").click()
        toast = page.locator(".toast-body").first
        toast.wait_for(timeout=30_000)
        assert "the regex '(unclosed' is not valid: unclosed group" in toast.inner_text()
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "bad-grammar-light.png"))
    finally:
        page.close()
