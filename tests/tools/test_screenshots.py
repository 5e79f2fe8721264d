"""The README's screenshots against the page: ``make screenshots`` writes the layout facts its images show
(``assets/screenshots/layout.json``: the examples row, the sidebar's order, the tabs) and this holds them to
the page as defined now, so an example added or the sidebar reordered without new images fails here."""
from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest

from playground.tools import screenshots
from playground.ui.page import build_demo

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]


def small_page(examples: list[str], sidebar: list[str]) -> gr.Blocks:
    """A page with the three regions the facts are read from, in the real page's element ids."""
    with gr.Blocks() as demo:
        with gr.Row(elem_id="pg-examples"):
            gr.HTML("One click:")
            for label in examples:
                gr.Button(label)
        with gr.Column(elem_id="pg-sidebar"):
            for label in sidebar:
                if label.startswith("group "):
                    with gr.Accordion(label):
                        gr.Number(label="inside the group")
                else:
                    gr.Number(label=label)
            gr.Markdown("a summary, no label")
        with gr.Tabs(elem_id="pg-tabs"):
            with gr.Tab("One"):
                gr.Markdown("")
            with gr.Tab("Two"):
                gr.Markdown("")
    return demo


def test_the_facts_are_the_examples_the_sidebar_order_and_the_tabs():
    facts = screenshots.layout_facts(small_page(["a", "b"], ["Seed", "group params", "Chat"]))
    assert facts == {"examples": {"count": 2, "labels": ["a", "b"]}, "sidebar": ["Seed", "group params", "Chat"],
                     "tabs": ["One", "Two"]}
    assert screenshots.layout_facts(small_page(["a", "b"], ["group params", "Seed", "Chat"]))["sidebar"] != \
        facts["sidebar"]


def test_a_full_run_writes_the_manifest_and_a_partial_one_does_not(monkeypatch, tmp_path):
    demo = small_page(["a"], ["Seed"])
    monkeypatch.setattr(screenshots, "chromium_path", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(screenshots, "serve", lambda store: (demo, "http://127.0.0.1:1/"))
    monkeypatch.setattr(screenshots, "shoot", lambda url, out, chosen: [])
    monkeypatch.setattr(screenshots, "ModelStore", lambda: None)
    monkeypatch.setattr(demo, "close", lambda: None)
    assert screenshots.main(["--out", str(tmp_path), "--only", "toy-beam"]) == 0
    assert not (tmp_path / screenshots.MANIFEST).exists()  # some images retaken: the rest may be older
    assert screenshots.main(["--out", str(tmp_path)]) == 0
    written = json.loads((tmp_path / screenshots.MANIFEST).read_text(encoding="utf-8"))
    assert written == screenshots.layout_facts(demo)


def test_the_screenshots_show_the_page_as_it_is_laid_out_now(store):
    path: Path = screenshots.OUT / screenshots.MANIFEST
    now = screenshots.layout_facts(build_demo(store))
    assert path.exists(), f"{path.name} is missing from assets/screenshots/: run `make screenshots`"
    shown = json.loads(path.read_text(encoding="utf-8"))
    changed = [key for key in sorted(now.keys() | shown.keys()) if now.get(key) != shown.get(key)]
    assert not changed, (f"the README's screenshots show an older page ({', '.join(changed)} changed since: "
                         f"{ {k: shown.get(k) for k in changed} } then, { {k: now.get(k) for k in changed} } now): "
                         "run `make screenshots`")
