"""Loops: the definition on hand-made token lists, the detector in the sampling loop (toy, forced tokens),
its knobs and the CLI's lines, the other decoders and sample many on their finished texts, and Gemma 3
270M's greedy loop (int4), with and without DRY."""
from __future__ import annotations

import pytest

from playground.cli import main
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.whatif.sample_many import sample_many
from strategies.loops import LOOP_REASON, LoopDetector, find_loops, is_primitive
from strategies.sampling.samplers import SamplerParams
from strategies.sampling.sampling import GreedyParams


def table(token_ids: list[int], repeats: int, min_span: int = 1) -> list[tuple[int, tuple[int, ...], int, int]]:
    """(start, span, found_at, length) of each loop found."""
    return [(lp.start, lp.ids, lp.found_at, lp.length) for lp in find_loops(token_ids, repeats, min_span)]


@pytest.mark.parametrize("tokens, repeats, min_span, expected", [
    ([], 3, 1, []),
    ([1, 2, 3, 4, 5, 6], 2, 1, []),  # no loop
    ([1, 2, 1, 2, 1, 3], 3, 1, []),  # two copies and a half: not three
    ([5, 5, 5], 3, 1, [(0, (5,), 2, 3)]),  # period 1, at the very start, found as its third copy ends
    ([5, 5, 5, 5, 5, 6], 3, 1, [(0, (5,), 2, 5)]),  # it goes on: one record, longer, not a new loop
    ([5, 5, 5, 5, 5, 5], 2, 1, [(0, (5,), 1, 6)]),  # shortest period first: never (5, 5) or (5, 5, 5)
    ([9, 1, 2, 1, 2, 1, 2, 1, 4], 3, 1, [(1, (1, 2), 6, 7)]),  # length 7: 3 whole copies and one more token
    ([7, 7, 7, 7, 7, 7], 3, 2, []),  # min_span 2: a run of one token is no span of two (not primitive)
    ([1, 1, 2, 1, 1, 2, 1, 1, 2], 3, 2, [(0, (1, 1, 2), 8, 9)]),  # the stutter 1 1 passes, the period-3 loop counts
    # overlapping candidates: the stutters are found first, then the loop that reaches back over them
    ([1, 1, 2, 1, 1, 2, 1, 1, 2], 2, 1, [(0, (1,), 1, 2), (3, (1,), 4, 2), (0, (1, 1, 2), 5, 9)]),
    # a loop ends at the token that breaks it; a new one whose window holds that token may overlap its tail
    ([0, 1, 2, 1, 2, 1, 2, 1, 2, 3, 1, 2, 3, 1, 2, 3], 3, 1, [(1, (1, 2), 6, 8), (7, (1, 2, 3), 15, 9)]),
])
def test_the_definition_on_hand_made_lists(tokens, repeats, min_span, expected):
    assert table(tokens, repeats, min_span) == expected


def test_step_by_step_the_loop_is_found_at_the_step_its_last_copy_ends():
    detector = LoopDetector(repeats=3)
    tokens = [4, 8, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2]
    found = {t: detector.add(token) for t, token in enumerate(tokens)}
    assert [t for t, loop in found.items() if loop is not None] == [10]
    loop = found[10]
    assert loop is not None and (loop.start, loop.period, loop.found_at) == (2, 3, 10)
    assert (loop.length, loop.repeats) == (11, 3)  # it went on for two tokens after it was found
    assert detector.loops == find_loops(tokens, 3) == [loop]
    record = loop.to_dict(lambda ids: "|".join(map(str, ids)))
    assert record == {"start": 2, "period": 3, "repeats": 3, "length": 11, "found_at": 10, "ids": [1, 2, 3],
                      "text": "1|2|3"}


def test_primitive_spans():
    assert is_primitive([1]) and is_primitive([1, 2]) and is_primitive([1, 1, 2]) and is_primitive([1, 2, 1])
    assert not is_primitive([1, 1]) and not is_primitive([1, 2, 1, 2]) and not is_primitive([3, 3, 3])


def test_the_knobs_are_off_by_default_and_below_2_repeats_is_off():
    assert GreedyParams().loop_repeats == 0 and SamplerParams().loop_stop is False
    assert SamplerParams(loop_repeats=1).loop_repeats == 0  # one off value, as every switch has
    with pytest.raises(InvalidRequest, match=r"loop_min_span must be in \[1, 1000\], got 0"):
        GreedyParams(loop_repeats=3, loop_min_span=0)
    with pytest.raises(ValueError):
        LoopDetector(repeats=1)


FORCED_LOOP = {0: "a", 1: "a", 2: "a"}  # toy: ' a' three times, a loop of period 1 found at step 2


@pytest.mark.parametrize("strategy, params", [("greedy", {}), ("sampling", {"temperature": 0.7}),
                                              ("gumbel", {"top_k": 5})])
