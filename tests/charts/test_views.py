"""Strategy views plug in by what the trace carries, and per-step views follow the selected step."""
from playground.charts.views import strategy_views
from playground.engine import Request, run


def test_sampling_trace_has_no_family_views_but_the_entropy_map(store):
    views = strategy_views(run(store, Request("toy", "sampling", "1 2", seed=1, max_new_tokens=3)).to_dict())
    assert [v.title for v in views] == ["Entropy map"]


def test_contrastive_step_view_follows_the_selected_step(store):
    d = run(store, Request("toy", "contrastive", "1 2", {"amateur": "toy-small"}, max_new_tokens=5)).to_dict()
    last = len(d["steps"]) - 1
    titles = [v.title for v in strategy_views(d)]
    assert f"Contrastive step {last}: expert vs amateur" in titles
    picked = strategy_views(d, step=1)
    assert "Contrastive step 1: expert vs amateur" in [v.title for v in picked]
    assert len(picked) == len(titles)


def test_views_without_a_step_argument_still_come_back(store):
    d = run(store, Request("toy", "beam", "1 2", {"num_beams": 2}, max_new_tokens=4)).to_dict()
    assert [v.title for v in strategy_views(d, step=2)] == [v.title for v in strategy_views(d)] != []


def test_the_final_frame_shows_the_strategy_views_of_the_step_it_selects(store):
    """After a run the page selects one step (the most uncertain); the per-step view shows that one too."""
    from playground.ui.handlers import generate
    frames = list(generate(store, Request("toy", "contrastive", "1 2", {"amateur": "toy-small"}, seed=0,
                                          max_new_tokens=6), refresh_seconds=0.0))
    final = frames[-1]
    assert final.final and final.step is not None
    titles = [v.title for v in final.views]
    assert f"Contrastive step {final.step}: expert vs amateur" in titles, (final.step, titles)
    streamed = [f for f in frames[:-1] if f.views is not None]
    assert streamed, "refresh_seconds=0 redraws while streaming"
    for f in streamed:
        assert f"Contrastive step {f.step}: expert vs amateur" in [v.title for v in f.views]


FAMILY_RUNS = [("greedy", {}), ("sampling", {"temperature": 1.2}), ("gumbel", {}), ("beam", {"num_beams": 3}),
               ("sample_beam", {"num_beams": 2, "num_prefixes": 2}), ("stochastic_beam", {"num_beams": 3}),
               ("speculative", {"draft": "toy-small"}), ("speculative", {"draft": "early_exit"}),
               ("speculative", {"draft": "prompt_lookup"}), ("contrastive", {"amateur": "toy-small"})]


def test_the_view_runs_cover_every_registered_strategy_and_family():
    """A strategy registered later is checked below too, or this fails."""
    from strategies.registry import REGISTRY
    ran = {strategy for strategy, _ in FAMILY_RUNS}
    assert ran == set(REGISTRY), set(REGISTRY) ^ ran
    assert {REGISTRY[s].family for s in ran} == {spec.family for spec in REGISTRY.values()}


def test_no_strategy_draws_more_views_than_the_page_has_slots(store):
    """The page has VIEW_PLOTS figure slots under the text: a family that drew more would lose one."""
    from playground.ui.side import VIEW_PLOTS
    for strategy, params in FAMILY_RUNS:
        d = run(store, Request("toy", strategy, "1 2", params, seed=2, max_new_tokens=6)).to_dict()
        drawn = [v.title for v in strategy_views(d, step=1) if v.figure is not None]
        assert 0 < len(drawn) <= VIEW_PLOTS, (strategy, params, drawn)


def test_views_past_the_slots_are_named_not_dropped(store):
    from playground.ui.side import ViewSlots
    d = run(store, Request("toy", "speculative", "1 2", {"draft": "toy-small"}, seed=2, max_new_tokens=6)).to_dict()
    views = [v for v in strategy_views(d, step=1) if v.figure is not None]
    assert len(views) >= 3
    two = ViewSlots.make(2, "pg-test")
    out = two.updates(views, "light")
    assert list(out) == two.components
    assert [out[slot]["visible"] for slot in two.plots] == [True, True]
    note = out[two.html]["value"]
    left_out = views[2:]
    assert f"{len(left_out)} more view" in note and all(v.title.split(":")[0] in note for v in left_out)
    every = ViewSlots.make(len(views), "pg-test-all")
    assert "more view" not in every.updates(views, "light")[every.html].get("value", "")
