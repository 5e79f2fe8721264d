"""A share link restores the run it was made from: every control of the page that changes a run, set at
random (seeded) within its allowed range, goes through the page's own "Copy share link", then through a
fresh page's restore, and the restored page's Generate sends the same request. A value over its limit is
refused with the value and the limit, never cut. The page's handlers are called as the browser calls
them; no model runs (the decoder records the request)."""
from __future__ import annotations

import dataclasses
import random
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

import gradio as gr
import pytest
from page_events import call

from playground.engine import MAX_SEED, MAX_TEXT_CHARS, run
from playground.errors import InvalidRequest
from playground.models import MAX_NEW_TOKENS
from playground.models.dtypes import DTYPES
from playground.ui import share
from playground.ui.controls import GRAMMAR_CHOICES, NO_GRAMMAR, move_stage, panel_params
from playground.ui.page import build_demo
from strategies.params import check_value, field_kind
from strategies.registry import all_strategies, get_strategy
from strategies.sampling.grammar import EXAMPLES as GRAMMAR_EXAMPLES
from strategies.sampling.grammar import MAX_GRAMMAR_CHARS
from strategies.sampling.samplers import PRESETS, SAMPLER_STAGES

CASES = 80
FILLED = {f"pg-p-{p.name}" for p in panel_params() if p.control.filled}  # controls a run writes back
TEXT = "aé ✓&?=#+%/\n\"'<>{}[]日本 1 2 3"  # what a query string must escape, and more


@pytest.fixture(scope="module")
def page(store):
    """The page's handlers: Generate (recording each request), Copy share link, and the restore on load."""
    sent: list[Any] = []
    decoding = {"on": False}  # off: the decoder only records the request

    def decoder(req, progress=None):
        sent.append(req)
        return iter([run(store, req)] if decoding["on"] else ())

    demo = build_demo(store, decoder=decoder)
    fns = list(demo.fns.values())
    ids = lambda comps: [getattr(c, "elem_id", None) for c in comps]  # noqa: E731
    handlers = SimpleNamespace(
        explore=next(f for f in fns if f.api_name == "explore"),
        link=next(f for f in fns if "pg-link" in ids(f.outputs) and len(f.inputs) > 5),
        load=next(f for f in fns if not f.inputs and "pg-model" in ids(f.outputs)
                  and "pg-example-note" not in ids(f.outputs)),
        pair=next(c for f in fns if f.api_name == "lockstep" for c in f.outputs if isinstance(c, gr.State)),
        scored=next(c for f in fns if f.api_name == "score" for c in f.outputs if isinstance(c, gr.State)),
        sent=sent, decoding=decoding)
    yield handlers
    demo.close()


def fresh_state(page) -> dict[int, Any]:
    """Every component of a page just opened, at its initial value."""
    comps = [*page.explore.inputs, *page.link.inputs, *page.load.outputs]
    return {id(c): getattr(c, "value", None) for c in comps}


def generate(page, state: dict[int, Any]) -> Any:
    """Press Generate on a page in ``state``: the request the run would decode."""
    page.sent.clear()
    list(call(page.explore, lambda c: state[id(c)]))
    assert len(page.sent) == 1
    return page.sent[0]


def copy_link(page, state: dict[int, Any], pair_record: dict[str, Any] | None = None) -> str:
    return call(page.link, lambda c: pair_record if c is page.pair else state[id(c)])["value"]


def written(outputs, frame) -> dict[int, Any]:
    """A handler's return value as {id(output): value}, as Gradio reads it: by component where it is keyed
    (the outputs it leaves out skipped), else by place."""
    if isinstance(frame, dict) and frame.get("__type__") == "update":  # one skip for every output
        return {id(c): frame for c in outputs}
    if isinstance(frame, dict):
        return {id(c): frame.get(c, gr.skip()) for c in outputs}
    return {id(c): value for c, value in zip(outputs, frame)}


def open_link(page, query: str) -> dict[int, Any]:
    """A fresh page opened at ``query``: its state once the restore's updates are applied."""
    state = fresh_state(page)
    request = SimpleNamespace(query_params=dict(parse_qsl(query.lstrip("?"), keep_blank_values=True)))
    updates = written(page.load.outputs, page.load.fn(request))
    for comp, update in ((c, updates[id(c)]) for c in page.load.outputs):
        if isinstance(update, dict) and update.get("__type__") == "update":
            if "value" in update:
                state[id(comp)] = update["value"]
        elif not isinstance(update, gr.components.Component | gr.blocks.BlockContext):
            state[id(comp)] = update
    return state


