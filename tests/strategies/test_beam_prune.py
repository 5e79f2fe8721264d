"""Freitag & Al-Onaizan (2017) pruning against tables worked out by hand.

The expected decisions and bounds below are written out with their arithmetic, not derived by
the code under test. Natural logs: ln 0.2 = -1.609438, ln 0.3 = -1.203973, ln 0.5 = -0.693147,
ln 0.6 = -0.510826, ln 0.8 = -0.223144, ln 0.15 = -1.897120, ln 0.1 = -2.302585.
"""
from __future__ import annotations

import pytest
from beam_fakes import final, table_lm

from strategies.beam.beam import BeamParams, beam
from strategies.beam.prune import ABSOLUTE, LOCAL, PER_NODE, RELATIVE, PruneRules, prune

# The active list C, best first: (score, last-token log-prob, parent).
C = [(-1.0, -0.5, 0), (-1.5, -1.0, 0), (-2.5, -0.2, 1), (-4.0, -2.0, 1)]

KEPT = ("kept", "", None)

HAND_TABLES = [
    # rules off: nothing is pruned
    (PruneRules(), [KEPT, KEPT, KEPT, KEPT]),
    # r_p = 0.2: bound = ln 0.2 + (-1.0) = -2.609438; -2.5 stays, -4.0 goes
    (PruneRules(relative=0.2), [KEPT, KEPT, KEPT, ("pruned", RELATIVE, -2.609438)]),
    # r_p = 0.3: bound = ln 0.3 - 1.0 = -2.203973; -1.5 stays, -2.5 and -4.0 go
    (PruneRules(relative=0.3), [KEPT, KEPT, ("pruned", RELATIVE, -2.203973), ("pruned", RELATIVE, -2.203973)]),
    # a_p = 1.5: bound = -1.0 - 1.5 = -2.5; the test is <=, so -2.5 itself goes
    (PruneRules(absolute=1.5), [KEPT, KEPT, ("pruned", ABSOLUTE, -2.5), ("pruned", ABSOLUTE, -2.5)]),
    # r_pl = 0.5 on the last token: the best last token in C is -0.2 (the third), bound = ln 0.5 - 0.2
    # = -0.893147; -0.5 and -0.2 stay, -1.0 and -2.0 go, whatever their cumulative scores
    (PruneRules(local=0.5), [KEPT, ("pruned", LOCAL, -0.893147), KEPT, ("pruned", LOCAL, -0.893147)]),
    # r_pl = 0.8: bound = ln 0.8 - 0.2 = -0.423144 would take the best candidate (-0.5), which is spared
    (PruneRules(local=0.8), [KEPT, ("pruned", LOCAL, -0.423144), KEPT, ("pruned", LOCAL, -0.423144)]),
    # mc = 1: the second of parent 0 and the second of parent 1 go
    (PruneRules(max_per_node=1), [KEPT, ("pruned", PER_NODE, 1.0), KEPT, ("pruned", PER_NODE, 1.0)]),
    # mc = 2: no parent has two better children in C
    (PruneRules(max_per_node=2), [KEPT, KEPT, KEPT, KEPT]),
    # r_p = 0.3 with mc = 1: the second candidate passes r_p (-1.5 > -2.203973) and falls to mc; the
    # others fail r_p first, the rule named first
    (PruneRules(relative=0.3, max_per_node=1),
     [KEPT, ("pruned", PER_NODE, 1.0), ("pruned", RELATIVE, -2.203973), ("pruned", RELATIVE, -2.203973)]),
]


@pytest.mark.parametrize("rules,expected", HAND_TABLES)
def test_rules_on_the_active_list_match_the_hand_table(rules, expected):
    scores, logprobs, parents = (list(x) for x in zip(*C))
    got = prune(scores, logprobs, parents, rules)
    assert [(d.status, d.reason) for d in got] == [(e[0], e[1]) for e in expected]
    for d, e in zip(got, expected):
        assert d.threshold == (None if e[2] is None else pytest.approx(e[2], abs=1e-6))


def test_an_empty_active_list_prunes_nothing():
    assert prune([], [], [], PruneRules(relative=0.5)) == []


# --- through the search: a one-step table where the best candidate ends -----------------------------

