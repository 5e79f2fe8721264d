"""The charts read in a real browser at 1440 px light and dark and on a 390 px phone: plotly's toolbar
never covers a title on the phone, the selected in-chart button is readable in dark mode, and every
chart carries its caption inside the figure, under the plot. Playwright drives Debian's Chromium;
where there is none these skip (and fail under CI=true)."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

from playground.ui import share  # noqa: E402
from tests.browser import wait_done  # noqa: E402

VIEWPORTS = {"light": (1440, 1000, "light"), "dark": (1440, 1000, "dark"), "phone": (390, 844, "light")}
QUERY = share.encode(share.Config(model="toy", strategy="sampling", prompt="1 2", seed=4, max_new_tokens=12,
                                  params={"temperature": 1.0, "top_k": 8, "top_p": 0.9}, run="generate"))

# for the distribution chart: the mode bar's display, every in-chart button's fill and text colour
# (the selected one is the one plotly paints in its "active" fill), and the caption's box against the plot's
CHART_JS = """() => {
  const gd = document.querySelector('#pg-dist .js-plotly-plot');
  const bar = gd.querySelector('.modebar-container') || gd.querySelector('.modebar');
  let page = 'rgb(255, 255, 255)';
  for (let el = gd; el; el = el.parentElement) {
    const bg = getComputedStyle(el).backgroundColor;
    if (bg && bg !== 'transparent' && !/rgba\\(.*, 0\\)$/.test(bg)) { page = bg; break; }
  }
  const buttons = [...gd.querySelectorAll('.updatemenu-button')].map((b) => {
    const rect = b.querySelector('rect.updatemenu-item-rect');
    const text = b.querySelector('text');
    const style = getComputedStyle(rect);
    // a button plotly leaves clear shows the page through it
    const fill = parseFloat(style.fillOpacity) < 0.5 ? page : style.fill;
    return {label: text.textContent, fill, ink: getComputedStyle(text).fill,
            active: (rect.getAttribute('style') || '').includes('rgb(244')};
  });
  const plot = gd.querySelector('.cartesianlayer .plot, .bglayer rect').getBoundingClientRect();
  const svg = gd.querySelector('.main-svg').getBoundingClientRect();
  const caption = [...gd.querySelectorAll('.annotation')].find((a) => /in tokens/.test(a.textContent));
  const box = caption && caption.getBoundingClientRect();
  const title = gd.querySelector('.gtitle').getBoundingClientRect();
  return {modebar: bar ? getComputedStyle(bar).display : null, buttons,
          caption: caption && {top: box.top, bottom: box.bottom, left: box.left, right: box.right},
          plot: {bottom: plot.bottom}, svg: {bottom: svg.bottom, left: svg.left, right: svg.right},
          title: {top: title.top, bottom: title.bottom}};
}"""


def _rgb(css: str) -> tuple[float, ...]:
    return tuple(float(x) for x in css[css.index("(") + 1:css.index(")")].split(",")[:3])


def _luminance(css: str) -> float:
    def lin(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(c) for c in _rgb(css))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.fixture(scope="module")
def charts_at(browser, url):
    """The distribution chart's computed styles in each viewport, after one seeded toy run."""
    out = {}
    for where, (width, height, theme) in VIEWPORTS.items():
        pg = browser.new_page(viewport={"width": width, "height": height}, color_scheme=theme)
        try:
            pg.goto(url.rstrip("/") + "/" + QUERY + f"&__theme={theme}")
            wait_done(pg)
            pg.wait_for_function("() => document.querySelectorAll('#pg-dist .updatemenu-button').length > 0",
                                 timeout=20_000)
            pg.locator("#pg-dist").scroll_into_view_if_needed()
            pg.locator("#pg-dist .js-plotly-plot").hover()  # plotly shows its mode bar on hover
            pg.wait_for_timeout(400)
            out[where] = pg.evaluate(CHART_JS)
        finally:
            pg.close()
    return out


def test_the_mode_bar_is_hidden_on_a_phone_only(charts_at):
    assert charts_at["phone"]["modebar"] == "none"
    assert charts_at["light"]["modebar"] != "none" and charts_at["dark"]["modebar"] != "none"


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_every_in_chart_button_reads_and_the_selected_one_differs(charts_at, where):
    buttons = charts_at[where]["buttons"]
    assert buttons and any(b["active"] for b in buttons)
    for b in buttons:
        assert contrast(b["ink"], b["fill"]) >= 3.0, (where, b)
    active = {b["fill"] for b in buttons if b["active"]}
    idle = {b["fill"] for b in buttons if not b["active"]}
    if where == "dark":
        assert active.isdisjoint(idle)  # the selected button still shows which one it is


@pytest.mark.parametrize("where", list(VIEWPORTS))
def test_the_caption_sits_inside_the_figure_under_the_plot(charts_at, where):
    c = charts_at[where]
    cap = c["caption"]
    assert cap is not None
    assert cap["top"] > c["plot"]["bottom"] and cap["bottom"] <= c["svg"]["bottom"] + 1
    assert cap["left"] >= c["svg"]["left"] - 1 and cap["right"] <= c["svg"]["right"] + 1

