"""How the page keeps up with the decoder on a busy machine: the real app (``app.py``, SmolLM2 preloaded, as
``make run`` starts it) in Chromium, with a busy process on every core.

For each run it prints, read in the page (a MutationObserver, times from ``performance.now()``):
- first token: the click to the first token on screen;
- first chart: the first token to the first chart drawn (the distribution, or a strategy view such as beam's tree);
- done: the click to the status line's "finished" / "reached max new tokens";
- the decoder's own seconds for the run (the trace's ``timing.seconds``, from the page's JSON download) and the
  ratio page done / decoder: the reference run in the same process is the decoder itself, 1.0 is a page that
  shows the end the moment the decoder has it;
- Stop: the click to "stopped at step n" on screen, and the tokens that showed after the click.

The first run is the first Generate of a fresh server with the page's defaults (a new user's first click).

    .venv/bin/python bench/bench_page.py                # load on every core, the four runs
    .venv/bin/python bench/bench_page.py --quick        # shorter runs
    .venv/bin/python bench/bench_page.py --root DIR     # serve another checkout's app.py (a before/after pair)
    .venv/bin/python bench/bench_page.py --load 0       # an idle machine
    .venv/bin/python bench/bench_page.py --examples     # also every example, opened by its link under the load
    .venv/bin/python bench/bench_page.py --budget 60    # with a Space's per-run time budget
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from playground.tools.screenshots import launch_browser  # noqa: E402
from playground.ui import share  # noqa: E402
from playground.ui.components import share_query  # noqa: E402
from playground.ui.examples import examples  # noqa: E402

SMOL = "smollm2-135m"
STORY = "Write a very long, detailed story about a dragon who guards a lighthouse. Use at least 500 words."

OBSERVE = """() => {
  window.__log = [];
  const probe = () => [performance.now(),
      document.querySelectorAll('#pg-text .pg-tok').length,
      document.getElementById('pg-status')?.innerText || '',
      document.querySelectorAll('#pg-dist .barlayer .point path').length
        + document.querySelectorAll('#pg-views .js-plotly-plot .trace').length];
  window.__probe = probe;
  for (const id of ['pg-text', 'pg-status', 'pg-dist', 'pg-views']) {
    const el = document.getElementById(id);
    if (el) new MutationObserver(() => window.__log.push(probe()))
        .observe(el, {childList: true, subtree: true, characterData: true, attributes: true});
  }
}"""
CLICK = "(id) => { const t = performance.now(); document.getElementById(id).click(); return t; }"
DONE = "() => /finished|reached max|stopped|time budget|Not run/.test(document.getElementById('pg-status')?.innerText || '')"
TRACE_SECONDS = """async () => {
  const a = document.querySelector('#pg-trace-file a[href]');
  if (!a) return null;
  const d = await (await fetch(a.href)).json();
  return [d.timing?.seconds ?? null, d.finish_reason, (d.tokens || []).length];
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path, port: int, timeout_s: float, budget: float | None = None) -> subprocess.Popen:
    env = {**os.environ, "PORT": str(port), "PLAYGROUND_MODEL": SMOL, "PYTHONPATH": str(root),
           "PYTHONUNBUFFERED": "1"}
    env.pop("SPACE_ID", None)
    if budget is not None:  # the per-run time budget a Space runs with (none on a local server)
        env["PLAYGROUND_TIME_BUDGET"] = str(budget)
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + timeout_s
    assert proc.stdout is not None
    for line in proc.stdout:
        if "Running on" in line:
            return proc
        if time.time() > deadline:
            break
    proc.kill()
    raise SystemExit(f"the app at {root} did not start within {timeout_s:.0f} s")