def test_the_sampling_loop_records_and_stops_at_a_loop(store, toy, strategy, params):
    watched = run(store, Request("toy", strategy, "1 2", {**params, "loop_repeats": 3}, seed=3, max_new_tokens=8,
                                 forced=FORCED_LOOP))
    assert watched.finish_reason != LOOP_REASON
    first = watched.extra["loops"][0]
    assert (first["start"], first["period"], first["found_at"], first["ids"]) == (0, 1, 2, toy.tokenizer("a", add_special_tokens=False)["input_ids"])
    assert first["text"] == toy.decode(first["ids"])
    stopped = run(store, Request("toy", strategy, "1 2", {**params, "loop_repeats": 3, "loop_stop": True}, seed=3,
                                 max_new_tokens=8, forced=FORCED_LOOP))
    assert stopped.finish_reason == LOOP_REASON and len(stopped.tokens) == 3
    assert stopped.extra["loops"] == [dict(first, repeats=3, length=3)]
    plain = run(store, Request("toy", strategy, "1 2", {**params, "loop_stop": True}, seed=3, max_new_tokens=8,
                               forced=FORCED_LOOP))  # loop_stop alone: nothing is watched, nothing stops
    assert "loops" not in plain.extra and plain.token_ids == watched.token_ids  # watching changes no token


def test_the_cli_names_the_loop_and_why_it_stopped(capsys):
    argv = ["run", "--model", "toy", "--prompt", "1 2", "--max-new-tokens", "8", "--loop-repeats", "3",
            "--loop-stop", "true", "--force", "0:a", "--force", "1:a", "--force", "2:a"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == "[loop] 1 token x 3 from step 0 (found at step 2): 'a'"
    assert out[-1] == "[loop] the run stopped at step 2: loop_stop"


GEMMA_LOOP_PROMPT = "The best way to learn a new language is"  # the page's "Gemma · greedy loop" example


def test_gemma_greedy_loop_is_found_and_stopped(store, gemma):
    """Greedy on Gemma 3 270M base writes ' to practice it.\\n\\nThe best way to learn a new language is' over
    and over: a loop of 14 tokens from the first step, whole (three copies) at step 41."""
    base = dict(model="gemma3-270m", prompt=GEMMA_LOOP_PROMPT, max_new_tokens=64, dtype="int4")
    greedy = run(store, Request(strategy="greedy", params={"loop_repeats": 3}, **base))
    assert len(greedy.tokens) == 64 and greedy.finish_reason == "length"
    [loop] = greedy.extra["loops"]
    assert (loop["start"], loop["period"], loop["found_at"]) == (0, 14, 41)
    assert loop["length"] == 64 and loop["repeats"] == 4
    assert loop["text"] == " to practice it.\n\nThe best way to learn a new language is"
    stopped = run(store, Request(strategy="greedy", params={"loop_repeats": 3, "loop_stop": True}, **base))
    assert stopped.finish_reason == LOOP_REASON and len(stopped.tokens) == 42 < 64
    assert stopped.token_ids == greedy.token_ids[:42]
    # DRY (still greedy: T = 0) penalises the token that would extend a repeat: the sentence comes back
    # reworded each time, and no span repeats back to back, even twice
    dry = run(store, Request(strategy="sampling", params={"temperature": 0.0, "dry_multiplier": 0.8,
                                                          "loop_repeats": 2}, **base))
    assert dry.extra["loops"] == [] and len(dry.tokens) == 64


@pytest.mark.parametrize("strategy, params, seed", [
    ("stochastic_beam", {"temperature": 3.0}, 1),  # this seed's best sequence says ' happily happily'
    ("beam", {}, 0), ("sample_beam", {"temperature": 3.0}, 1),
    ("speculative", {"temperature": 3.0, "draft": "toy-small"}, 1), ("speculative", {"draft": "eagle"}, 1),
    ("contrastive", {"temperature": 3.0}, 1)])
def test_the_other_decoders_record_the_loops_of_their_final_text(store, toy, strategy, params, seed):
    trace = run(store, Request("toy", strategy, "1 2", {**params, "loop_repeats": 2}, seed=seed, max_new_tokens=24))
    assert trace.extra["loops"] == [lp.to_dict(toy.decode) for lp in find_loops(trace.token_ids, 2)]
    if strategy == "stochastic_beam":
        assert [(lp["start"], lp["period"], lp["text"]) for lp in trace.extra["loops"]] == [(3, 1, "happily")]
    plain = run(store, Request("toy", strategy, "1 2", params, seed=seed, max_new_tokens=24))
    assert "loops" not in plain.extra and plain.token_ids == trace.token_ids


def test_sample_many_lists_each_outcomes_loops_and_refuses_loop_stop(store, toy):
    req = Request("toy", "sampling", "1 2", {"temperature": 3.0, "loop_repeats": 2}, seed=0, max_new_tokens=12)
    result = sample_many(store, req, 40)
    assert result["batched"]
    for outcome in result["outcomes"]:
        assert outcome["loops"] == [lp.to_dict(toy.decode) for lp in find_loops(outcome["ids"], 2)]
    assert any(outcome["loops"] for outcome in result["outcomes"] if outcome["count"])
    with pytest.raises(InvalidRequest, match="sample many takes no loop_stop"):
        sample_many(store, Request("toy", "greedy", "1 2", {"loop_repeats": 2, "loop_stop": True}), 5)
