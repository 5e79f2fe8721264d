"""The page's layout and its small helpers, read from the Blocks config and called through the page's own
handler functions (no browser): what comes first in the sidebar, the advanced group's label, the draft and
amateur menus, the prompt a model switch keeps, what the model sees, Stop and the branches panel."""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from playground.engine import Request, run
from playground.models import ModelStore
from playground.ui import branches as ui_branches
from playground.ui import share
from playground.ui.controls import (
    advanced_label,
    controls_for,
    ordered,
    pair_choices,
    pair_update,
    tokenizer_family,
)
from playground.ui.examples import example_run_key, examples, note_after, prompt_offer, prompt_on_model, toy_note
from playground.ui.handlers import DEFAULT_PROMPT, NUMERIC_PROMPT
from playground.ui.page import LOADS_WITH_MODEL, SLIDE_CHARTS, SLIDE_HIDDEN, build_demo, model_sees
from playground.whatif import branches
from strategies.params import MAX_BRIEF
from strategies.registry import get_strategy

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]


@pytest.fixture(scope="module")
def demo(store):
    return build_demo(store)


def order_of_elements(demo) -> list[str]:
    """Every component's elem_id (or '#id' where it has none) in the page's depth-first layout order."""
    props = {c["id"]: c["props"] for c in demo.config["components"]}
    out: list[str] = []

    def walk(node):
        out.append(props.get(node["id"], {}).get("elem_id") or f"#{node['id']}")
        for child in node.get("children", []):
            walk(child)
    walk(demo.config["layout"])
    return out


def component(demo, elem_id: str) -> dict:
    return next(c for c in demo.config["components"] if c["props"].get("elem_id") == elem_id)


def test_seed_and_max_new_tokens_come_before_the_strategy_settings_and_the_advanced_group(demo):
    order = order_of_elements(demo)
    seed, max_new = order.index("pg-seed"), order.index("pg-max-new")
    temperature = order.index("pg-p-temperature")
    advanced = order.index("pg-p-advanced")
    assert seed < max_new < temperature < advanced
    # the sampler's further stages (and the order) are inside the advanced group, the four common ones are not
    for name in ("typical_p", "dry_multiplier", "mirostat_tau", "order", "repetition_penalty"):
        assert order.index(f"pg-p-{name}") > advanced, name
    for name in ("top_k", "top_p", "min_p"):
        assert order.index(f"pg-p-{name}") < advanced, name
    assert component(demo, "pg-p-advanced")["props"]["open"] is False
    assert component(demo, "pg-p-advanced")["props"]["label"] == "Advanced settings (0 on)"
    # the strategies' own settings (a draft, gamma, an amateur) come before the chain's
    assert order.index("pg-p-draft") < order.index("pg-p-gamma") < order.index("pg-p-temperature")
    assert order.index("pg-b-amateur") < order.index("pg-b-temperature")
    # one control per parameter: each name once per panel
    panel_ids = [e for e in order if e.startswith("pg-p-")]
    assert len(panel_ids) == len(set(panel_ids))


def test_every_help_under_a_control_is_one_short_line_and_the_whole_help_is_one_click_away(demo):
    """No control carries more than a line of MAX_BRIEF characters under its label; each panel ends
    with a closed "About these settings" group that gives the chosen strategy's settings their whole help."""
    long = {c["props"].get("elem_id"): c["props"]["info"] for c in demo.config["components"]
            if isinstance(c["props"].get("info"), str) and len(c["props"]["info"]) > MAX_BRIEF}
    assert not long, long
    order = order_of_elements(demo)
    for prefix in ("p", "b"):
        about = component(demo, f"pg-{prefix}-about")
        assert about["props"]["open"] is False and about["props"]["label"] == "About these settings"
        assert order.index(f"pg-{prefix}-advanced") < order.index(f"pg-{prefix}-about")
    shown = next(c for c in demo.config["components"] if c["props"].get("elem_id") == "pg-p-finishing")
    assert "keep_slot" not in shown["props"]["info"]  # beam's 95 words are behind "About"


