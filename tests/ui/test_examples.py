"""The examples row (playground/ui/examples.py): one chip for each family of the registry, the logit lens
and the lockstep, and each of those examples shows what its note says on the real run, through the
page's own request (components.run_request), on int4 and float32 weights where the model has both (an
example leaves the Weights a person picked, so its note must hold on either)."""
from __future__ import annotations

import dataclasses
import math

import pytest

from playground.charts.views import strategy_views
from playground.charts.watermark import records
from playground.engine import Request
from playground.models.fast import int4 as gguf_int4
from playground.ui import share
from playground.ui.components import run_request
from playground.ui.examples import EAGLE_TREE, LOCKSTEP_TEXT, Example, example_run_key, examples, note_after
from playground.ui.handlers import generate
from playground.ui.sweep_panel import rules_view, sweep_request
from playground.whatif.answers import DEFAULT_BRANCHES
from playground.whatif.grid import parse_values
from playground.whatif.lens import lens
from playground.whatif.lockstep import lockstep
from playground.whatif.rules import DEFAULT_ETA, DEFAULT_WINDOW
from playground.whatif.sample_many import sample_many
from playground.whatif.sweep import sweep
from playground.whatif.watermark import detect_text
from strategies.registry import REGISTRY, all_strategies

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

WEIGHTS = ["int4", "float32"] if gguf_int4.kernel_available() else ["float32"]


def example(predicate) -> Example:
    found = [ex for ex in examples() if predicate(ex)]
    assert len(found) == 1, [ex.label for ex in found]
    return found[0]


def side(store, ex: Example, key: str = "a", dtype: str = "auto", **params):
    """The final frame of the example's run on side ``key`` (a: its strategy, b: Compare's), as the page asks."""
    cfg = ex.config
    strategy, values = (cfg.strategy, cfg.params) if key == "a" else (cfg.compare_strategy, cfg.compare_params)
    values = {**dataclasses.asdict(cfg), "strategy": strategy, "params": {**values, **params}, "dtype": dtype,
              "grammar_kind": cfg.grammar_kind or None}
    return list(generate(store, run_request(values), final_step="uncertain"))[-1]


def test_every_family_the_lens_and_the_lockstep_have_a_chip():
    shown = examples()
    families = {REGISTRY[s].family for ex in shown for s in (ex.config.strategy, ex.config.compare_strategy)
                if ex.config.run == "compare" or s == ex.config.strategy}
    assert families == {s.family for s in all_strategies()}
    assert any("lens" in ex.then for ex in shown) and any(ex.config.pair_a for ex in shown)
    assert len({ex.label for ex in shown}) == len(shown)
    lockstep_ex = example(lambda ex: ex.config.pair_a)
    assert lockstep_ex.run_flag == "lockstep"  # no Explore run: the lockstep reads its own text
    assert not note_after(example_run_key(lockstep_ex), lockstep_ex.config, "generate")
    assert example(lambda ex: "lens" in ex.then).run_flag == "generate,lens"
    assert example(lambda ex: ex.config.sweep).run_flag == "sweep"  # What if's sweep runs alone
    assert [ex.label for ex in shown if ex.whatif] == [
        "Toy 70/30 · sample many", "SmolLM2 · weights in lockstep", "SmolLM2 · score & detect",
        "Toy-think · budget sweep", "Toy-think · answer rules"]
    assert example(lambda ex: ex.config.score_text).run_flag == "score,detect"
    assert example(lambda ex: "sample" in ex.then).run_flag == "sample"
    for ex in shown:  # a link of each restores it (the lockstep's and the lens's fields included)
        back, warnings = share.decode(share.encode(ex.config), share.defaults())
        assert warnings == [] and back == dataclasses.replace(ex.config, params=back.params,
                                                              compare_params=back.compare_params), ex.label


def test_the_sample_many_example_draws_its_counts_and_p(store):
    cfg = example(lambda ex: "sample" in ex.then).config
    got = sample_many(store, Request(cfg.model, cfg.strategy, cfg.prompt, cfg.params, seed=cfg.seed,
                                     max_new_tokens=4), 500)  # the panel's defaults: N 500, 4 tokens
    top = [(o["text"].strip(), o["count"], round(o["probability"], 3)) for o in got["outcomes"][:2]]
    assert top == [("a time there lived", 344, 0.699), ("the hill rose high", 153, 0.299)]
    assert len(got["outcomes"]) == 5 and round(got["chi_square"]["p_value"], 2) == 0.60


def total(trace) -> float:
    return sum(t["logprob"] for t in trace["tokens"])


