"""The "what if" questions in a real browser: click a bar of the distribution and see the branch (the
tree of branches, going back, undo, the share link carrying the forced token); run Sample many and
see its two sets of bars. Playwright drives Debian's Chromium; where there is none these skip (and
fail under CI=true)."""
from __future__ import annotations

import pytest

from playground.engine import Request, run
from playground.ui.components import share_query
from tests.browser import tokens, wait_done

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

THE = 9  # toy's " the": the 30% token after "1 2"

BAR_CENTRE_JS = """(id) => {
  const gd = document.querySelector('#pg-dist .js-plotly-plot');
  const traces = [...gd.querySelectorAll('.barlayer .trace')];
  let n = 0;
  for (const t of gd.data) {
    if (t.type !== 'bar') continue;
    const i = (t.customdata || []).findIndex((c) => Number(c[0]) === id);
    if (i >= 0) {
      const r = traces[n].querySelectorAll('.point path')[i].getBoundingClientRect();
      return [r.left + r.width / 2, r.top + r.height / 2];
    }
    n += 1;
  }
  return null;
}"""
TREE_JS = "() => [...document.querySelectorAll('#pg-branch-tree label')].map((l) => l.innerText.trim())"


def _tree(pg) -> list[str]:
    return pg.evaluate(TREE_JS)


def test_a_branch_clicked_the_moment_its_run_finishes_hangs_under_that_run(page, url, store):
    """The bar click's event the instant the status says finished, before the tree shows the run: the
    branch's record can land before the run's own, which then reads the branch's trace; the tree still
    has the run as its root and the branch under it (3 of 4 such clicks lost the run before)."""
    parent = run(store, Request("toy", "sampling", "1 2", seed=4, max_new_tokens=8)).to_dict()
    page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 4, 8, {}, "greedy", {},
                                                  run="generate"))
    wait_done(page, polling=10)
    page.evaluate(f"() => window.dispatchEvent(new CustomEvent('pg-branch', {{detail: {THE}}}))")
    page.wait_for_function("() => document.querySelectorAll('#pg-branch-tree label').length === 2", timeout=60_000)
    tree = _tree(page)
    assert tree[0].startswith("run:") and "".join(t["text"] for t in parent["tokens"]).strip()[:20] in tree[0], tree
    assert "→" in tree[1], tree


def test_click_a_bar_to_branch_go_back_share_and_undo(page, url, store):
    parent = run(store, Request("toy", "greedy", "1 2", max_new_tokens=6)).to_dict()
    child = run(store, Request("toy", "greedy", "1 2", max_new_tokens=6, forced={0: THE})).to_dict()
    parent_text, child_text = ("".join(t["text"] for t in r["tokens"]) for r in (parent, child))
    assert parent_text != child_text
    page.goto(url.rstrip("/") + "/" + share_query("toy", "greedy", "1 2", "", False, 0, 6, {}, "greedy", {},
                                                  run="generate"))
    wait_done(page)
    assert "".join(tokens(page)) == parent_text
    page.locator("#pg-text .pg-tok").nth(0).click()  # step 0: the 70/30 fork
    page.wait_for_function("() => document.querySelector('#pg-step input[type=number]').value === '0'")
    page.wait_for_function("() => (document.querySelector('#pg-dist .gtitle')?.textContent || '').startsWith('Step 0')")
    page.wait_for_function(f"() => ({BAR_CENTRE_JS})({THE}) !== null")
    page.locator("#pg-dist").scroll_into_view_if_needed()
    x, y = page.evaluate(BAR_CENTRE_JS, THE)
    page.mouse.click(x, y)
    page.wait_for_function("() => document.querySelectorAll('#pg-branch-tree label').length === 2", timeout=60_000)
    assert "".join(tokens(page)) == child_text
    assert page.locator("#pg-text .pg-forced").count() == 1
    assert page.locator("#pg-forced textarea, #pg-forced input").first.input_value() == f"0:{THE}"
    view = page.locator("#pg-branch-view").inner_text()
    assert "would have taken" in view and "parent" in view and "branch" in view
    tree = _tree(page)
    assert tree[0].startswith("run:") and "step 0" in tree[1]
    # the share link carries the forced token
    page.locator("#pg-copy-link").click()
    link = page.locator("#pg-link textarea, #pg-link input").first
    page.wait_for_function("() => { const e = document.querySelector('#pg-link textarea, #pg-link input');"
                           " return e && e.value.includes('force='); }", timeout=10_000)
    assert f"force=0%3A{THE}" in link.input_value()
    # back to the parent without a new run, then forward, then undo the branch
    page.locator("#pg-branch-tree label").nth(0).click()
    page.wait_for_function("(t) => [...document.querySelectorAll('#pg-text .pg-tok')].map((e) => e.innerText)"
                           ".join('') === t", arg=parent_text, timeout=20_000)
    page.locator("#pg-branch-tree label").nth(1).click()
    page.wait_for_function("() => document.querySelectorAll('#pg-text .pg-forced').length === 1", timeout=20_000)
    page.locator("#pg-branch-undo").click()
    page.wait_for_function("() => document.querySelectorAll('#pg-branch-tree label').length === 1", timeout=20_000)
    assert "".join(tokens(page)) == parent_text


def test_sample_many_shows_frequencies_beside_the_exact_bars(page, url):
    page.goto(url.rstrip("/") + "/" + share_query("toy", "sampling", "1 2", "", False, 0, 6, {}, "greedy", {}))
    # the link's restore selects the Explore tab: wait for it to land before choosing another tab
    page.wait_for_function("() => document.querySelector('#pg-prompt textarea')?.value === '1 2'")
    page.get_by_role("tab", name="What if").click()
    page.locator("#pg-whatif-sample").click()
    page.wait_for_function("() => document.querySelectorAll('#pg-whatif-bars .barlayer .trace').length === 2",
                           timeout=120_000)
    names = page.evaluate("() => document.querySelector('#pg-whatif-bars .js-plotly-plot').data"
                          ".filter((t) => t.type === 'bar').map((t) => t.name)")
    assert len(names) == 2
    table = page.locator("#pg-whatif-table").inner_text()
    assert "·a" in table and "·the" in table and "exact" in table
    title = page.locator("#pg-whatif-bars .gtitle").text_content()
    assert "chi-square p =" in title and "total variation" in title