def test_the_advanced_label_counts_the_stages_that_are_on_and_follows_the_values(demo):
    rest = [c for c in ordered(controls_for(get_strategy("sampling"))) if c.advanced]
    defaults = {c.name: c.default for c in rest}
    # the page's own change event of the group: its inputs are the strategy and the group's controls, its
    # output the label, which counts the chosen strategy's settings that are on
    box = component(demo, "pg-p-advanced")["id"]
    fn = next(f for f in demo.fns.values() if [o._id for o in f.outputs] == [box])
    strategy, *inputs = fn.inputs
    assert strategy.elem_id == "pg-strategy" and {c.name for c in rest} <= {i.elem_id[5:] for i in inputs}

    def label(chosen: str, **on: Any) -> str:
        return fn.fn(chosen, *[on.get(i.elem_id[5:], defaults.get(i.elem_id[5:], i.value)) for i in inputs])["label"]
    assert label("sampling") == advanced_label(0) == "Advanced settings (0 on)"
    assert label("sampling", dry_multiplier=0.8, xtc_probability=1.0, xtc_threshold=0.3) == advanced_label(2)
    # text and checkbox stages count; the order does not
    assert label("sampling", dry_multiplier=0.8, xtc_probability=1.0, word_bias="the=-5", p_less=True,
                 order="llama.cpp") == advanced_label(4)
    assert label("beam", dry_multiplier=0.8) == advanced_label(0)  # beam reads no DRY


def test_draft_and_amateur_menus_list_what_shares_the_models_tokenizer():
    assert tokenizer_family("toy") == tokenizer_family("toy-small") != tokenizer_family("smollm2-135m")
    assert tokenizer_family("smollm2-135m") == tokenizer_family("HuggingFaceTB/SmolLM2-360M-Instruct")
    toy = pair_choices("draft", "toy")
    assert "toy-small" in toy and "early_exit" in toy and "prompt_lookup" in toy
    assert "eagle" in toy  # assets/eagle/toy holds a trained head
    smol = pair_choices("draft", "smollm2-135m")
    assert "toy-small" not in smol and "gemma3-270m" not in smol and "eagle" in smol
    assert "eagle" not in pair_choices("draft", "gemma3-270m")  # no trained head for it
    assert pair_choices("amateur", "toy") == ["early_exit", "window", "toy-small"]
    assert pair_choices("amateur", "smollm2-135m") == ["early_exit", "window"]
    # the page's menu: a dropdown that takes a typed hub id too, following the model
    draft = next(c for c in controls_for(get_strategy("speculative")) if c.name == "draft")
    assert draft.kind == "dropdown" and draft.custom
    assert pair_update(draft, "smollm2-135m", "toy-small")["value"] == "early_exit"  # a toy draft does not fit
    assert pair_update(draft, "toy", "toy-small")["value"] == "toy-small"
    hub = pair_update(draft, "smollm2-135m", "HuggingFaceTB/SmolLM2-360M-Instruct")
    assert hub["value"] == "HuggingFaceTB/SmolLM2-360M-Instruct" and hub["value"] in hub["choices"]


def test_a_model_switch_replaces_only_a_prompt_nobody_typed():
    assert prompt_on_model("toy", DEFAULT_PROMPT)[0] == NUMERIC_PROMPT
    assert prompt_on_model("toy", "")[0] == NUMERIC_PROMPT
    assert prompt_on_model("smollm2-135m", NUMERIC_PROMPT)[0] == DEFAULT_PROMPT
    assert prompt_on_model("smollm2-135m", "")[0] == DEFAULT_PROMPT
    assert prompt_on_model("toy", "Write one sentence about the ocean.")[0] == NUMERIC_PROMPT  # an example's
    typed, note = prompt_on_model("toy", "My own words about the sea", ["<eos>", "once", "upon", "a"])
    assert typed == "My own words about the sea"
    assert "token numbers" in note and "once, upon, a" in note and "<eos>" not in note
    assert prompt_on_model("smollm2-135m", "3 4 5") == ("3 4 5", "")  # numbers are text to SmolLM2
    assert toy_note("smollm2-135m") == "" and "token numbers" in toy_note("toy-small")


def test_a_typed_prompt_a_toy_cannot_read_is_offered_a_replacement_not_replaced():
    vocab = ["<eos>", "once", "upon", "a"]
    assert prompt_offer("toy", "My own words about the sea", vocab) == NUMERIC_PROMPT
    assert prompt_offer("toy", "My own words about the sea") == NUMERIC_PROMPT  # vocabulary not loaded yet
    assert prompt_offer("toy", "once upon a", vocab) == ""  # words of its vocabulary: it can read them
    assert prompt_offer("toy", "3 4 5", vocab) == "" and prompt_offer("toy", "", vocab) == ""
    assert prompt_offer("smollm2-135m", "My own words") == "" and prompt_offer("smollm2-135m", "3 4") == ""