def random_text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(TEXT) for _ in range(rng.randint(0, longest)))


def random_value(rng: random.Random, comp: Any) -> Any:
    """A value a person could set ``comp`` to, within its allowed range."""
    elem = getattr(comp, "elem_id", "") or ""
    if elem == "pg-seed":
        return rng.randint(0, MAX_SEED)
    if elem == "pg-max-new":
        return rng.randint(1, MAX_NEW_TOKENS)
    if elem == "pg-dtype":
        return rng.choice(DTYPES)
    if elem == "pg-forced":
        return ",".join(f"{k}:{rng.randint(0, 15)}" for k in sorted(rng.sample(range(12), rng.randint(0, 3))))
    if elem == "pg-grammar-text":
        return None  # set with its kind (random_state)
    if elem.endswith("-order"):
        order = rng.choice(list(PRESETS))
        for _ in range(rng.randint(0, 3)):
            order = move_stage(order, rng.choice(SAMPLER_STAGES), rng.choice((-2, -1, 1, 2)))
        return order
    if elem.endswith("-word_bias"):
        return rng.choice(["", "sky=2.5", "blue, red=-1.5", "the=-inf"])
    if elem.endswith("-dry_sequence_breakers"):
        return rng.choice(['"\\n", ":"', '"."', '"é", "&", "?"'])
    if elem.endswith("-eagle_auto_tree"):
        return rng.choice(["", "1x1", "4x2", "8x1", "2x3"])
    if isinstance(comp, gr.Checkbox):
        return rng.random() < 0.5
    if isinstance(comp, gr.Dropdown):
        return rng.choice([value for _, value in comp.choices])
    if isinstance(comp, gr.Slider | gr.Number):
        low = comp.minimum if comp.minimum is not None else -50
        high = comp.maximum if comp.maximum is not None else 50
        step = comp.step or 1
        while True:  # a slider keeps an open end on it (a run refuses it): draw inside the declared range
            value = low + step * rng.randint(0, int(round((high - low) / step)))
            value = int(round(value)) if float(step).is_integer() and float(low).is_integer() else round(value, 6)
            if allowed(elem, value):
                return value
    if isinstance(comp, gr.Textbox):
        return random_text(rng, 300)
    return getattr(comp, "value", None)


def allowed(elem: str, value: Any) -> bool:
    """Whether ``value`` is in the declared range of the parameter whose control is ``elem``
    ("pg-p-<name>", one control for every strategy that reads it, each declaring the same range); True for the
    page's other controls."""
    for prefix in ("pg-p-", "pg-b-"):
        if elem.startswith(prefix):
            fields = [f for spec in all_strategies() for f in dataclasses.fields(spec.params)
                      if f.name == elem[len(prefix):]]
            for field in fields:
                try:
                    check_value(field.name, value, field.metadata, field_kind(field))
                except InvalidRequest:
                    return False
    return True


def random_state(page, rng: random.Random) -> dict[int, Any]:
    state = fresh_state(page)
    for comp in page.explore.inputs:
        if getattr(comp, "elem_id", None) not in (None, "pg-theme") and getattr(comp, "interactive", True) is not False:
            state[id(comp)] = random_value(rng, comp)
    by_elem = {getattr(c, "elem_id", None): c for c in page.explore.inputs}
    kind = state[id(by_elem["pg-grammar-kind"])]
    words = ["".join(rng.choice("aé✓日&?=+% ") for _ in range(rng.randint(1, 12))).strip() or "x"
             for _ in range(rng.randint(1, 4))]  # no "[": choices that start with it are read as a JSON list
    text = {"choices": " | ".join(words)}.get(kind, GRAMMAR_EXAMPLES.get(kind, ""))
    state[id(by_elem["pg-grammar-text"])] = text if kind != NO_GRAMMAR else rng.choice(["", "left over"])
    return state


def test_the_controls_drawn_are_every_control_a_run_reads(page):
    """The property below draws a value for every input of Generate but the theme: the list is the page's."""
    elems = {getattr(c, "elem_id", None) for c in page.explore.inputs}
    assert {"pg-model", "pg-dtype", "pg-strategy", "pg-prompt", "pg-system", "pg-chat", "pg-seed", "pg-max-new",
            "pg-random-seed", "pg-forced", "pg-grammar-kind", "pg-grammar-text"} <= elems
    assert "pg-p-eagle_auto_tree" in elems and "pg-b-eagle_auto_tree" in elems
    assert set(GRAMMAR_CHOICES) == {NO_GRAMMAR, *GRAMMAR_EXAMPLES}


