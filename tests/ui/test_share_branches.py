"""Share links of branches: a link made while a branch is shown carries its parent's run and the step
where the branch parts from it; opening it runs the parent, then the branch under it, on the real toy
model, through the page's own handlers and the events that chain them (no browser)."""
from __future__ import annotations

import dataclasses
import inspect
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

import gradio as gr
import pytest
from gradio.utils import deep_hash
from page_events import call

from playground.ui import share
from playground.ui.components import share_query
from playground.ui.page import build_demo

pytestmark = pytest.mark.filterwarnings("ignore:.*no_silent_downcasting")

SETTINGS = {"pg-model": "toy", "pg-strategy": "sampling", "pg-prompt": "1 2", "pg-seed": 3, "pg-max-new": 8}
STEP = 2


class Session:
    """One visitor's page on ``demo``: the components' values, and the page's events fired as the
    browser fires them (a handler's frames written into its outputs, then the events chained after it
    with .then / .success, then those listening to a State it changed)."""

    def __init__(self, demo: gr.Blocks):
        self.fns = list(demo.fns.values())
        self.values: dict[int, Any] = {}
        self.updates: dict[int, dict[str, Any]] = {}  # each component's last update (choices, visibility)
        self.by_id = {b.elem_id: b for b in demo.blocks.values() if getattr(b, "elem_id", None)}
        run_tree = self.fn("on_run")
        self.trace, self.tree = run_tree.inputs
        take = self.fn("take_pending")
        self.go, self.pending = take.outputs

    def fn(self, name: str) -> Any:
        return next(f for f in self.fns if getattr(f.fn, "__name__", "") == name)

    def get(self, comp: Any) -> Any:
        if isinstance(comp, str):
            comp = self.by_id[comp]
        return self.values[comp._id] if comp._id in self.values else getattr(comp, "value", None)

    def set(self, comp: Any, value: Any) -> None:
        if isinstance(comp, str):
            comp = self.by_id[comp]
        if isinstance(value, dict) and value.get("__type__") == "update":
            self.updates[comp._id] = {**self.updates.get(comp._id, {}), **value}
            if "value" in value:
                self.values[comp._id] = value["value"]
        else:
            self.values[comp._id] = value

    def fire(self, fn: Any, *args: Any) -> None:
        states = [c for c in fn.outputs if isinstance(c, gr.State)]
        before = {c._id: deep_hash(self.get(c)) for c in states}
        out = fn.fn(*args) if args else call(fn, self.get)
        ok = True
        try:
            for frame in out if inspect.isgenerator(out) else [out]:
                if frame == gr.skip() and len(fn.outputs) > 1:  # one skip for every output, as Gradio reads it
                    frame = [gr.skip()] * len(fn.outputs)
                if isinstance(frame, dict) and frame.get("__type__") != "update":
                    frame = [frame.get(c, gr.skip()) for c in fn.outputs]
                elif len(fn.outputs) == 1:
                    frame = [frame]
                for comp, value in zip(fn.outputs, frame):
                    self.set(comp, value)
        except gr.Error:
            ok = False
        for nxt in self.fns:
            if nxt.trigger_after == fn._id and nxt.fn is not None and (ok or not nxt.trigger_only_on_success):
                self.fire(nxt)
        for comp in states:
            if deep_hash(self.get(comp)) != before[comp._id]:
                for nxt in self.fns:
                    if (comp._id, "change") in nxt.targets and nxt.fn is not None:
                        self.fire(nxt)

    def generate(self) -> None:
        """A click on Generate (what a link with run=generate does once restored)."""
        self.fire(self.fn("run_explore"))

    def open(self, query: str) -> None:
        """The page opened at ``query``: its load event restores the controls."""
        self.fire(self.fn("on_load"), SimpleNamespace(query_params=dict(parse_qsl(query.lstrip("?")))))

    def share(self) -> str:
        self.fire(self.fn("on_share"))
        return self.get("pg-link")


@pytest.fixture(scope="module")
def demo(store):
    demo = build_demo(store)
    yield demo
    demo.close()