# After the prompt token 7 the model says: EOS 0.40, token 1 0.20, 2 0.15, 3 0.10, 4 0.08, 5 0.04,
# 6 0.02, 7 0.01. With k = 3 the pool is the best max(2, 1 + 1) x 3 = 6: EOS, 1, 2, 3, 4, 5.
STEP0 = {0: 0.40, 1: 0.20, 2: 0.15, 3: 0.10, 4: 0.08, 5: 0.04, 6: 0.02, 7: 0.01}


def step0(params: BeamParams) -> list[tuple[int, str, str, float | None]]:
    lm = table_lm({7: STEP0}, vocab=8)
    trace = final(beam, lm, params, [7], 2)
    nodes = sorted((n for n in trace.beam["nodes"] if n["step"] == 0), key=lambda n: n["rank"])
    return [(n["token_id"], n["status"], n["reason"], n["threshold"]) for n in nodes]


FELL = "ranked below the 3 beams"

STEP0_TABLES = [
    # transformers: EOS ranks first in the pool and is finished; C = tokens 1, 2, 3; 4 and 5 fell off.
    # r_p = 0.6 against the best ACTIVE candidate: 0.6 x 0.20 = 0.12 = e^-2.120264, so 2 (0.15) stays and
    # 3 (0.10) goes. (Against the finished EOS, 0.6 x 0.40 = 0.24 would have taken 2 as well.)
    (dict(relative_threshold=0.6),
     [(0, "finished", "eos", None), (1, "kept", "", None), (2, "kept", "", None),
      (3, "pruned", RELATIVE, -2.120264), (4, "fell_off", FELL, None), (5, "fell_off", FELL, None)]),
    # a_p = 0.5: bound = ln 0.2 - 0.5 = -2.109438; ln 0.15 = -1.897120 stays, ln 0.10 = -2.302585 goes
    (dict(absolute_threshold=0.5),
     [(0, "finished", "eos", None), (1, "kept", "", None), (2, "kept", "", None),
      (3, "pruned", ABSOLUTE, -2.109438), (4, "fell_off", FELL, None), (5, "fell_off", FELL, None)]),
    # mc = 1: every candidate shares the prompt as parent; 2 and 3 go and their slots stay empty, as a
    # threshold's do: 4 and 5 still fell off
    (dict(max_candidates_per_node=1),
     [(0, "finished", "eos", None), (1, "kept", "", None), (2, "pruned", PER_NODE, 1.0),
      (3, "pruned", PER_NODE, 1.0), (4, "fell_off", FELL, None), (5, "fell_off", FELL, None)]),
    # keep_slot: the beam is the best 3 of the pool: EOS (finished, holds a slot), 1, 2; C = 1, 2;
    # r_p = 0.8: 0.8 x 0.20 = 0.16 = e^-1.832581 > 0.15, so 2 goes
    (dict(relative_threshold=0.8, finishing="keep_slot"),
     [(0, "finished", "eos", None), (1, "kept", "", None), (2, "pruned", RELATIVE, -1.832581),
      (3, "fell_off", FELL, None), (4, "fell_off", FELL, None), (5, "fell_off", FELL, None)]),
]


@pytest.mark.parametrize("knobs,expected", STEP0_TABLES, ids=lambda x: "+".join(x) if isinstance(x, dict) else "")
def test_the_first_step_matches_the_hand_table(knobs, expected):
    got = step0(BeamParams(num_beams=3, **knobs))
    assert [(t, s, r) for t, s, r, _ in got] == [(t, s, r) for t, s, r, _ in expected]
    for (*_, threshold), (*_, want) in zip(got, expected):
        assert threshold == (None if want is None else pytest.approx(want, abs=1e-5))


def test_threshold_and_cap_shrink_the_next_step_alike():
    """Both kinds of pruning leave the slot empty: the second step feeds only the kept rows."""
    lm = table_lm({7: STEP0}, vocab=8)
    for knobs, rows in ((dict(relative_threshold=0.6), 2), (dict(max_candidates_per_node=1), 1), ({}, 3)):
        trace = final(beam, lm, BeamParams(num_beams=3, early_stopping="never", **knobs), [7], 2)
        counters = trace.beam["counters"]
        assert counters["expanded"] == 1 + rows, knobs
        assert counters["expanded_without_pruning"] == 1 + 3, knobs
