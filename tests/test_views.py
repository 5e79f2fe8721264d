"""Strategy views plug in by what the trace carries, and per-step views follow the selected step."""
from playground.engine import Request, run
from playground.charts.views import strategy_views


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
    frames = list(generate(store, "toy", "contrastive", "1 2", {"amateur": "toy-small"}, seed=0, max_new_tokens=6,
                           refresh_seconds=0.0))
    final = frames[-1]
    assert final.final and final.step is not None
    titles = [v.title for v in final.views]
    assert f"Contrastive step {final.step}: expert vs amateur" in titles, (final.step, titles)
    streamed = [f for f in frames[:-1] if f.views is not None]
    assert streamed, "refresh_seconds=0 redraws while streaming"
    for f in streamed:
        assert f"Contrastive step {f.step}: expert vs amateur" in [v.title for v in f.views]