def test_what_the_model_sees_is_the_templated_prompt_of_the_loaded_tokenizer(store, smollm):
    prompt, system = "Why is the sky blue?", ""
    shown = model_sees(store, "smollm2-135m", prompt, system, True)
    expected = smollm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                    add_generation_prompt=True, tokenize=False)
    assert shown["value"] == expected
    assert "helpful AI assistant" in shown["value"]  # the template's default system prompt, shown
    n = len(smollm.encode(prompt, system, True))
    assert shown["label"].endswith(f"{n} tokens")
    # the chat template off: the plain prompt
    plain = model_sees(store, "smollm2-135m", prompt, system, False)
    assert plain["value"] == smollm.tokenizer.decode(smollm.encode(prompt, "", False))
    assert model_sees(store, "smollm2-135m", "", "", True)["value"] == "prompt must not be empty"


def test_what_the_model_sees_loads_no_model():
    fresh = ModelStore("cpu")
    assert model_sees(fresh, "gemma3-270m", "Hello", "", True)["value"] == LOADS_WITH_MODEL
    assert fresh.loaded() == []


def panel_and_trace():
    """The branches panel's components and one more component (the page's trace, a note), built in a Blocks."""
    with ui_branches.gr.Blocks():
        return ui_branches.layout(), ui_branches.gr.State(None)


def test_after_stop_the_panel_follows_the_stopped_run_and_a_branch_of_it_has_it_as_parent(store, toy):
    before = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=3, max_new_tokens=6)).to_dict()
    tree = branches.record(None, before)
    full = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=4, max_new_tokens=10)).to_dict()
    partial = dict(full, tokens=full["tokens"][:3], steps=full["steps"][:3], finish_reason="running",
                   text="".join(t["text"] for t in full["tokens"][:3]))
    panel, out = panel_and_trace()
    updates = panel.after_stop(partial, tree, out)
    radio, view, tree, forced, trace = (updates[c] for c in (panel.tree, panel.view, panel.state, panel.forced, out))
    assert trace["finish_reason"] == "stopped" and trace["seed"] == 4
    assert len(tree["nodes"]) == 1 and tree["nodes"][0]["trace"]["seed"] == 4  # the panel names the stopped run
    assert radio["choices"][0][0].startswith("run: ") and forced == ""
    settings = branches.branch_settings(trace, 1, 9)
    child = run(store, Request(max_new_tokens=10, **settings)).to_dict()
    tree = branches.record(tree, child)
    assert [n["parent"] for n in tree["nodes"]] == [None, 0]
    assert panel.after_stop(None, tree, out) == {}


def test_beam_and_speculative_runs_say_they_do_not_branch():
    panel, note_box = panel_and_trace()

    def updates(name):
        u = panel.strategy_updates(name, note_box)
        return u[note_box], u[panel.hint], u[panel.run]
    for name in ("beam", "sample_beam", "stochastic_beam", "speculative"):
        note, hint, button = updates(name)
        assert "one-token-per-step" in note and "one-token-per-step" in hint and button["interactive"] is False
    for name in ("greedy", "sampling", "gumbel", "contrastive"):
        note, hint, button = updates(name)
        assert note == "" and hint == ui_branches.HINT and button["interactive"] is True
    # the panel's note on the run itself invites a bar click only where one branches
    def run_of(strategy):
        return {"model": "toy", "strategy": strategy, "params": {}, "seed": 0, "prompt": "1 2",
                "prompt_ids": [1, 2], "text": " a", "tokens": [{"id": 3, "text": " a"}], "steps": [{}]}
    assert panel.tree_updates(branches.record(None, run_of("beam")))[panel.view] == ui_branches.RUN_NOTE
    assert panel.tree_updates(branches.record(None, run_of("greedy")))[panel.view] == ui_branches.ROOT_NOTE


def test_slides_view_and_glossary_are_on_the_page(demo):
    order = order_of_elements(demo)
    assert "pg-slides" in order and "pg-slides-chart" in order and "pg-glossary" in order
    assert set(component(demo, "pg-slides-chart")["props"]["choices"][i][1]
               for i in range(len(SLIDE_CHARTS))) == set(SLIDE_CHARTS)
    # the chart menu says what it picks, on screen (each choice) and to a screen reader (its label)
    menu = component(demo, "pg-slides-chart")["props"]
    assert menu["label"] == "Chart shown large"
    assert [shown for shown, _ in menu["choices"]] == [f"chart: {name}" for name in SLIDE_CHARTS]
    # whichever chart is chosen, every further strategy view the page has folds away (not only the first few)
    further = {i for i in order if re.fullmatch(r"pg-view-[1-9]\d*|pg-view-html", i)}
    assert len(further) >= 5 and further == set(SLIDE_HIDDEN)
    glossary = next(c for c in demo.config["components"] if "varentropy" in str(c["props"].get("value", "")))
    for word in ("entropy", "surprisal", "nats", "tau", "**Z**", "`·`", "`↵`"):
        assert word in glossary["props"]["value"], word
    # a strategy's own views sit right under the text, above the charts and the branches panel
    assert order.index("pg-text") < order.index("pg-view-0") < order.index("pg-overview-main") \
        < order.index("pg-branches")


