"""What fits where, in a real browser (Playwright driving Debian's Chromium) at 1440 px in light and dark
mode and at 390x844: Generate on the first screen, a beam run's tables inside the phone's width, the
distribution chart's buttons clear of its labels, the two Compare sides' charts level, the slides view
showing the chosen chart alone at the screen's height, and exported charts without their in-chart buttons
(the server's PNGs and the modebar camera's).

Where no browser can be had the browser tests skip with the reason; under CI=true they fail instead.
"""
from __future__ import annotations

from contextlib import contextmanager

import plotly.io as pio
import pytest

from playground.engine import Request, run
from playground.ui import export, share

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

MODES = {"light": ((1440, 900), "light"), "dark": ((1440, 900), "dark"), "phone": ((390, 844), "light")}
# A phone browser's own bars (address bar, toolbar) cover part of a 390x844 screen, and another phone's
# fonts may wrap a help text one line more: what a visitor sees first there is about this tall.
PHONE_FIRST_SCREEN = 680
DONE_JS = "(ids) => ids.every((id) => /finished|reached max|stopped/.test(document.getElementById(id)?.innerText || ''))"


def link(**kw) -> str:
    return share.encode(share.Config(**kw))


SAMPLING = link(model="toy", strategy="sampling", prompt="1 2", seed=4, max_new_tokens=12,
                params={"temperature": 1.0, "top_k": 5}, run="generate")
BEAM = link(model="toy", strategy="beam", prompt="1 2", max_new_tokens=12, run="generate")
# A's text takes one line and B's two: the charts under them must still start level
COMPARE = link(model="toy", strategy="sampling", prompt="1 2", seed=4, max_new_tokens=40, params={"temperature": 1.0},
               compare_strategy="beam", run="compare")


@contextmanager
def opened(browser, url, mode: str, query: str = "", size: tuple[int, int] | None = None, done=("pg-status",)):
    """A page at ``mode``'s viewport (or ``size``) and theme, its run (if the link asks for one) finished."""
    (width, height), theme = MODES[mode]
    width, height = size or (width, height)
    page = browser.new_page(viewport={"width": width, "height": height}, color_scheme=theme)
    try:
        sep = "&" if "?" in query else "?"
        page.goto(url.rstrip("/") + "/" + query + f"{sep}__theme={theme}")
        page.wait_for_selector("#pg-generate")
        if "run=" in query:
            page.wait_for_function(DONE_JS, arg=list(done), timeout=120_000, polling=100)
        page.wait_for_timeout(800)  # plotly's last layout
        yield page
    finally:
        page.close()


def rect(page, selector: str) -> dict:
    """The element's box in page coordinates."""
    return page.evaluate("(s) => { const r = document.querySelector(s).getBoundingClientRect();"
                         " return {x: r.left, y: r.top + window.scrollY, width: r.width, height: r.height,"
                         " right: r.right, bottom: r.bottom + window.scrollY}; }", selector)


def page_width(page) -> tuple[int, int]:
    return page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")


@pytest.mark.parametrize("mode", list(MODES))
def test_generate_is_wholly_on_the_first_screen(browser, url, mode):
    (_, height), _ = MODES[mode]
    with opened(browser, url, mode) as page:
        assert page.evaluate("() => window.scrollY") == 0
        button = rect(page, "#pg-generate")
        first = PHONE_FIRST_SCREEN if mode == "phone" else height
        assert 0 <= button["y"] and button["bottom"] <= first, (button, first)
        # the model, weights and strategy pickers and the prompt all stay above it
        for control in ("#pg-model", "#pg-dtype", "#pg-strategy", "#pg-prompt"):
            assert rect(page, control)["bottom"] <= button["y"] + 1, control
        scroll, inner = page_width(page)
        assert scroll <= inner