@pytest.fixture(scope="module")
def shared(demo, toy):
    """A visitor's run, a branch of it at STEP with another token, and the link copied while it is shown."""
    page = Session(demo)
    for key, value in SETTINGS.items():
        page.set(key, value)
    page.generate()
    parent = page.get(page.trace)
    token = (parent["tokens"][STEP]["id"] + 1) % toy.vocab_size
    page.set("pg-step", STEP)
    page.set("pg-branch-token", str(token))
    page.fire(page.fn("on_typed"))  # the typed token's branch run
    child = page.get(page.trace)
    tree = page.get(page.tree)
    assert [n["parent"] for n in tree["nodes"]] == [None, 0] and tree["current"] == 1
    return SimpleNamespace(parent=parent, child=child, token=token, query=page.share())


def ids(trace: dict[str, Any]) -> list[int]:
    return [t["id"] for t in trace["tokens"]]


def test_a_branch_config_round_trips_through_its_link():
    cfg = share.Config(model="toy", strategy="greedy", prompt="1 2", chat=False, seed=4, max_new_tokens=9,
                       forced="0:9,3:12", branch="3", run="generate")
    query = share.encode(cfg)
    assert "force=0%3A9%2C3%3A12" in query and "branch=3" in query
    back, warnings = share.decode(query)
    assert warnings == [] and back == cfg
    assert share.split_branch(back) == ("0:9", "3:12")  # the parent's forced path, the branch's own step
    # a link of one run (no branch) is as before: no branch key, its whole forced path one run's
    plain = dataclasses.replace(cfg, branch="")
    assert "branch" not in share.encode(plain) and share.split_branch(plain) == ("0:9,3:12", "")


def test_the_link_of_a_branch_of_the_default_run_is_short():
    d = share.defaults()
    query = share_query(d.model, d.strategy, d.prompt, d.system, d.chat, d.seed, d.max_new_tokens,
                        share.strategy_defaults(d.strategy), d.compare_strategy,
                        share.strategy_defaults(d.compare_strategy), run="generate", forced="17:12345", branch="17")
    assert len(query) < 300
    assert dict(parse_qsl(query[1:])) == {"force": "17:12345", "branch": "17", "run": "generate"}


def test_bad_branch_steps_in_a_link_are_dropped_with_a_warning_naming_them():
    cfg, warnings = share.decode("?model=toy&force=0:9,3:12&branch=5")
    assert (cfg.forced, cfg.branch) == ("0:9,3:12", "")  # the forced path still restores, as one run
    assert warnings == ["ignored branch='5': its steps must be forced steps of the link (0, 3)"]
    cfg, warnings = share.decode("?model=toy&branch=3")
    assert cfg.branch == "" and "ignored branch='3': the link has no forced tokens" in warnings[0]


def test_the_page_link_of_a_branch_names_its_parent_and_the_step(shared):
    pairs = dict(parse_qsl(shared.query[1:]))
    assert pairs["force"] == f"{STEP}:{shared.token}" and pairs["branch"] == str(STEP)
    assert pairs["model"] == "toy" and pairs["seed"] == "3" and len(shared.query) < 300


def test_the_page_link_of_a_plain_run_has_no_branch(demo):
    page = Session(demo)
    for key, value in SETTINGS.items():
        page.set(key, value)
    page.generate()
    query = page.share()
    assert "branch" not in dict(parse_qsl(query[1:]))
    fresh = Session(demo)
    fresh.open(query)
    assert fresh.get(fresh.pending) is None


