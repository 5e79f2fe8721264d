"""Regenerate the README's screenshots from the real app, in Debian's Chromium driven by Playwright.

    python -m playground.tools.screenshots             # toy, SmolLM2 and compare scenes -> assets/screenshots/
    python -m playground.tools.screenshots --gemma     # also the Gemma repetition-loop scene (slow on a CPU)

Each scene is a share link with ``run=...``: opening it restores the controls and runs, exactly as
a reader's click on a shared link would. Needs /usr/bin/chromium (or $CHROMIUM); never downloads one.

A full run (no ``--only``) also writes ``layout.json`` beside the images (``MANIFEST``): the facts of the
page's layout that the images show (the examples row, the sidebar's order, the tabs), read from the page
the images were taken of. tests/tools/test_screenshots.py compares it with the page as defined now, so a
change to those facts without new images fails there, naming ``make screenshots``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playground import ASSETS
from playground.models import ModelStore
from playground.ui import serve, share

ROOT = ASSETS.parent
OUT = ASSETS / "screenshots"
MANIFEST = "layout.json"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
DONE_JS = """(ids) => ids.every((id) => {
  const el = document.getElementById(id);
  return el && /finished|reached max|stopped/.test(el.innerText || '');
})"""


def chromium_path() -> str | None:
    """Debian's Chromium (or $CHROMIUM); None when there is none."""
    path = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    return path if Path(path).exists() else None


def launch_browser(playwright: Any) -> Any:
    path = chromium_path()
    if path is None:
        raise RuntimeError("no Chromium at /usr/bin/chromium (apt-get install chromium, or set $CHROMIUM)")
    return playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)


def wait_done(page: Any, status_ids: list[str], timeout_s: float) -> None:
    """Until every named status line says the run finished (or stopped)."""
    page.wait_for_function(DONE_JS, arg=status_ids, timeout=timeout_s * 1000, polling=200)


@dataclass(frozen=True)
class Scene:
    name: str
    query: str
    status_ids: tuple[str, ...] = ("pg-status",)
    theme: str = "light"
    crops: tuple[tuple[str, str], ...] = ()  # (element id, file suffix): extra element-only shots
    timeout_s: float = 300
    width: int = 1600  # 390: a phone
    height: int = 1000


def scenes(gemma: bool) -> list[Scene]:
    def link(**kw: Any) -> str:
        return share.encode(share.Config(**kw))

    chain = dict(temperature=1.0, top_k=12, top_p=0.8, min_p=0.08)
    out = [
        Scene("toy-branch", link(model="toy", strategy="sampling", prompt="1 2", seed=4, max_new_tokens=12,
                                 params={"temperature": 1.0}, run="generate")),
        Scene("smollm2-chain", link(model="smollm2-135m", strategy="sampling", seed=1, max_new_tokens=24,
                                    prompt="Give me a name for a friendly robot.", params=chain, run="generate"),
              crops=(("pg-dist", "distribution"), ("pg-waterfall", "waterfall"), ("pg-text", "text"))),
        Scene("smollm2-chain-dark", link(model="smollm2-135m", strategy="sampling", seed=1, max_new_tokens=24,
                                         prompt="Give me a name for a friendly robot.", params=chain,
                                         run="generate"), theme="dark", crops=(("pg-dist", "distribution"),)),
        Scene("compare-top-p-min-p", link(model="smollm2-135m", strategy="sampling", seed=7, max_new_tokens=20,
                                          prompt="Write one sentence about the ocean.",
                                          params={"temperature": 2.0, "top_p": 0.9}, compare_strategy="sampling",
                                          compare_params={"temperature": 2.0, "min_p": 0.1}, run="compare"),
              status_ids=("pg-status-a", "pg-status-b")),
        Scene("toy-beam", link(model="toy", strategy="beam", prompt="1 2", max_new_tokens=12, run="generate")),
        Scene("toy-speculative-dark", link(model="toy", strategy="speculative", prompt="1 2", seed=3,
                                           max_new_tokens=12, params={"draft": "toy-small"}, run="generate"),
              theme="dark"),
        Scene("phone-sampling", link(model="toy", strategy="sampling", prompt="1 2", seed=4, max_new_tokens=12,
                                     params={"temperature": 1.0, "top_k": 5}, run="generate"),
              width=390, height=844),
        Scene("dense-beam", link(model="smollm2-135m", strategy="beam", prompt="Write a short poem about rain.",
                                 max_new_tokens=40, params={"num_beams": 16}, run="generate"),
              crops=(("pg-view-0", "tree"),), timeout_s=600),
    ]
    if gemma:
        out.append(Scene("gemma-loop", link(model="gemma3-270m", strategy="greedy", max_new_tokens=40, chat=False,
                                            prompt="The best way to learn a new language is", run="generate"),
                         timeout_s=900))
    return out