@pytest.mark.parametrize("case", range(CASES))
def test_a_link_restores_the_request_its_page_would_run(page, case):
    rng = random.Random(1000 + case)
    state = random_state(page, rng)
    sent = generate(page, state)
    random_box = next(c for c in page.explore.inputs if getattr(c, "elem_id", None) == "pg-random-seed")
    if state[id(random_box)]:  # a random seed is written into the seed box, which the link then carries
        seed_box = next(c for c in page.explore.inputs if getattr(c, "elem_id", None) == "pg-seed")
        state[id(seed_box)], state[id(random_box)] = sent.seed, False
        assert generate(page, state) == sent
    query = copy_link(page, state)
    restored = generate(page, open_link(page, query))
    assert dataclasses.asdict(restored) == dataclasses.asdict(sent), query


def test_a_float32_run_opens_as_a_float32_run(page):
    state = fresh_state(page)
    dtype = next(c for c in page.explore.inputs if getattr(c, "elem_id", None) == "pg-dtype")
    state[id(dtype)] = "float32"
    query = copy_link(page, state)
    assert "dtype=float32" in query
    assert generate(page, open_link(page, query)).dtype == "float32"
    assert share.decode("?dtype=float32")[0].dtype == "float32"
    cfg, warnings = share.decode("?dtype=float64")
    assert cfg.dtype == "auto" and any("float64" in w and "auto, float32" in w for w in warnings)


def test_a_grammar_over_its_limit_is_refused_with_its_length_never_cut(page):
    long = "x" * (MAX_GRAMMAR_CHARS + 1)
    cfg = share.Config(model="toy", strategy="greedy", prompt="1 2", grammar_kind="regex", grammar_text=long)
    with pytest.raises(InvalidRequest, match=f"at most {MAX_GRAMMAR_CHARS} characters, got {MAX_GRAMMAR_CHARS + 1}"):
        share.encode(cfg)
    state = fresh_state(page)
    by_elem = {getattr(c, "elem_id", None): c for c in page.link.inputs}
    state[id(by_elem["pg-grammar-kind"])], state[id(by_elem["pg-grammar-text"])] = "regex", long
    with pytest.raises(gr.Error, match=f"got {MAX_GRAMMAR_CHARS + 1}"):  # the page says so: no link
        copy_link(page, state)
    # a link made elsewhere with such a grammar opens without it, and says why
    back, warnings = share.decode({"grammar": "regex", "grammar_text": long})
    assert back.grammar_text == "" and any(f"got {MAX_GRAMMAR_CHARS + 1}" in w for w in warnings)


def test_a_prompt_is_carried_whole_up_to_a_runs_limit_and_refused_beyond(page):
    prompt = "é&? " * 1500  # 6000 characters: more than links used to carry, less than a run takes
    cfg = dataclasses.replace(share.defaults(), prompt=prompt)
    assert share.decode(share.encode(cfg))[0].prompt == prompt
    over = dataclasses.replace(share.defaults(), prompt="a" * (MAX_TEXT_CHARS + 1))
    with pytest.raises(InvalidRequest, match=f"prompt must be at most {MAX_TEXT_CHARS} characters, got "
                                             f"{MAX_TEXT_CHARS + 1}"):
        share.encode(over)
    back, warnings = share.decode({"prompt": "a" * (MAX_TEXT_CHARS + 1)})
    assert back.prompt == share.DEFAULT_PROMPT and any(str(MAX_TEXT_CHARS + 1) in w for w in warnings)


def test_a_link_longer_than_a_browser_opens_is_refused_with_its_length():
    prompt = "日" * 10_000  # within a run's limit, but nine characters each in a link
    cfg = dataclasses.replace(share.defaults(), prompt=prompt)
    with pytest.raises(InvalidRequest, match=rf"would be \d+ characters, over the {share.MAX_LINK_CHARS}.*prompt "
                                             r"\(10000 characters\)"):
        share.encode(cfg)