def test_max_new_tokens_is_a_box_that_passes_any_value_to_the_refusal(demo):
    """A slider would move 100000 to its end in the browser before any check saw it; the box sends it
    on, and the run is refused with the field and its range (tests/ui/test_page_messages.py)."""
    box = component(demo, "pg-max-new")
    assert box["type"] == "number" and box["props"].get("maximum") is None and box["props"]["precision"] == 0
    slider = component(demo, "pg-p-top_p")  # an open low end (top-p 0) is on the slider,
    assert slider["props"]["minimum"] == 0  # to be refused with its range rather than moved


def test_an_examples_note_stays_only_while_the_run_is_the_examples():
    """Each example's own settings, on any weights, keep its note; another seed, another mode, a branch's
    forced token, or no example at all do not."""
    for ex in examples():
        key, mode = example_run_key(ex), ex.config.run
        # a branch example's note follows its parent's run (the branch runs after it, from the link's pending)
        run = dataclasses.replace(ex.config, forced=share.split_branch(ex.config)[0]) if ex.config.branch else ex.config
        assert note_after(key, dataclasses.replace(run, dtype="float32", run=mode), mode), ex.label
        assert not note_after(key, ex.config, mode) or not ex.config.branch, ex.label  # the branch's own path
        assert not note_after(key, dataclasses.replace(ex.config, seed=ex.config.seed + 1), mode), ex.label
        assert not note_after(key, dataclasses.replace(ex.config, forced="0:1"), mode), ex.label
        assert not note_after(key, ex.config, "compare" if mode == "generate" else "generate"), ex.label
        assert not note_after("", ex.config, mode) and not note_after(key, None, mode)
    generate = next(ex for ex in examples() if ex.config.run == "generate")
    other_b = dataclasses.replace(generate.config, compare_strategy="beam")  # a Generate run reads no B side
    assert note_after(example_run_key(generate), other_b, "generate")


def test_events_that_show_no_progress_have_no_progress_targets_and_the_others_keep_theirs(demo):
    """The page's hidden-progress events give Gradio's page no loading status to keep (each one it
    keeps is written back, by a walk of the page's tree, after every status message of any event)."""
    hidden = [fn for fn in demo.fns.values() if fn.show_progress == "hidden"]
    shown = [fn for fn in demo.fns.values() if fn.show_progress != "hidden"]
    assert len(hidden) > 30 and shown
    assert all(fn.show_progress_on == [] for fn in hidden)
    assert all(fn.show_progress_on != [] for fn in shown)
    assert sum(len(fn.outputs) for fn in hidden) > 500  # the targets they would have had


def test_the_run_buttons_start_disabled_and_the_load_chain_enables_them_before_a_link_runs(demo):
    """Generate, Compare's run, lockstep's and the sweep's: each is what a link's run= clicks (RUN_JS)."""
    by_id = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    ids = ("pg-generate", "pg-compare-run", "pg-pair-run", "pg-sweep-run")
    runs = [by_id[i] for i in ids]
    assert all(b.interactive is False for b in runs)
    config = demo.get_config_file()
    loads = [d for d in config["dependencies"] if any(t[1] == "load" for t in d["targets"])]
    restore = next(d for d in loads if len(d["outputs"]) > 100)  # the link's settings
    chain = [restore]
    while nxt := next((d for d in config["dependencies"] if d.get("trigger_after") == chain[-1]["id"]), None):
        chain.append(nxt)
    assert [d["outputs"] for d in chain[1:]] == [[b._id for b in runs], []]  # enabled, then run= clicks
    assert chain[2]["js"] and all(i in chain[2]["js"] for i in ids)


def test_the_glossary_gives_both_meanings_of_tau():
    """Speculative decoding's tau (tokens a round adds) and Mirostat's (the target surprise in bits)."""
    from playground.ui.side import GLOSSARY
    tau = next(line for line in GLOSSARY.split("\n- ") if line.startswith("**tau"))
    assert "speculative" in tau and "Mirostat" in tau and "bits" in tau



def test_batched_rows_says_what_it_does_for_the_strategies_it_batches(demo):
    from playground.whatif.sample_many import BATCHED
    info = component(demo, "pg-whatif-batched")["props"]["info"]
    assert info and "one run per seed" in info and "rows of one batch" in info
    for name in BATCHED:
        assert name in info, name
