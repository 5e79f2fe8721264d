"""Every stage-fight warning says only what the recorded steps show: it names the steps where it
happened, and its numbers are the records' (tables over hand-made steps, then toy runs)."""
from __future__ import annotations

import pytest

from playground.charts.stage_warnings import by_stage, stage_warnings, warnings_html
from playground.charts.theme import themed
from playground.charts.views import strategy_views
from playground.charts.waterfall import waterfall_figure
from playground.engine import Request, run
from strategies.stages import truncates


def stage(name, kept, **decision):
    """A stage's record as the recorder writes it (``truncates`` as the stage is registered)."""
    return {"name": name, "kept_count": kept, **({"decision": decision} if decision else {}),
            **({"truncates": True} if truncates(name) else {})}


def steps_trace(*steps):
    return {"steps": [{"stages": list(stages)} for stages in steps]}


def warned(trace, kind):
    return [w for w in stage_warnings(trace) if w.kind == kind]


def toy_trace(store, params, seed=0, n=8):
    return run(store, Request("toy", "sampling", "1 2", params, seed=seed, max_new_tokens=n)).to_dict()


def fell(step, name):
    """Whether stage ``name`` removed tokens at ``step`` (its kept_count below the stage before it)."""
    stages = step["stages"]
    k = [s["name"] for s in stages].index(name)
    return stages[k]["kept_count"] < stages[k - 1]["kept_count"]


# --- before top-nσ -------------------------------------------------------------------------------------

def test_before_nsigma_counts_only_the_steps_where_min_p_removed_tokens():
    trace = steps_trace(
        [stage("raw", 16), stage("min_p", 10), stage("top_nsigma", 3)],
        [stage("raw", 16), stage("min_p", 16), stage("top_nsigma", 2)],  # min_p removed nothing here
        [stage("raw", 12), stage("min_p", 4), stage("top_nsigma", 1)],
        [stage("raw", 16), stage("top_nsigma", 2), stage("min_p", 1)],  # min_p after top-nσ: not this warning
    )
    [w] = warned(trace, "before_nsigma")
    assert (w.stage, w.steps) == ("min_p", (0, 2))
    assert w.text == ("min_p runs before top_nsigma and removed tokens at 2 of 3 steps (6 to 8 of the 12 to 16 it "
                      "received): there top-nσ measured its σ on 4 to 10 tokens (put top_nsigma first)")


def test_before_nsigma_is_silent_when_nothing_was_removed_before_it():
    trace = steps_trace(*[[stage("raw", 16), stage("top_p", 16), stage("min_p", 16), stage("top_nsigma", 2)]] * 3)
    assert warned(trace, "before_nsigma") == []


def test_a_min_p_that_removes_nothing_gives_no_order_warning(store):
    trace = toy_trace(store, {"min_p": 1e-30, "top_nsigma": 1.0, "temperature": 3.0})
    assert not any(fell(s, "min_p") for s in trace["steps"])  # the record: min_p kept every token it got
    assert warned(trace, "before_nsigma") == []


def test_a_min_p_that_cuts_warns_with_the_recorded_counts(store):
    trace = toy_trace(store, {"min_p": 0.01, "top_nsigma": 1.0, "temperature": 3.0})
    steps = trace["steps"]
    cut = [i for i, s in enumerate(steps) if fell(s, "min_p")]
    assert 0 < len(cut) < len(steps)  # this run: min_p cuts the flattened tail at some steps, not all
    [w] = warned(trace, "before_nsigma")
    assert w.steps == tuple(cut)
    names = [st["name"] for st in steps[0]["stages"]]
    j, n = names.index("min_p"), names.index("top_nsigma")
    received = [steps[i]["stages"][j - 1]["kept_count"] for i in cut]
    removed = [steps[i]["stages"][j - 1]["kept_count"] - steps[i]["stages"][j]["kept_count"] for i in cut]
    measured = [steps[i]["stages"][n - 1]["kept_count"] for i in cut]

    def span(xs):
        return f"{min(xs)}" if min(xs) == max(xs) else f"{min(xs)} to {max(xs)}"
    assert f"at {len(cut)} of {len(steps)} steps ({span(removed)} of the {span(received)} it received)" in w.text
    assert f"σ on {span(measured)} tokens" in w.text


# --- XTC above one half ---------------------------------------------------------------------------------

