"""The page's engines panel (playground/ui/engines_panel.py) at the handler level, no browser: a value preset
sets the panel to the values the preset module returns and says so; Copy as on a toy run is export_trace's
text (its code box and the lines under it); an import sets the values, switches a strategy without a chain to
sampling and lists what it could not carry. The browser test is test_browser_engines.py."""
from __future__ import annotations

import gradio as gr
import pytest

from playground.engine import Request, run
from playground.engines import FORMATS, export_trace, preset
from playground.engines.formats import Export, with_gaps
from playground.ui.engines_panel import copy_as, import_updates, preset_updates
from playground.ui.page import _layout


@pytest.fixture(scope="module")
def built():
    with gr.Blocks() as demo:
        page, _, _, _, engines = _layout()
    yield page, engines
    demo.close()


def values_of(page, strategy: str = "sampling", **more) -> dict:
    """The events' inputs as one {component: value} dict: the panel at its defaults."""
    return {page.strategy: strategy, page.model: "toy", **{c: c.value for c in page.panel.components}, **more}


def value(update) -> object:
    return update["value"] if isinstance(update, dict) else update


@pytest.mark.parametrize("name", ["universal", "llama.cpp", "model card"])
def test_a_preset_sets_the_values_the_preset_module_returns(built, name):
    page, engines = built
    out = preset_updates(page, engines.preset_note, name, values_of(page))
    chosen = preset(name, "toy")
    for key, expected in chosen.values.items():
        assert value(out[page.panel.fields[key]]) == expected, key
    assert value(out[engines.preset_note]) == f"{chosen.sentence} Source: {chosen.source}"


def test_a_greedy_preset_sets_temperature_0_on_the_chain(built):
    page, engines = built
    out = preset_updates(page, engines.preset_note, "transformers", values_of(page, temperature=None))
    assert value(out[page.panel.fields["temperature"]]) == 0.0
    assert "greedy decoding" in value(out[engines.preset_note])


@pytest.fixture(scope="module")
def toy_trace(store):
    return run(store, Request(model="toy", strategy="sampling", prompt="1 2", seed=3, max_new_tokens=5,
                              params={"temperature": 0.8, "top_k": 5, "min_p": 0.05})).to_dict()


@pytest.mark.parametrize("engine", FORMATS)
def test_copy_as_on_a_toy_run_is_export_traces_text(toy_trace, engine):
    code, under = copy_as(toy_trace, engine)
    lines = [line[2:] for line in under.splitlines() if line.startswith("- ")]
    shown = Export(engine, "", code, lines, "")
    assert with_gaps(shown) == export_trace(toy_trace)[engine]


def test_copy_as_without_a_run_or_for_a_strategy_without_a_chain_says_why():
    assert copy_as(None, "vllm") == ("", "_Generate a run first: Copy as writes the last run's settings._")
    code, under = copy_as({"strategy": "beam", "params": {}}, "vllm")
    assert code == "" and "greedy, sampling or gumbel run" in under


def test_an_import_sets_the_values_and_lists_what_it_could_not_carry(built):
    page, engines = built
    line = ("llama-server -m m.gguf --temp 0.7 --top-k 20 --seed 9 -n 48 --logit-bias 15043+1 "
            "--samplers 'top_k;temperature'")
    out = import_updates(page, engines.import_note, line, values_of(page, "beam"))
    assert out[page.strategy] == "sampling"  # beam has no chain
    fields = page.panel.fields
    assert (value(out[fields["temperature"]]), value(out[fields["top_k"]])) == (0.7, 20)
    assert value(out[fields["order"]]).startswith("top_k,temperature")
    assert (out[page.seed], out[page.max_new]) == (9, 48)
    note = out[engines.import_note]
    assert note.startswith("**Imported a llama.cpp command line** into sampling")
    assert "**Not carried:**" in note and "--logit-bias" in note
    refused = import_updates(page, engines.import_note, "hello world", values_of(page))
    assert list(refused) == [engines.import_note] and "must be a llama-server" in refused[engines.import_note]


def test_a_value_edited_by_hand_empties_the_preset_menu(store):
    """Every control of the panel, moved by a person (its input event, not a preset's or a link's change),
    clears the preset's name and note: the menu never names values the panel no longer holds."""
    from playground.ui.page import build_demo
    demo = build_demo(store)
    try:
        fn = next(f for f in demo.fns.values()
                  if [getattr(c, "elem_id", None) for c in f.outputs] == ["pg-value-preset", "pg-value-preset-note"]
                  and all(t[1] == "input" for t in f.targets))
        moved = {demo.blocks[t[0]].elem_id for t in fn.targets}
        from playground.ui.controls import panel_params
        assert {f"pg-p-{p.name}" for p in panel_params()} <= moved  # one control per parameter, each one
        assert "pg-p-temperature" in moved and "pg-p-order" in moved
        menu, note = fn.fn()
        assert menu["value"] is None and note["visible"] is False
    finally:
        demo.close()