def start_load(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def first_after(log: list[list[Any]], since: float, index: int) -> float | None:
    return next((row[0] for row in log if row[0] >= since and row[index] > 0), None)


def run_once(browser: Any, url: str, query: str, prompt: str = "", stop_after: int = 0,
             timeout_s: float = 600) -> dict[str, Any]:
    """One Generate on a fresh page (its link's ``prompt`` shown first, where it has one); with ``stop_after``,
    Stop once that many tokens show."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(url + query)
        page.wait_for_selector("#pg-generate", timeout=120_000)
        # the link's settings are on the page: Generate is enabled once the load event has put them in
        page.wait_for_function("() => document.getElementById('pg-generate')?.disabled === false", timeout=60_000)
        page.wait_for_function("(p) => { const v = document.querySelector('#pg-prompt textarea')?.value;"
                               " return p ? v === p : v?.length > 0; }", arg=prompt, timeout=60_000)
        page.evaluate(OBSERVE)
        clicked = page.evaluate(CLICK, "pg-generate")
        out: dict[str, Any] = {}
        if stop_after:
            page.wait_for_function(f"() => document.querySelectorAll('#pg-text .pg-tok').length >= {stop_after}",
                                   timeout=timeout_s * 1000, polling=20)
            stop = page.evaluate(CLICK, "pg-stop")
            page.wait_for_function("() => /stopped at step/.test(document.getElementById('pg-status').innerText)",
                                   timeout=timeout_s * 1000, polling=20)
            log = page.evaluate("() => window.__log")
            shown = min(row[0] for row in log if row[0] >= stop and "stopped at step" in row[2])
            at_click = max([row[1] for row in log if row[0] < stop] or [0])
            page.wait_for_timeout(2000)  # any token that would still come
            log = page.evaluate("() => window.__log")
            out.update(stop_s=(shown - stop) / 1000, after_stop=max(row[1] for row in log) - at_click)
        else:
            page.wait_for_function(DONE, timeout=timeout_s * 1000, polling=20)
        log = page.evaluate("() => window.__log")
        done = min((row[0] for row in log if row[0] >= clicked and any(
            w in row[2] for w in ("finished", "reached max", "stopped", "time budget", "Not run"))), default=None)
        token = first_after(log, clicked, 1)
        chart = first_after(log, token or clicked, 3)
        out.update(first_token_s=(token - clicked) / 1000 if token else None,
                   first_chart_s=(chart - token) / 1000 if chart and token else None,
                   done_s=(done - clicked) / 1000 if done else None, status=log[-1][2] if log else "")
        page.locator("#pg-export").click()  # the accordion holding the JSON download
        try:
            page.wait_for_selector("#pg-trace-file a[href]", timeout=30_000)
            got = page.evaluate(TRACE_SECONDS)
        except Exception:  # an older page without the download: the decoder's seconds are not read
            got = None
        if got:
            out.update(decoder_s=got[0], finish=got[1], tokens=got[2])
        return out
    finally:
        page.close()


EXAMPLE_DONE = """(ids) => ids.every(id => /finished|reached max|stopped|time budget|Not run|ended/.test(
    document.getElementById(id)?.innerText || ''))"""
EXAMPLE_STATUS = "(ids) => ids.map(id => document.getElementById(id)?.innerText || '')"


def run_example(browser: Any, url: str, config: share.Config, timeout_s: float = 900) -> tuple[float, list[str]]:
    """An example opened by its link (it runs on load, as its button runs it): seconds to done, status lines."""
    ids = ["pg-status-a", "pg-status-b"] if config.run == "compare" else ["pg-status"]
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        start = time.perf_counter()
        page.goto(url + share.encode(config))
        page.wait_for_function(EXAMPLE_DONE, arg=ids, timeout=timeout_s * 1000, polling=100)
        return time.perf_counter() - start, page.evaluate(EXAMPLE_STATUS, ids)
    finally:
        page.close()


def fmt(x: float | None, unit: str = " s") -> str:
    return "n/a" if x is None else f"{x:.2f}{unit}"


def report(name: str, r: dict[str, Any]) -> None:
    ratio = (r["done_s"] / r["decoder_s"]) if r.get("done_s") and r.get("decoder_s") else None
    line = (f"{name:<7} {r.get('tokens', '?')} tokens ({r.get('finish', '?')}): first token {fmt(r['first_token_s'])}, "
            f"first chart {fmt(r['first_chart_s'])} after it, done {fmt(r['done_s'])}; decoder {fmt(r.get('decoder_s'))}")
    if ratio is not None:
        line += f"; ratio page done / decoder {ratio:.3f}"
    if "stop_s" in r:
        line += f"; Stop: 'stopped' on screen {r['stop_s']:.2f} s after the click, {r['after_stop']} token(s) after it"
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose app.py is served")
    ap.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy processes (default: one a core)")
    ap.add_argument("--quick", action="store_true", help="shorter runs (48-token story, 12-token beam)")
    ap.add_argument("--examples", action="store_true", help="also open every example by its link and time it")
    ap.add_argument("--budget", type=float, default=None,
                    help="a per-run time budget in seconds, as on a Space (default: none, as `make run`)")
    ap.add_argument("--start-timeout", type=float, default=900)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    story_tokens, beam_tokens = (48, 12) if args.quick else (128, 32)
    runs = [("first", "", "", 0),
            ("story", share_query(SMOL, "sampling", STORY, "", True, 1, story_tokens, {}, "greedy", {}, run=""), STORY, 0),
            ("beam", share_query(SMOL, "beam", STORY, "", True, 1, beam_tokens, {}, "greedy", {}, run=""), STORY, 0),
            ("stop", share_query(SMOL, "sampling", STORY, "", True, 2, 300, {}, "greedy", {}, run=""), STORY, 8)]
    port = free_port()
    t0 = time.perf_counter()
    server = start_server(args.root.resolve(), port, args.start_timeout, args.budget)
    print(f"app at {args.root} ready in {time.perf_counter() - t0:.1f} s; {args.load} busy process(es) on "
          f"{os.cpu_count()} core(s); time budget {args.budget or 'none'}", flush=True)
    load = start_load(args.load)
    try:
        with sync_playwright() as p:
            browser = launch_browser(p)
            for name, query, prompt, stop_after in runs:
                report(name, run_once(browser, f"http://127.0.0.1:{port}/", query, prompt, stop_after))
            for ex in examples() if args.examples else ():
                seconds, lines = run_example(browser, f"http://127.0.0.1:{port}/", ex.config)
                ends = [line.split(" · ")[-1] for line in lines]
                counts = [next((p for p in line.split(" · ") if p.endswith(("tokens", "token"))), "?") for line in lines]
                print(f"example {ex.label!r}: {seconds:.1f} s; " + "; ".join(
                    f"{n}, {e}" for n, e in zip(counts, ends)), flush=True)
            browser.close()
    finally:
        for proc in load:
            proc.kill()
        server.kill()
        server.wait()
    print(json.dumps({"root": str(args.root), "load": args.load}), flush=True)


if __name__ == "__main__":
    main()