@pytest.mark.parametrize("threshold, warns", [(0.5000001, True), (0.5, False), (0.49, False), (0.9, True)])
def test_xtc_above_one_half_is_compared_exactly(store, threshold, warns):
    trace = toy_trace(store, {"xtc_probability": 1.0, "xtc_threshold": threshold})
    decisions = [st["decision"] for s in trace["steps"] for st in s["stages"] if st["name"] == "xtc"]
    assert decisions and all(d["threshold"] == threshold for d in decisions)  # recorded as given
    found = warned(trace, "xtc_threshold")
    assert bool(found) == warns
    if warns:
        assert found[0].steps == tuple(range(len(trace["steps"])))
        assert f"XTC acted at 0 of {len(decisions)} steps: its threshold {threshold!r} is above 0.5" in found[0].text


def test_the_xtc_warning_reads_each_steps_threshold_and_acted_from_the_record():
    trace = steps_trace(
        [stage("raw", 16), stage("xtc", 16, threshold=0.25, acted=True)],
        [stage("raw", 16), stage("xtc", 16, threshold=0.75, acted=False)],
        [stage("raw", 16), stage("top_k", 4)],
        [stage("raw", 16), stage("xtc", 15, threshold=0.75, acted=True)],
    )
    [w] = warned(trace, "xtc_threshold")
    assert w.steps == (1, 3)
    assert w.text.startswith("XTC acted at 1 of 2 steps: its threshold 0.75 is above 0.5")


# --- a truncation after one token was left ---------------------------------------------------------------

def test_a_no_op_warning_counts_the_steps_the_stage_ran_and_names_who_left_one_token():
    trace = steps_trace(
        [stage("raw", 16), stage("temperature", 1), stage("top_p", 1)],
        [stage("raw", 16), stage("temperature", 16), stage("top_p", 5)],
        [],  # a step that records no stages
        [stage("raw", 1), stage("top_p", 1)],  # the model itself left one token
        [stage("raw", 16), stage("top_k", 2), stage("top_p", 1)],  # top_p received two: it acted
    )
    found = {(w.stage, w.steps): w.text for w in warned(trace, "no_op")}
    assert found == {
        ("top_p", (0,)): "top_p received a single token at 1 of 4 steps (temperature had already left only that "
                         "one): its setting could not matter there",
        ("top_p", (3,)): "top_p received a single token at 1 of 4 steps (the model had already left only that one): "
                         "its setting could not matter there",
    }


def test_greedy_temperature_makes_the_later_truncations_no_ops_at_every_step(store):
    trace = toy_trace(store, {"temperature": 0.0, "top_p": 0.9, "min_p": 0.1})
    n = len(trace["steps"])
    found = {(w.stage, w.steps): w.text for w in warned(trace, "no_op")}
    for name in ("top_p", "min_p"):
        assert found[(name, tuple(range(n)))] == (f"{name} received a single token at {n} of {n} steps (temperature "
                                                 f"had already left only that one): its setting could not matter "
                                                 f"there")


# --- in toy runs: the defaults, the chain figure's note, the stages view ------------------------------------

def kinds(trace):
    return {(w.kind, w.stage) for w in stage_warnings(trace)}


def test_no_warnings_at_the_defaults(store):
    for params in ({}, {"order": "llama.cpp"}, {"temperature": 0.8, "top_nsigma": 1.0, "order": "llama.cpp"}):
        trace = toy_trace(store, params)
        assert kinds(trace) == set()
        assert "Stages that fight" not in {v.title for v in strategy_views(trace, 0)}


def test_a_stage_left_one_token_warns_the_later_stage(store):
    trace = toy_trace(store, {"temperature": 0.0, "top_p": 0.9, "min_p": 0.1})
    [w_top_p] = [w for w in stage_warnings(trace) if w.stage == "top_p"]
    assert w_top_p.kind == "no_op" and "temperature had already left only that one" in w_top_p.text
    assert w_top_p.steps == tuple(range(len(trace["steps"])))
    assert ("no_op", "min_p") in kinds(trace)
    # the chain figure says so under its panels, at that step
    fig = waterfall_figure(trace, 0)
    notes = [a.text for a in fig.layout.annotations if a.name == "stage warnings"]
    assert len(notes) == 1 and "top_p received a single token" in notes[0]


