"""Stop under load: a busy process on every core, and two clients: a browser runs a long SmolLM2
generation while a script (gradio_client) queues a second long run behind it; the browser clicks Stop.
The run ends after the step in flight: at most that token (and one already on its way to a busy page)
shows, the server sends "stopped at step n" within a second of that step's end, the page shows it within
one step and two seconds of the click (the page's own lag under load included), and no token arrives after it.
Times are read in the page (a MutationObserver), not polled.

Skips where no browser can be had (fails under CI=true), like tests/browser/test_browser.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from playground.ui import events, explore
from playground.ui.components import share_query

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated"),
              pytest.mark.usefixtures("smollm")]  # loaded before the clicks, so they time decoding, not loading

OBSERVE = """() => {
  window.__log = [];
  const rec = () => window.__log.push([performance.now(),
      document.querySelectorAll('#pg-text .pg-tok').length,
      document.getElementById('pg-status')?.innerText || '']);
  for (const id of ['pg-text', 'pg-status'])
    new MutationObserver(rec).observe(document.getElementById(id), {childList: true, subtree: true, characterData: true});
}"""
CLICK_STOP = "() => { const t = performance.now(); document.getElementById('pg-stop').click(); return t; }"
STOPPED_AT = re.compile(r"stopped at step (\d+)")
# from the end of the step in flight at the click to "stopped at step n" on screen. The server's own bound
# is a second (below); the page adds its lag behind the server, which under the whole suite on 2 cores (two
# test workers, this test's busy processes, Chromium) was measured at up to 1.1 s: "stopped" 1.60 s after
# the click with a 0.50 s step, while the server sent its final frame 0.07 s after Stop arrived.
STOP_SHOWN_S = 2.0


@pytest.fixture
def busy_cores():
    """A busy process on every core for the test's length (the machine of a person who runs other things)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield len(procs)
    for proc in procs:
        proc.kill()
        proc.wait()


def token_changes(log: list, since: float) -> list[tuple[float, int]]:
    """(time, token count) at each change of the count after ``since``."""
    out, last = [], None
    for t, n, _ in log:
        if n != last:
            if t >= since:
                out.append((t, n))
            last = n
    return out


def test_stop_under_load_ends_after_the_step_in_flight_and_says_where(browser, url, monkeypatch, busy_cores):
    from gradio_client import Client

    # the server's side, in this process: when Stop reached it, and each frame the run sent
    sent: list[tuple[float, int, bool]] = []
    stop_at: list[float] = []
    generate, stop = explore.generate, events.RUNS.stop

    decoded: list[tuple[float, int]] = []  # each token as the decoder made it (the page gets them in batches)

    def recorded_generate(*args, **kwargs):
        inner = kwargs["decoder"]

        def decoder(req, progress=None):
            for trace in inner(req, progress):
                decoded.append((time.perf_counter(), len(trace.tokens)))
                yield trace

        kwargs["decoder"] = decoder
        for frame in generate(*args, **kwargs):
            yield frame
            sent.append((time.perf_counter(), len(frame.trace.get("tokens") or []), "stopped at" in frame.status))

    def recorded_stop(session, wait_s=0.0):
        stop_at.append(time.perf_counter())
        return stop(session, wait_s)

    monkeypatch.setattr(explore, "generate", recorded_generate)
    monkeypatch.setattr(events.RUNS, "stop", recorded_stop)

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    query = share_query("smollm2-135m", "sampling", "Write a long story about a dragon and a lighthouse.", "", True, 1,
                        300, {"temperature": 0.8}, "greedy", {}, run="")
    page.goto(url.rstrip("/") + "/" + query)
    page.wait_for_function("() => document.querySelector('#pg-prompt textarea')?.value.startsWith('Write')")
    page.evaluate(OBSERVE)
    page.locator("#pg-generate").click()
    page.wait_for_function("() => document.querySelectorAll('#pg-text .pg-tok').length >= 6", timeout=240_000,
                           polling=20)
    # the second client: a long run queued behind the browser's, which starts as soon as Stop frees the model
    job = Client(url, verbose=False).submit("smollm2-135m", "sampling", "Tell me everything about the ocean.", "{}",
                                            2, 200, "", "auto", "auto", "", api_name="/generate")
    try:
        page.wait_for_function("() => document.querySelectorAll('#pg-text .pg-tok').length >= 8", timeout=120_000,
                               polling=20)
        log = page.evaluate("() => window.__log")
        counts = token_changes(log, 0.0)[-6:]
        step_s = (counts[-1][0] - counts[0][0]) / max(1, len(counts) - 1) / 1000
        clicked = page.evaluate(CLICK_STOP)
        page.wait_for_function("() => /stopped at step/.test(document.getElementById('pg-status').innerText)",
                               timeout=60_000, polling=20)
        page.wait_for_timeout(max(3000, int(3000 * step_s)))  # time for any late frame to show
        log = page.evaluate("() => window.__log")
        after = token_changes(log, clicked)
        shown = min(t for t, _, s in log if t >= clicked and STOPPED_AT.search(s))
        last_token = max([t for t, _ in after] or [clicked])
        print(f"\n[timing] stop under load: one step {step_s:.2f} s; {len(after)} token(s) after the click; "
              f"last token {(last_token - clicked) / 1000:.2f} s, 'stopped at step' "
              f"{(shown - clicked) / 1000:.2f} s after the click ({(shown - last_token) / 1000:.2f} s after the "
              f"last token)")
        # the server: after Stop reached it, the step in flight is the last (one more token at most), and its
        # final frame ("stopped at step n") follows that step within a second plus two steps' time (the
        # handler's thread waits for the scheduler as the step does: 1.53 s once at 0.50 s a step, with the
        # suite's other worker busy); nothing is sent after it
        assert stop_at, "Stop did not reach the server"
        late = [(t, n, fin) for t, n, fin in sent if t >= stop_at[0]]
        before = [n for t, n in decoded if t < stop_at[0]]
        tokens_then = before[-1] if before else 0  # decoded when Stop arrived, sent or not
        final_t = min(t for t, _, fin in late if fin)
        step_end = max([t for t, n, fin in late if not fin] or [stop_at[0]])
        print(f"[timing] server: {max(n for _, n, _ in late) - tokens_then} token(s) after Stop arrived "
              f"; final frame {final_t - stop_at[0]:.2f} s after it, "
              f"{final_t - step_end:.2f} s after the step in flight")
        assert max(n for _, n, _ in late) <= tokens_then + 1
        assert final_t - step_end < 1.0 + 2 * step_s
        assert all(n == late[-1][1] for t, n, _ in late if t >= final_t)
        # on screen: the step in flight at the click (one step's time, measured above), then a second at most
        assert (shown - clicked) / 1000 < step_s + STOP_SHOWN_S, \
            f"'stopped' showed {(shown - clicked) / 1000:.2f} s after the click (one step {step_s:.2f} s)"
        # the page: it ends on that final frame, and no token shows after its status says stopped
        page.wait_for_function("(n) => document.querySelectorAll('#pg-text .pg-tok').length === n && "
                               "/stopped at step/.test(document.getElementById('pg-status').innerText)",
                               arg=late[-1][1], timeout=60_000, polling=50)
        n_final = late[-1][1]
        status = page.locator("#pg-status").inner_text()
        assert STOPPED_AT.search(status).group(1) == str(n_final - 1)  # steps count from 0, as the slider does
        assert f"{n_final} tokens" in status
    finally:
        job.cancel()
        page.close()