def shoot(url: str, out_dir: Path, chosen: list[Scene]) -> list[Path]:
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as p:
        browser = launch_browser(p)
        for scene in chosen:
            page = browser.new_page(viewport={"width": scene.width, "height": scene.height},
                                    color_scheme=scene.theme)
            sep = "&" if "?" in scene.query else "?"
            page.goto(url.rstrip("/") + "/" + scene.query + f"{sep}__theme={scene.theme}")
            started = time.perf_counter()
            wait_done(page, list(scene.status_ids), scene.timeout_s)
            page.wait_for_timeout(1500)  # let plotly finish its last layout
            path = out_dir / f"{scene.name}.png"
            page.screenshot(path=str(path), full_page=scene.width > 500)  # a phone: its first screen
            written.append(path)
            for elem_id, suffix in scene.crops:
                crop = out_dir / f"{scene.name}-{suffix}.png"
                page.locator(f"#{elem_id}").screenshot(path=str(crop))
                written.append(crop)
            print(f"{scene.name}: {time.perf_counter() - started:.1f} s", flush=True)
            page.close()
        browser.close()
    return written


def layout_facts(demo: Any) -> dict[str, Any]:
    """What the screenshots show of the page's layout, read from the built page ``demo`` (a gr.Blocks):
    the examples row's buttons, the sidebar's controls and groups in order (by label; text without one,
    such as the strategy's summary, is left out), and the tabs. The strategy menu is left out: the
    images show it closed, on one strategy."""
    components = {c["id"]: c for c in demo.config["components"]}

    def props(node: dict[str, Any]) -> dict[str, Any]:
        return components.get(node["id"], {}).get("props", {})

    def find(node: dict[str, Any], elem_id: str) -> dict[str, Any] | None:
        if props(node).get("elem_id") == elem_id:
            return node
        return next((hit for child in node.get("children", []) if (hit := find(child, elem_id))), None)

    def labels(node: dict[str, Any]) -> list[str]:
        """The labels under ``node`` in order; a labelled group (an accordion) counts once, as itself."""
        out: list[str] = []
        for child in node.get("children", []):
            label = props(child).get("label")
            out.extend([str(label)] if label else labels(child))
        return out

    def under(elem_id: str) -> dict[str, Any]:
        node = find(demo.config["layout"], elem_id)
        if node is None:
            raise LookupError(f"the page has no #{elem_id}")
        return node

    buttons = [props(child).get("value") for child in under("pg-examples").get("children", [])
               if components.get(child["id"], {}).get("type") == "button"]
    return {"examples": {"count": len(buttons), "labels": buttons},
            "sidebar": labels(under("pg-sidebar")),
            "tabs": labels(under("pg-tabs"))}


def write_manifest(out_dir: Path, demo: Any) -> Path:
    """``layout_facts(demo)`` as ``out_dir/layout.json``: the layout the images there were taken of."""
    path = out_dir / MANIFEST
    path.write_text(json.dumps(layout_facts(demo), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gemma", action="store_true", help="also the Gemma repetition-loop scene")
    parser.add_argument("--only", nargs="*", help="scene names to shoot")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if chromium_path() is None:
        print("error: no Chromium at /usr/bin/chromium (apt-get install chromium, or set $CHROMIUM)",
              file=sys.stderr)
        return 2

    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in scenes(args.gemma) if not args.only or s.name in args.only]
    demo, url = serve(ModelStore())
    try:
        written = shoot(url, args.out, chosen)
        if not args.only:  # every image retaken: they show the page's layout as it is now
            written.append(write_manifest(args.out, demo))
        for path in written:
            print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
