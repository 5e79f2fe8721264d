"""What the browser tests share besides their fixtures: small helpers that read and drive the page.

The fixtures themselves (one Chromium and one app server per test worker, a fresh ``page`` per test)
are in tests/conftest.py: ``browser``, ``url``, ``page``. A browser test file imports what it needs
from here (``from tests.browser import wait_done``), never from another test file.
"""
from __future__ import annotations

import re

DONE_JS = "(id) => /finished|reached max|stopped/.test(document.getElementById(id)?.innerText || '')"


# The open list's top edge is on screen (an option further down it is reached by the list's own scroll).
LIST_IN_VIEW_JS = ("(el) => { const r = (el.closest('ul') || el).getBoundingClientRect();"
                   " return r.top >= 0 && r.top < window.innerHeight; }")


def pick(page, label: str, option: str | re.Pattern, tries: int = 3) -> None:
    """Choose ``option`` in the dropdown labelled ``label``; the menu is brought to the middle of the screen
    first, so its list opens inside the viewport (at the page's foot it opened below the screen's edge).
    Gradio places the open list where the menu was when it opened, so a page that moves under it (a chart
    drawn late above) can leave the list off screen, where no scroll reaches it: then it is closed and
    opened again."""
    menu = page.get_by_role("combobox", name=label)
    item = page.get_by_role("option", name=option)
    for _ in range(tries - 1):
        menu.evaluate("(el) => el.scrollIntoView({block: 'center'})")
        menu.click()
        item.wait_for(state="visible")
        page.wait_for_timeout(100)  # the list's placement settles
        if item.evaluate(LIST_IN_VIEW_JS):
            item.click()
            return
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
    menu.evaluate("(el) => el.scrollIntoView({block: 'center'})")
    menu.click()
    item.click()


def tokens(page, panel: str = "pg-text") -> list[str]:
    """The tokens shown in a text panel, in order."""
    return page.locator(f"#{panel} .pg-tok").all_inner_texts()


def status(page, sid: str = "pg-status") -> str:
    return page.locator(f"#{sid}").inner_text()


def wait_done(page, sid: str = "pg-status", timeout_s: float = 120, polling: int = 50) -> None:
    """Until the status line says the run finished, reached its length or stopped."""
    page.wait_for_function(DONE_JS, arg=sid, timeout=timeout_s * 1000, polling=polling)


def bar_count(page, plot: str = "pg-dist") -> int:
    """The bars drawn in a bar chart."""
    return page.locator(f"#{plot} .barlayer .point path").count()