def test_the_link_of_an_eagle_auto_run_restores_the_tree_it_chose(page, monkeypatch):
    """An auto run writes the tree it chose into its strategy's eagle_auto_tree box (as a random seed goes
    into the seed box); the link carries it, and the restored page's run replays the same trace."""
    state = fresh_state(page)
    by_elem = {getattr(c, "elem_id", None): c for c in page.explore.inputs}
    for elem, value in {"pg-model": "toy", "pg-strategy": "speculative", "pg-prompt": "1 2", "pg-max-new": 10,
                        "pg-seed": 6, "pg-p-draft": "eagle", "pg-p-eagle_tree": "auto",
                        "pg-p-temperature": 1.0, "pg-p-order": get_strategy("speculative").params().order}.items():
        state[id(by_elem[elem])] = value
    monkeypatch.setitem(page.decoding, "on", True)
    frames = list(call(page.explore, lambda c: state[id(c)]))
    box = by_elem["pg-p-eagle_auto_tree"]
    last = written(page.explore.outputs, frames[-1])
    trace = last[id(next(c for c in page.explore.outputs if isinstance(c, gr.State)))]
    chosen = trace["params"]["eagle_auto_tree"]
    assert chosen and last[id(box)]["value"] == chosen  # written back at the end of the run
    filled = [c for c in page.explore.outputs if getattr(c, "elem_id", None) in FILLED]  # the run fills them in
    assert filled and all([written(page.explore.outputs, frame)[id(c)] for c in filled] == [gr.skip()] * len(filled)
                          for frame in frames[:-1])
    state[id(box)] = chosen
    query = copy_link(page, state)
    assert f"p.eagle_auto_tree={chosen}" in query
    page.sent.clear()
    restored = open_link(page, query)
    replay = list(call(page.explore, lambda c: restored[id(c)]))
    assert page.sent[-1].params["eagle_auto_tree"] == chosen
    again = written(page.explore.outputs, replay[-1])
    replayed = again[id(next(c for c in page.explore.outputs if isinstance(c, gr.State)))]
    assert {k: v for k, v in replayed.items() if k != "timing"} == {k: v for k, v in trace.items() if k != "timing"}


def test_a_lockstep_read_goes_into_the_link_and_comes_back_to_be_read_again(page, store):
    from playground.whatif.lockstep import lockstep
    record = lockstep(store, "upon a time", "toy", "toy-small", "float32", "float32", "once")
    state = fresh_state(page)
    by_elem = {getattr(c, "elem_id", None): c for c in page.link.inputs}
    state[id(by_elem["pg-model"])], state[id(by_elem["pg-prompt"])] = "toy", "once"
    assert "pair" not in copy_link(page, state)  # no lockstep read: none in the link
    query = copy_link(page, state, record)
    pairs = dict(parse_qsl(query.lstrip("?")))
    assert (pairs["pair_model"], pairs["pair_a"], pairs["pair_b"], pairs["pair_text"]) == \
        ("toy-small", "float32", "float32", "upon a time")
    opened = open_link(page, query)
    by_id = {getattr(c, "elem_id", None): opened[id(c)] for c in page.load.outputs if getattr(c, "elem_id", None)}
    assert (by_id["pg-pair-model"], by_id["pg-pair-dtype-a"], by_id["pg-pair-dtype-b"], by_id["pg-pair-text"]) == \
        ("toy-small", "float32", "float32", "upon a time")
    run_flag = next(opened[id(c)] for c in page.load.outputs if isinstance(c, gr.Textbox) and not c.visible
                    and opened[id(c)] and "lockstep" in str(opened[id(c)]))
    assert run_flag == "generate,lockstep"  # the opened page runs, then reads the lockstep (page.RUN_JS)


def test_a_lockstep_in_a_link_with_other_weights_or_too_long_a_text_is_left_out_with_a_warning():
    cfg, warnings = share.decode({"pair_a": "float64", "pair_b": "int4", "pair_text": "x"})
    assert cfg.pair_a == "" and any("float64" in w and "float32" in w for w in warnings)
    cfg, warnings = share.decode({"pair_a": "float32", "pair_b": "int4", "pair_text": "x" * (MAX_TEXT_CHARS + 1)})
    assert cfg.pair_text == "" and any(str(MAX_TEXT_CHARS + 1) in w for w in warnings)
    with pytest.raises(InvalidRequest, match=f"lockstep's text must be at most {MAX_TEXT_CHARS}"):
        share.encode(dataclasses.replace(share.defaults(), pair_a="float32", pair_b="int4",
                                         pair_text="x" * (MAX_TEXT_CHARS + 1)))


