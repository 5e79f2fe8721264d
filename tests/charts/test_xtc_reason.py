"""XTC says per step why it did or did not act, from its record alone (hand-made stage records): it
acted; its coin was not under its probability; or the coin was under it and fewer than two tokens
reached its threshold. The reason is in the distribution's line label and caption, the waterfall
panel's title and the per-step coin chart's caption and hover."""
from __future__ import annotations

from figure_reading import fig_dict, role_trace

from playground.charts.common import caption_of
from playground.charts.distribution import distribution_caption, distribution_figure
from playground.charts.marks import stage_summary, xtc_reason
from playground.charts.samplers import adaptive_figure
from playground.charts.waterfall import waterfall_figure

ACTED = {"probability": 0.5, "threshold": 0.1, "coin": 0.12, "acted": True, "removed": 2}
COIN_TOO_HIGH = {"probability": 0.5, "threshold": 0.1, "coin": 0.73, "acted": False, "removed": 0}
FEWER_THAN_TWO = {"probability": 0.5, "threshold": 0.3, "coin": 0.2, "acted": False, "removed": 0}
REASONS = {"acted": (ACTED, "coin 0.12 < probability 0.5: acted, removed 2"),
           "coin": (COIN_TOO_HIGH, "coin 0.73 ≥ probability 0.5: did not act"),
           "fewer": (FEWER_THAN_TWO, "coin 0.20 < probability 0.5, but fewer than two tokens ≥ threshold 0.3: "
                                     "nothing to remove")}


def _step(decision: dict) -> dict:
    """Four candidates; XTC received (0.5, 0.3, 0.15, 0.05) and, where it acted, removed the first two."""
    entering = [0.5, 0.3, 0.15, 0.05]
    kept = [not decision["acted"] or i >= 2 for i in range(4)]
    after = [0.0, 0.0, 0.75, 0.25] if decision["acted"] else entering
    cands = [{"id": i, "text": f" t{i}", "raw_prob": p, "prob": a, "kept": k}
             for i, (p, a, k) in enumerate(zip(entering, after, kept))]
    chosen = 2
    return {"position": 3, "chosen": chosen, "entropy": 1.0, "raw_entropy": 1.0, "candidates": cands,
            "stages": [{"name": "raw", "probs": entering, "kept": [True] * 4, "kept_count": 4},
                       {"name": "xtc", "probs": after, "kept": kept, "kept_count": sum(kept), "decision": decision,
                        "truncates": True}]}


def _trace() -> dict:
    steps = [_step(d) for d, _ in REASONS.values()]
    return {"model": "toy", "strategy": "sampling", "chain": ["xtc", "multinomial"], "steps": steps,
            "tokens": [{"id": 2, "text": " t2", "logprob": -0.3, "raw_logprob": -1.9} for _ in steps]}


def test_the_three_reasons_in_words():
    for decision, said in REASONS.values():
        assert xtc_reason(decision) == said


def test_a_coin_next_to_the_probability_keeps_its_side():
    """0.4996 under 0.5 never reads "0.50 < 0.5"; 0.5 itself reads ≥."""
    assert xtc_reason({**COIN_TOO_HIGH, "coin": 0.4996}).startswith("coin 0.4996 < probability 0.5")
    assert xtc_reason({**COIN_TOO_HIGH, "coin": 0.5}).startswith("coin 0.50 ≥ probability 0.5")
    assert xtc_reason({**COIN_TOO_HIGH, "coin": 0.5001}).startswith("coin 0.5001 ≥ probability 0.5")
    assert xtc_reason({"probability": 0.5, "threshold": 0.1}) == ""  # no coin recorded: nothing said


def test_each_chart_says_the_reason_of_its_step():
    trace = _trace()
    for k, (_, said) in enumerate(REASONS.values()):
        stage = trace["steps"][k]["stages"][1]
        # the waterfall's panel (beside the others): the coin and the verdict; the rest says it all
        short = f"coin {said.split()[1]} · {said.rpartition(': ')[2]}"
        assert stage_summary(stage) == said and stage_summary(stage, panel=True) == short
        assert f"xtc line: {said}" in distribution_caption(trace, k)
        fd = fig_dict(distribution_figure(trace, k))
        labels = [a["text"] for a in fd["layout"]["annotations"] if a.get("text")]
        assert f"XTC removes p ≥ {stage['decision']['threshold']:g} · {said}" in labels, labels
        titles = [a["text"] for a in fig_dict(waterfall_figure(trace, k))["layout"]["annotations"]]
        assert any(short in t for t in titles), titles
        fig = adaptive_figure(trace, k)
        assert f"XTC at step {k}: {said}" in caption_of(fig)
        coins = role_trace(fig_dict(fig), "xtc coin")
        assert coins["customdata"][k] == said