def test_the_beam_example_finds_a_text_five_times_likelier_than_greedys(store):
    ex = example(lambda ex: ex.config.strategy == "beam")
    beam, greedy = side(store, ex, "a").trace, side(store, ex, "b").trace
    assert ex.config.compare_strategy == "greedy" and ex.config.run == "compare"
    start = "".join(store.get("toy").piece(int(i)) for i in ex.config.prompt.split())
    assert f"'{start.strip()}'" in ex.note  # the note names the prompt's words: 'there once'
    assert beam["text"] != greedy["text"]
    assert greedy["text"].startswith("upon") and beam["text"] == "a time there lived happily ever"
    assert round(total(greedy), 2) == -2.59 and round(total(beam), 2) == -0.99  # the note's figures
    assert math.exp(total(beam) - total(greedy)) > 4.5
    first = {c["text"].strip(): c["raw_prob"] for c in greedy["steps"][0]["candidates"]}
    assert round(first["upon"], 2) == 0.49 and round(first["a"], 2) == 0.37
    assert any(v.title.lower().startswith("beam") for v in strategy_views(beam, 0))


def loops(trace) -> list:
    return trace.get("loops") or []


@pytest.mark.slow  # two Gemma runs of 40 tokens on each weights: about a minute
@pytest.mark.parametrize("dtype", WEIGHTS)
def test_the_contrastive_example_breaks_the_loop_greedy_falls_into(store, dtype):
    ex = example(lambda ex: ex.config.strategy == "contrastive")
    assert ex.config.compare_strategy == "greedy" and ex.config.run == "compare"
    greedy = side(store, ex, "b", dtype, loop_repeats=2).trace  # detection only: it records, never changes a token
    contrastive = side(store, ex, "a", dtype, loop_repeats=2).trace
    assert loops(greedy) and loops(greedy)[0]["repeats"] >= 2
    assert not loops(contrastive), contrastive["text"]
    assert contrastive["text"] != greedy["text"]
    assert contrastive["contrastive"] and "alpha_threshold" in contrastive["steps"][0]  # its own chart's record


@pytest.mark.parametrize("dtype", WEIGHTS)
def test_the_lens_example_reads_paris_rising_to_the_top_at_layer_14(store, dtype):
    ex = example(lambda ex: "lens" in ex.then)
    frame = side(store, ex, "a", dtype)
    assert frame.step == 0 and frame.trace["tokens"][0]["text"] == " Paris"  # the step the lens reads
    record = lens(store, frame.trace, frame.step)
    ranks = [r["chosen_rank"] for r in record["rows"]]
    assert len(ranks) == 19 and record["first_top_layer"] == 14  # 18 layers and the embeddings
    assert min(ranks[:12]) > 2_000 and ranks[11] > 20_000 and 50 <= ranks[12] <= 70 and ranks[13] == 2
    assert set(ranks[14:]) == {1}


@pytest.mark.skipif(not gguf_int4.kernel_available(), reason="this torch has no CPU int4 kernel")
def test_the_lockstep_example_parts_a_little_and_flips_near_ties_on_int4(store):
    ex = example(lambda ex: ex.config.pair_a)
    cfg = ex.config
    assert (cfg.pair_a, cfg.pair_b, cfg.pair_model, cfg.pair_text) == ("float32", "auto", "", LOCKSTEP_TEXT)
    record = lockstep(store, cfg.pair_text, cfg.model, cfg.model, cfg.pair_a, "int4", prompt=cfg.prompt,
                      chat=cfg.chat)
    summary = record["summary"]
    assert summary["tokens"] == 18 and round(summary["agreement"] * 18) == 16  # "2 of 18 steps"
    assert 0.001 < summary["mean_kl_ab"] < 0.003  # "0.002 nats on average"


@pytest.mark.parametrize("dtype", WEIGHTS)
def test_the_eagle_example_draws_a_tree_and_writes_greedys_text(store, dtype):
    ex = example(lambda ex: ex.config.params.get("draft") == "eagle")
    assert ex.config.params["eagle_tree"] == "static"  # pinned: auto picks one level on a CPU
    assert (ex.config.params["eagle_depth"], ex.config.params["eagle_branching"]) == EAGLE_TREE
    trace = side(store, ex, "a", dtype, measure_baseline=False).trace
    greedy = side(store, dataclasses.replace(ex, config=dataclasses.replace(ex.config, strategy="greedy", params={})),
                  "a", dtype).trace
    assert trace["text"] == greedy["text"]
    rounds = trace["rounds"]
    assert rounds and all(len(r["tree"]) == 15 for r in rounds)  # the root and 2 + 4 + 8 drafts
    kept = len(trace["tokens"]) / len(rounds)
    assert 2 <= kept <= 3  # "about 2.4 tokens a round"


