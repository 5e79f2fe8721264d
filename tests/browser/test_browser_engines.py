"""The engines panel in a real browser (Playwright driving Debian's Chromium): a value preset chosen sets the
panel and says what it set, Copy as shows the run's settings as vLLM's SamplingParams with what vLLM cannot
express, and a pasted llama-server line is imported with what could not be carried (from beam, switching to
sampling with the imported order). Where there is no browser this skips (and fails under CI=true)."""
from __future__ import annotations

import pytest

from playground.ui.components import share_query
from tests.browser import pick, wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]


def text_of(page, elem_id: str) -> str:
    return page.locator(f"#{elem_id}").inner_text()


def test_a_preset_then_copy_as_vllm_then_a_llama_server_import(page, url):
    page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 0, 6, {}, "greedy", {}))
    page.wait_for_selector("#pg-generate:not([disabled])")
    pick(page, "Value preset", "universal")
    page.wait_for_function("() => /universal: set temperature 1, min_p 0.1/"
                           ".test(document.getElementById('pg-value-preset-note')?.innerText)", timeout=20_000)
    assert "SillyTavern" in text_of(page, "pg-value-preset-note")
    assert page.locator("#pg-p-min_p input[type=number]").input_value() == "0.1"
    page.locator("#pg-p-temperature input[type=number]").fill("0.9")  # edited by hand: the menu no longer names it
    page.keyboard.press("Tab")
    page.wait_for_function("() => document.querySelector('#pg-value-preset input')?.value === ''", timeout=20_000)
    assert not page.locator("#pg-value-preset-note").is_visible()
    page.locator("#pg-generate").click()
    wait_done(page)
    page.locator("#pg-export > button.label-wrap").click()
    pick(page, "Copy as", "vLLM SamplingParams (Python)")
    page.wait_for_function("() => /min_p=0.1/.test(document.querySelector('#pg-copy-as-code textarea')?.value)",
                           timeout=20_000)
    assert "vLLM" in text_of(page, "pg-copy-as-gaps")
    page.locator("#pg-import > button.label-wrap").click()
    page.locator("#pg-import-text textarea").fill("llama-server -m m.gguf --temp 0.7 --top-k 20 --logit-bias 15043+1")
    page.locator("#pg-import-run").click()
    page.wait_for_function("() => /Not carried/.test(document.getElementById('pg-import-note')?.innerText)",
                           timeout=20_000)
    assert "--logit-bias" in text_of(page, "pg-import-note")
    assert page.locator("#pg-p-temperature input[type=number]").input_value() == "0.7"
    assert page.locator("#pg-p-top_k input[type=number]").input_value() == "20"
    # from beam (no chain) an import switches to sampling, keeping the imported order
    page.get_by_role("combobox", name="Strategy").click()
    page.get_by_role("option", name="beam", exact=True).click()
    page.wait_for_function("() => !document.getElementById('pg-value-preset')?.checkVisibility()", timeout=20_000)
    page.locator("#pg-import-text textarea").fill("llama-server --temp 0.5 --samplers 'top_k;temperature'")
    page.locator("#pg-import-run").click()
    page.wait_for_function("() => /temperature 0.5/.test(document.getElementById('pg-import-note')?.innerText)",
                           timeout=20_000)
    page.wait_for_timeout(1000)
    assert page.locator("#pg-strategy input").input_value() == "sampling"
    page.locator("#pg-p-advanced > button.label-wrap").click()
    assert page.locator("#pg-p-order textarea, #pg-p-order input").first.input_value().startswith("top_k,temperature,")