def test_opening_a_branch_link_runs_the_parent_then_the_branch_under_it(demo, shared):
    page = Session(demo)
    page.open(shared.query)
    assert page.get("pg-forced") == "" and page.get(page.pending) == {"parent": "", "branch": f"{STEP}:{shared.token}"}
    assert page.get("pg-model") == "toy" and page.get(page.tree) is None
    page.generate()
    tree = page.get(page.tree)
    assert [n["parent"] for n in tree["nodes"]] == [None, 0] and tree["current"] == 1
    assert ids(tree["nodes"][0]["trace"]) == ids(shared.parent)
    assert ids(tree["nodes"][1]["trace"]) == ids(shared.child) and ids(page.get(page.trace)) == ids(shared.child)
    # the Branches panel lists the parent with the branch under it, the branch selected
    radio = page.updates[page.by_id["pg-branch-tree"]._id]
    assert [i for _, i in radio["choices"]] == [0, 1] and radio["value"] == 1
    assert radio["choices"][0][0].startswith("run: ") and f"└ step {STEP} → " in radio["choices"][1][0]
    assert page.get(page.pending) is None and page.get("pg-forced") == f"{STEP}:{shared.token}"
    # the branch runs once: the next Generate is the branch's own run again, the tree unchanged
    page.generate()
    assert len(page.get(page.tree)["nodes"]) == 2


@pytest.mark.parametrize("change, message", [
    ("step", r"the branch step must be an integer in \[0, {last}\], got 40"),
    ("token", r"forced token ids must be in \[0, {vocab}\], got 99999"),
])
def test_bad_branch_data_is_named_with_its_range_and_the_parent_still_restores(demo, shared, toy, change, message):
    query = shared.query.replace(f"{STEP}%3A{shared.token}", "40%3A5" if change == "step" else f"{STEP}%3A99999")
    query = query.replace(f"branch={STEP}", "branch=40" if change == "step" else f"branch={STEP}")
    page = Session(demo)
    page.open(query)
    expected = message.format(last=len(shared.parent["tokens"]) - 1, vocab=toy.vocab_size - 1)
    with pytest.warns(UserWarning, match=expected) as caught:
        page.generate()
    assert any("The run it branches from is shown" in str(w.message) for w in caught)
    tree = page.get(page.tree)
    assert len(tree["nodes"]) == 1 and ids(tree["nodes"][0]["trace"]) == ids(shared.parent)
    assert ids(page.get(page.trace)) == ids(shared.parent) and page.get(page.pending) is None


def test_a_new_run_takes_the_last_runs_link_off_the_page(demo):
    """The link box shows the link copied for the run on screen; Generate, Compare or a branch starts
    another run, and the old link goes (it would share a run no longer shown)."""
    page = Session(demo)
    link = page.share()
    assert link and page.updates[page.by_id["pg-link"]._id].get("visible") is True
    hide = page.fn("hide_link")
    triggers = {(demo.blocks[i].elem_id, event) for i, event in hide.targets}
    assert {("pg-generate", "click"), ("pg-compare-run", "click"), ("pg-branch-run", "click")} <= triggers
    page.fire(hide)
    assert page.get("pg-link") == "" and page.updates[page.by_id["pg-link"]._id]["visible"] is False


def test_the_branch_example_runs_greedy_then_its_branch_and_keeps_its_note(demo):
    """The chip restores like a link (the parent in the forced box, the branch pending); Generate, which the
    chip clicks, runs the parent, then the branch under it; the note describes both and stays."""
    from playground.ui.examples import examples
    shown = examples()
    ex = next(ex for ex in shown if ex.config.branch)
    page = Session(demo)
    buttons = [b for b in demo.blocks.values() if isinstance(b, gr.Button) and "pg-example" in (b.elem_classes or [])]
    page.fire(page.fn("on_example"), SimpleNamespace(target=buttons[shown.index(ex)]))
    assert ex.run_flag == "generate" and page.get(page.pending) == {"parent": "", "branch": "0:9"}
    generate = page.by_id["pg-generate"]._id
    page.fire(next(f for f in page.fns if (generate, "click") in f.targets and getattr(f.fn, "__name__", "") == "on_run"))
    page.generate()
    tree = page.get(page.tree)
    texts = [node["trace"]["text"] for node in tree["nodes"]]
    assert texts == ["a time there lived happily ever", "the hill rose high happily ever"] and tree["current"] == 1
    assert all(f"'{text}'" in ex.note for text in texts)
    assert page.get("pg-example-note").startswith(f"**{ex.label}**")