def test_the_thinking_examples_cut_the_count_and_cool_the_answer(store):
    budget = example(lambda ex: ex.label == "Toy-think · thinking budget")
    cut, whole = side(store, budget, "a").trace, side(store, budget, "b").trace
    assert cut["text"] == "<think> 4 5 6 </think> 6" and whole["text"] == "<think> 4 5 6 7 8 9 </think> 9"
    assert cut["phases"]["cut"]["step"] == 4 and round(cut["phases"]["cut"]["marker_p"], 5) == 3e-05
    assert whole["phases"]["cut"] is None
    chains = example(lambda ex: ex.label == "Toy-think · two chains")
    cool, hot = side(store, chains, "a").trace, side(store, chains, "b").trace
    assert cool["text"].split("</think>")[0] == hot["text"].split("</think>")[0] == "<think> 4 5 6 7 8 9 "
    assert cool["text"].split("</think>")[1].split()[0] == "9" and hot["text"].split("</think>")[1].split()[0] == "18"
    start = cool["phases"]["answer_from"]
    assert [s["name"] for s in cool["steps"][start]["stages"]][1:] == ["temperature"]
    swept = example(lambda ex: ex.config.sweep).config  # its note: wrong up to budget 6, right from 8
    record = sweep(store, Request(swept.model, swept.strategy, swept.prompt, swept.params, seed=swept.seed,
                                  max_new_tokens=swept.sweep_tokens), swept.sweep, parse_values(swept.sweep_grid),
                   swept.sweep_n, swept.sweep_extract, [swept.sweep_known], keep_samples=False)
    assert [(p["value"], p["modal_answer"], p["accuracy"]) for p in record["points"]] == [
        (0, "4", 0.0), (2, "4", 0.0), (4, "6", 0.0), (6, "8", 0.0), (8, "9", 1.0), (10, "9", 1.0)]


def test_the_answer_rules_example_splits_majority_vote_from_the_confidence_rules(store):
    """Its note: 20 samples at T 3 over 12 answers, 9 twice; majority vote 6 (3 votes), the rest 9."""
    ex = example(lambda ex: "rules" in ex.then)
    cfg = ex.config
    assert ex.run_flag == "rules" and ex.whatif and not cfg.sweep  # the rules alone, on What if
    req = sweep_request({**dataclasses.asdict(cfg), "dtype": "auto"}, cfg.sweep_tokens)
    _, _, result = rules_view(store, req, None, None, cfg.sweep_n, cfg.sweep_extract, "", [cfg.sweep_known],
                              DEFAULT_BRANCHES, DEFAULT_WINDOW, DEFAULT_ETA)
    answers = [s["answer"] for s in result["samples"]]
    assert len(answers) == 20 and len(set(answers)) == 12 and answers.count("9") == 2
    picks = {p["rule"]: p["answer"] for p in result["picks"]}
    assert picks.pop("majority") == "6" and answers.count("6") == 3
    assert set(picks.values()) == {"9"} and len(picks) == 3, picks


def test_the_detect_example_finds_the_watermark_examples_text_and_not_a_plain_one(store):
    """The note's figures: 44 green of 80, z 6.2 on the text the watermark example wrote on float32 weights
    (the same run, redone here), and z 0.5 on a sentence written without it."""
    ex, wm = example(lambda ex: ex.config.score_text), example(lambda ex: ex.label == "SmolLM2 · watermark")
    assert side(store, wm, "a", "float32").trace["text"] == ex.config.score_text
    p, cfg = ex.config.params, ex.config
    found = detect_text(store, cfg.model, cfg.score_text, cfg.prompt, "", True, p.get("watermark_gamma", 0.25))
    assert (found["green"], found["scored"], round(found["z"], 1)) == (44, 80, 6.2) and "z 6.2" in ex.note
    plain = detect_text(store, cfg.model, OCEAN, cfg.prompt, "", True)
    assert round(plain["z"], 1) == 0.5 and "0.5 for one about the ocean" in ex.note


OCEAN = ("The ocean covers most of the Earth and is home to millions of species, from tiny plankton to the blue "
         "whale, the largest animal that has ever lived.")


@pytest.mark.parametrize("dtype", WEIGHTS)
def test_the_watermark_examples_z_passes_4_on_either_weights(store, dtype):
    """The note's 'z climbs past 4' holds whatever Weights a person left picked (measured 5.9 on int4, 6.2
    on float32, 6.7 on bfloat16)."""
    ex = example(lambda ex: ex.label == "SmolLM2 · watermark")
    trace = side(store, ex, "a", dtype).trace
    assert records(trace)[-1][2]["z"] > 4