@pytest.mark.parametrize("mode", list(MODES))
def test_beam_tables_fit_or_scroll_inside_their_own_box(browser, url, mode):
    with opened(browser, url, mode, BEAM) as page:
        page.wait_for_selector("#pg-view-html table", state="visible", timeout=30_000)
        outside = page.evaluate("""() => {
          const inner = window.innerWidth, out = [];
          for (const table of document.querySelectorAll('#pg-view-html table')) {
            let box = table;  // the table itself, or the nearest box around it that scrolls sideways
            for (let el = table.parentElement; el && el.id !== 'pg-view-html'; el = el.parentElement) {
              if (['auto', 'scroll'].includes(getComputedStyle(el).overflowX)) { box = el; break; }
            }
            const r = box.getBoundingClientRect();
            if (r.left < 0 || r.right > inner + 0.5) out.push([table.className, r.left, r.right, inner]);
          }
          return out;
        }""")
        assert outside == []
        scroll, inner = page_width(page)
        assert scroll <= inner


def overlaps(a: dict, b: dict, slack: float = 3) -> bool:
    """The boxes share more than ``slack`` px each way (a text's box runs a little past its letters)."""
    return (a["left"] < b["right"] - slack and b["left"] < a["right"] - slack
            and a["top"] < b["bottom"] - slack and b["top"] < a["bottom"] - slack)


BOXES_JS = """(id) => {
  const root = document.querySelector('#' + id + ' .js-plotly-plot');
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, text: (el.textContent || '').trim()}; };
  const shown = (el) => { const r = el.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  return {
    figure: box(root.querySelector('.main-svg')),
    buttons: [...root.querySelectorAll('.updatemenu-button')].filter(shown).map(box),
    labels: [...root.querySelectorAll('.annotation-text-g text, .xtick text, .ytick text, .y2tick text, '
                                       + '.gtitle, .legendtext')].filter(shown).map(box),
  };
}"""


@pytest.mark.parametrize("mode", list(MODES))
def test_the_distribution_charts_buttons_clear_its_labels(browser, url, mode):
    with opened(browser, url, mode, SAMPLING) as page:
        page.wait_for_selector("#pg-dist .updatemenu-button")
        boxes = page.evaluate(BOXES_JS, "pg-dist")
        assert len(boxes["buttons"]) >= 5  # the scale and zoom buttons and the three bases
        figure = boxes["figure"]
        for button in boxes["buttons"]:
            assert figure["left"] - 1 <= button["left"] and button["right"] <= figure["right"] + 1, button
            hit = [label["text"] for label in boxes["labels"] if overlaps(button, label)]
            assert hit == [], (button["text"], hit)


@pytest.mark.parametrize("mode", list(MODES))
def test_the_compare_sides_charts_start_level(browser, url, mode):
    with opened(browser, url, mode, COMPARE, done=("pg-status-a", "pg-status-b")) as page:
        texts = rect(page, "#pg-text-a .pg-text"), rect(page, "#pg-text-b .pg-text")
        if mode != "phone":
            # the case this is about: the two texts wrap to a different number of lines
            lines = [round(t["height"]) for t in texts]
            assert abs(lines[0] - lines[1]) > 20 or page.locator("#pg-text-a").evaluate(
                "(el) => el.scrollHeight > el.clientHeight + 20"), lines
            for chart in ("pg-overview", "pg-dist", "pg-waterfall"):
                a, b = rect(page, f"#{chart}-a"), rect(page, f"#{chart}-b")
                assert abs(a["y"] - b["y"]) <= 2, (chart, a["y"], b["y"])
                assert a["right"] <= b["x"]  # side by side
        else:  # a phone stacks the sides: B under the whole of A
            assert rect(page, "#pg-waterfall-a")["bottom"] <= rect(page, "#pg-status-b")["y"]
        scroll, inner = page_width(page)
        assert scroll <= inner


SLIDES_GONE = ["#pg-prompt", "#pg-generate", "#pg-stop", "#pg-copy-link", "#pg-model", "#pg-seed",
               "#pg-tabs [role=tablist]", "#pg-status", "#pg-text", ".pg-legend", "#pg-step", "#pg-waterfall",
               "#pg-overview-main", "#pg-branches", "#pg-export"]


def shown(page, selectors: list[str]) -> list[str]:
    return [s for s in selectors if page.locator(s).first.is_visible()]