def test_xtc_above_one_half_warns(store):
    assert ("xtc_threshold", "xtc") in kinds(toy_trace(store, {"xtc_probability": 1.0, "xtc_threshold": 0.6}))
    assert ("xtc_threshold", "xtc") in kinds(toy_trace(store, {"xtc_probability": 1.0, "xtc_threshold": 0.5000001}))
    assert kinds(toy_trace(store, {"xtc_probability": 1.0, "xtc_threshold": 0.5})) == set()


def test_min_p_or_top_p_before_top_nsigma_warns(store):
    hf = toy_trace(store, {"min_p": 0.05, "top_p": 0.99, "top_nsigma": 1.0, "temperature": 3.0})
    assert {("before_nsigma", "min_p"), ("before_nsigma", "top_p")} <= kinds(hf)
    w = next(w for w in stage_warnings(hf) if w.stage == "min_p")
    alive = [next(st for i, st in enumerate(s["stages"]) if s["stages"][i + 1]["name"] == "top_nsigma")["kept_count"]
             for k, s in enumerate(hf["steps"]) if k in w.steps]  # the steps where min_p removed tokens
    counts = f"{min(alive)}" if min(alive) == max(alive) else f"{min(alive)} to {max(alive)}"
    assert w.steps and f"σ on {counts} tokens" in w.text
    llama = toy_trace(store, {"min_p": 0.05, "top_nsigma": 1.0, "temperature": 3.0, "order": "llama.cpp"})
    assert not any(k == "before_nsigma" for k, _ in kinds(llama))
    view = next(v for v in strategy_views(hf, 0) if v.title == "Stages that fight")
    assert view.html.count('class="pg-stage-warning"') == len({w.stage for w in stage_warnings(hf)})



# --- one line per stage; a stage that spreads the mass with nothing cut ------------------------------------

def test_each_stage_gets_one_line_with_all_it_is_warned_of():
    trace = steps_trace(*[[stage("raw", 16), stage("temperature", 1), stage("xtc", 1, threshold=0.6, acted=False)]] * 4)
    assert {w.kind for w in stage_warnings(trace)} == {"xtc_threshold", "no_op"}
    html = warnings_html(stage_warnings(trace), step=2)
    assert html.count('class="pg-stage-warning"') == 1 and html.count("(this step)") == 1
    [(name, text, here)] = by_stage(stage_warnings(trace), 2)
    assert name == "xtc" and here and "above 0.5" in text and "received a single token at 4 of 4" in text


def test_adaptive_p_or_a_hot_temperature_with_nothing_cut_warns_that_it_spreads_the_mass():
    spread = steps_trace(
        [stage("raw", 50), stage("adaptive_p", 50, target=0.3)],
        [stage("raw", 50), stage("top_k", 10), stage("adaptive_p", 10, target=0.3)],  # cut before it: fine
        [stage("raw", 50), stage("temperature", 50, t=2.0)],
        [stage("raw", 50), stage("temperature", 50, t=1.2)],  # mild: no warning
    )
    found = {w.stage: (w.steps, w.text) for w in warned(spread, "spreads")}
    assert found["adaptive_p"][0] == (0,) and found["temperature"][0] == (2,)
    assert found["adaptive_p"][1].startswith("adaptive_p spread the mass over all 50 tokens at 1 of 2 steps")


def test_adaptive_p_alone_on_a_toy_run_warns_and_the_defaults_do_not(store):
    assert ("spreads", "adaptive_p") in kinds(toy_trace(store, {"adaptive_p_target": 0.3}))
    assert not any(k == "spreads" for k, _ in kinds(toy_trace(store, {"adaptive_p_target": 0.3, "min_p": 0.1})))


def test_the_warnings_under_the_chain_wrap_to_the_screen_over_the_caption_and_the_figure_grows_by_them(store):
    trace = toy_trace(store, {"adaptive_p_target": 0.3, "xtc_probability": 0.5, "xtc_threshold": 0.6})
    fig = waterfall_figure(trace, 0)
    for view, longest in (("light:1440", 80), ("dark:390", 40)):
        out = themed(fig, view)
        [notes] = [a for a in out.layout.annotations if a.name == "stage warnings"]
        lines = str(notes.text).split("<br>")
        assert len(lines) > 2 and max(len(line) for line in lines) <= longest, lines  # two warnings, wrapped
        [caption] = [a for a in out.layout.annotations if a.name == "caption"]
        assert -notes.yshift + 20 * len(lines) <= -caption.yshift  # the caption under them
        assert out.layout.height >= fig.layout.height + 20 * len(lines)