def test_a_scored_text_goes_into_the_link_and_is_scored_again_once_opened(page, store):
    from playground.whatif.score import score
    state = fresh_state(page)
    assert "score_text" not in copy_link(page, state)  # nothing scored: no text in the link
    by_elem = {getattr(c, "elem_id", None): c for c in page.link.inputs}
    state[id(by_elem["pg-whatif-text"])] = " upon a time"
    assert "score_text" not in copy_link(page, state)  # a text typed, not scored: none in the link
    state[id(page.scored)] = score(store, "toy", " upon a time", "once").to_dict()
    query = copy_link(page, state)
    assert dict(parse_qsl(query.lstrip("?")))["score_text"] == " upon a time"
    opened = open_link(page, query)
    by_id = {getattr(c, "elem_id", None): opened[id(c)] for c in page.load.outputs if getattr(c, "elem_id", None)}
    assert by_id["pg-whatif-text"] == " upon a time"
    run_flag = next(opened[id(c)] for c in page.load.outputs if isinstance(c, gr.Textbox) and not c.visible
                    and "score" in str(opened[id(c)]))
    assert run_flag == "generate,score"  # the opened page runs, then scores the text (page.RUN_JS)
    cfg, warnings = share.decode({"score_text": "x" * (MAX_TEXT_CHARS + 1)})
    assert cfg.score_text == "" and warnings == [f"ignored score_text: the text to score must be at most "
                                                 f"{MAX_TEXT_CHARS} characters, got {MAX_TEXT_CHARS + 1}"]
    with pytest.raises(InvalidRequest, match=f"text to score must be at most {MAX_TEXT_CHARS}"):
        share.encode(dataclasses.replace(share.defaults(), score_text="x" * (MAX_TEXT_CHARS + 1)))


@pytest.mark.parametrize("change, said", [
    ({"sweep": "temperature", "strategy": "greedy"}, "greedy's numeric parameters"),
    ({"sweep_grid": "0.2,0.5"}, "sweep_grid must be lin:LOW:HIGH:COUNT"),
    ({"sweep_grid": "lin:0.2:2:13"}, "count must be an integer in [1, 12], got 13"),
    ({"sweep_n": "201"}, "sweep_n must be an integer in [1, 200], got '201'"),
    ({"sweep_tokens": "0"}, "sweep_tokens must be an integer in [1, "),
    ({"sweep_extract": "nearest"}, "an extractor must be one of"),
])
def test_a_sweep_in_a_link_that_its_panel_would_refuse_is_left_out_with_a_warning_naming_it(change, said):
    good = {"strategy": "sampling", "sweep": "temperature", "sweep_grid": "lin:0.2:2:6", "sweep_n": "20",
            "sweep_tokens": "8", "sweep_extract": "last_number", "sweep_known": "9"}
    cfg, warnings = share.decode(good)
    assert warnings == [] and (cfg.sweep, cfg.sweep_n, cfg.sweep_known) == ("temperature", 20, "9")
    assert share.decode(share.encode(cfg))[0] == cfg  # the link of a sweep restores it
    cfg, warnings = share.decode({**good, **change})
    assert cfg.sweep == "" and cfg.sweep_n == 0 and len(warnings) == 1 and said in warnings[0], warnings


def test_the_answer_rules_settings_travel_without_a_sweep_and_a_bad_one_is_left_out_naming_it():
    rules = {"sweep_n": "20", "sweep_tokens": "16", "sweep_extract": "last_number", "sweep_known": "9"}
    cfg, warnings = share.decode(rules)
    assert warnings == [] and (cfg.sweep, cfg.sweep_n, cfg.sweep_tokens, cfg.sweep_extract, cfg.sweep_known) == \
        ("", 20, 16, "last_number", "9")
    assert dict(parse_qsl(share.encode(cfg).lstrip("?"))) == rules and share.decode(share.encode(cfg))[0] == cfg
    for change, said in (({"sweep_n": "201"}, "sweep_n must be an integer in [1, 200], got '201'"),
                         ({"sweep_extract": "nearest"}, "an extractor must be one of")):
        cfg, warnings = share.decode({**rules, **change})
        assert (cfg.sweep_n, cfg.sweep_extract) == (0, "") and len(warnings) == 1, warnings
        assert warnings[0].startswith("ignored the answer rules' settings: ") and said in warnings[0], warnings