@pytest.mark.parametrize("mode,size", [("light", (1440, 900)), ("dark", (1280, 720)), ("phone", (390, 844))])
def test_the_slides_view_shows_the_chosen_chart_alone_at_the_screens_height(browser, url, mode, size):
    width, height = size
    with opened(browser, url, mode, SAMPLING, size=size) as page:
        before = rect(page, "#pg-dist")["height"]
        page.locator("#pg-slides input").check()
        page.wait_for_function("() => document.body.classList.contains('pg-slides')", timeout=10_000)
        page.wait_for_timeout(900)
        assert shown(page, SLIDES_GONE) == []
        assert page.locator("#pg-slides input").is_visible()  # the way back
        page.evaluate("() => window.scrollTo(0, 0)")
        dist = page.locator("#pg-dist").bounding_box()
        assert dist is not None and dist["width"] >= 0.8 * width
        if width >= 700:  # a projector's screen: the chart fills its height, and no more
            assert dist["height"] >= 0.8 * height and dist["y"] >= 0 and dist["y"] + dist["height"] <= height + 1, dist
            assert page.evaluate("() => document.documentElement.scrollHeight") <= height + 1
        # another chart: it alone, as large
        page.locator("#pg-slides-chart input").click()
        page.get_by_role("option", name="chart: chain", exact=True).click()
        page.wait_for_selector("#pg-dist", state="hidden", timeout=10_000)
        page.wait_for_timeout(900)
        water = page.locator("#pg-waterfall").bounding_box()
        assert water is not None and shown(page, [s for s in SLIDES_GONE if s != "#pg-waterfall"]) == []
        if width >= 700:
            assert water["height"] >= 0.8 * height and water["y"] + water["height"] <= height + 1, water
        # Escape leaves the view: the page and the chart's own height come back
        page.keyboard.press("Escape")
        page.wait_for_function("() => !document.body.classList.contains('pg-slides')", timeout=10_000)
        page.wait_for_timeout(900)
        assert not page.locator("#pg-slides input").is_checked()
        assert page.locator("#pg-prompt").is_visible() and page.locator("#pg-status").is_visible()
        assert abs(rect(page, "#pg-dist")["height"] - before) <= 2


def test_the_modebar_camera_saves_the_chart_without_its_buttons(browser, url):
    with opened(browser, url, "light", SAMPLING) as page:
        page.wait_for_selector("#pg-dist .updatemenu-button")
        # the figure the camera hands to plotly's image export, read on its way there
        page.evaluate("""() => { const real = window.Plotly.downloadImage;
          window.pgSaved = [];
          window.Plotly.downloadImage = (fig, opts) => { window.pgSaved.push(
            {menus: (fig.layout && fig.layout.updatemenus || []).length, traces: (fig.data || []).length,
             filename: opts && opts.filename}); return real(fig, opts); }; }""")
        page.locator("#pg-dist").hover()
        camera = page.locator('#pg-dist .modebar-btn[data-title^="Download plot"]')
        with page.expect_download(timeout=30_000) as download:
            camera.click()
        saved = page.evaluate("() => window.pgSaved")
        assert len(saved) == 1 and saved[0]["menus"] == 0 and saved[0]["traces"] > 0, saved
        assert saved[0]["filename"] == "decoding-playground"
        with open(download.value.path(), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
        # the chart on the page keeps its buttons
        assert page.locator("#pg-dist .updatemenu-button").count() >= 5


@pytest.mark.skipif(not export.png_export_available(), reason="PNG export needs kaleido and a Chromium")
def test_the_server_png_export_leaves_the_in_chart_buttons_out(store, monkeypatch):
    trace = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.0, "top_k": 5}, seed=4,
                               max_new_tokens=6)).to_dict()
    written = []
    real = pio.write_images

    def write_images(figs, paths, **kw):
        written.extend(figs)
        return real(figs, paths, **kw)

    monkeypatch.setattr(pio, "write_images", write_images)
    paths = export.export_pngs(trace, 0, theme="dark", scale=1)
    assert len(written) == len(paths) >= 3
    assert all(not fig.layout.updatemenus for fig in written)
    for path in paths:
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
