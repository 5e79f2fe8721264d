"""Contrastive decoding: the scoring table, its limits, the amateurs, the trace, the views."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from playground.charts.contrastive import views
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models import ModelStore
from strategies.contrastive.contrastive import ContrastiveParams
from strategies.contrastive.scoring import contrastive_scores, pick_greedy, plausible_mask
from strategies.pairing import check_shared_tokenizer

ROOT = Path(__file__).resolve().parents[2]
EXPERT_PROBS = [0.5, 0.3, 0.1, 0.06, 0.04]
AMATEUR_PROBS = [0.7, 0.1, 0.1, 0.05, 0.05]


def logits_of(probs: list[float]) -> torch.Tensor:
    return torch.tensor([probs]).log()


def random_logits(seed: int, rows: int = 64, vocab: int = 50) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g) * 3


def distinct_2(ids: list[int]) -> float:
    """Distinct bigrams / bigrams (Li et al. 2016)."""
    pairs = list(zip(ids, ids[1:]))
    return len(set(pairs)) / len(pairs)


# --- the pure scoring ---------------------------------------------------------------------------


def test_hand_computed_table() -> None:
    expert, amateur = logits_of(EXPERT_PROBS), logits_of(AMATEUR_PROBS)
    before = (expert.clone(), amateur.clone())
    cs = contrastive_scores(expert, amateur, alpha=0.1, strength=1.0)
    # alpha x top = 0.05: 0.04 is the only token under the line.
    assert cs.plausible[0].tolist() == [True, True, True, True, False]
    assert cs.threshold.item() == pytest.approx(math.log(0.05), abs=1e-6)
    # log(pe / pa) by hand: log(5/7), log 3, log 1, log 1.2, and log 0.8 before masking.
    expected = [-0.33647, 1.09861, 0.0, 0.18232, -0.22314]
    assert cs.scores[0].tolist() == pytest.approx(expected, abs=1e-4)
    assert cs.masked_scores[0, :4].tolist() == pytest.approx(expected[:4], abs=1e-4)
    assert cs.masked_scores[0, 4].item() == float("-inf")
    assert pick_greedy(cs.masked_scores, cs.expert_logprobs).item() == 1  # expert greedy says 0
    assert torch.equal(expert, before[0]) and torch.equal(amateur, before[1])


def test_hand_computed_table_strength_alpha_and_temperature() -> None:
    expert, amateur = logits_of(EXPERT_PROBS), logits_of(AMATEUR_PROBS)
    half = contrastive_scores(expert, amateur, alpha=0.25, strength=0.5)
    # alpha 0.25 -> line at 0.125: only 0.5 and 0.3 stay; log pe - 0.5 log pa by hand.
    assert half.plausible[0].tolist() == [True, True, False, False, False]
    assert half.scores[0, :2].tolist() == pytest.approx([-0.51481, -0.05268], abs=1e-4)
    assert pick_greedy(half.masked_scores, half.expert_logprobs).item() == 1
    # tau = 2: amateur becomes sqrt(pa) renormalised = [0.43660, 0.16502, 0.16502, 0.11668, 0.11668].
    warm = contrastive_scores(expert, amateur, alpha=0.1, strength=1.0, amateur_temperature=2.0)
    assert warm.amateur_logprobs[0].exp().tolist() == pytest.approx([0.4366, 0.16502, 0.16502, 0.11668, 0.11668],
                                                                     abs=1e-4)
    assert warm.scores[0, :4].tolist() == pytest.approx([0.13560, 0.59773, -0.50088, -0.66513], abs=1e-4)
    assert pick_greedy(warm.masked_scores, warm.expert_logprobs).item() == 1


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5])
def test_lambda_zero_picks_the_expert_argmax(alpha: float) -> None:
    expert, amateur = random_logits(1), random_logits(2)
    cs = contrastive_scores(expert, amateur, alpha=alpha, strength=0.0)
    assert torch.equal(pick_greedy(cs.masked_scores, cs.expert_logprobs), expert.argmax(-1))


def test_alpha_one_keeps_only_the_expert_top_token() -> None:
    expert, amateur = random_logits(3), random_logits(4)
    cs = contrastive_scores(expert, amateur, alpha=1.0, strength=2.0)
    assert cs.plausible.sum(-1).tolist() == [1] * expert.shape[0]
    assert torch.equal(cs.plausible.float().argmax(-1), expert.argmax(-1))
    assert torch.equal(pick_greedy(cs.masked_scores, cs.expert_logprobs), expert.argmax(-1))


def test_alpha_zero_keeps_every_token() -> None:
    mask, _ = plausible_mask(random_logits(5).log_softmax(-1), 0.0)
    assert bool(mask.all())


def test_amateur_equal_to_expert_gives_zero_scores_and_expert_greedy() -> None:
    expert = random_logits(6)
    cs = contrastive_scores(expert, expert.clone(), alpha=0.1, strength=1.0)
    assert cs.plausible.sum() > expert.shape[0]  # several plausible tokens per row, so the tie is real
    assert bool((cs.scores[cs.plausible] == 0).all())
    # Documented tie rule: equal scores go to the higher expert log-probability.
    assert torch.equal(pick_greedy(cs.masked_scores, cs.expert_logprobs), expert.argmax(-1))


def test_ties_with_equal_expert_logprob_go_to_the_lower_id() -> None:
    scores = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    expert = torch.tensor([[-0.1, -2.0, -1.0, -1.0]])
    assert pick_greedy(scores, expert).item() == 2


# --- the strategy on the toy models ---------------------------------------------------------------


def toy_request(max_new_tokens: int = 8, **params) -> Request:
    return Request("toy", "contrastive", "1 2", params, max_new_tokens=max_new_tokens)


def full_logits(lm, ids: list[int], hidden: bool = False):
    return lm.forward(torch.tensor([ids]), hidden=hidden)


def test_toy_with_toy_small_matches_uncached_recomputation(store: ModelStore) -> None:
    trace = run(store, toy_request(amateur="toy-small", alpha=0.05, strength=0.8))
    expert, amateur = store.get("toy"), store.get("toy-small")
    ids = list(trace.prompt_ids)
    assert trace.finish_reason == "eos" and len(trace.steps) >= 4
    for step in trace.steps:
        cs = contrastive_scores(full_logits(expert, ids).logits[:, -1], full_logits(amateur, ids).logits[:, -1],
                                alpha=0.05, strength=0.8)
        assert step.chosen == pick_greedy(cs.masked_scores, cs.expert_logprobs).item()
        assert step.extra["expert_choice"] == int(cs.expert_logprobs.argmax())
        for cand in step.candidates:
            assert cand.extra["expert_logprob"] == pytest.approx(cs.expert_logprobs[0, cand.id].item(), abs=1e-4)
            assert cand.extra["amateur_logprob"] == pytest.approx(cs.amateur_logprobs[0, cand.id].item(), abs=1e-4)
            assert cand.extra["plausible"] == bool(cs.plausible[0, cand.id])
            assert cand.kept == cand.extra["plausible"]  # no chain: kept is exactly the mask
        ids.append(step.chosen)
    assert trace.timing.target_forward_passes == len(trace.tokens)
    assert trace.timing.extra["amateur_forward_passes"] == len(trace.tokens)
    assert [s.name for s in trace.steps[0].stages] == ["raw", "contrastive"]
    d = trace.to_dict()
    assert d["contrastive"]["amateur"] == "toy-small"
    assert {"expert_logprob", "amateur_logprob", "score", "plausible"} <= set(d["steps"][0]["candidates"][0])
    assert {"expert_choice", "alpha_threshold"} <= set(d["steps"][0])


@pytest.mark.parametrize("amateur,strength", [("toy", 1.0), ("toy-small", 0.0)])
def test_no_contrast_is_expert_greedy(store: ModelStore, amateur: str, strength: float) -> None:
    greedy = run(store, Request("toy", "greedy", "1 2 3", {}, max_new_tokens=8))
    trace = run(store, Request("toy", "contrastive", "1 2 3", dict(amateur=amateur, strength=strength),
                               max_new_tokens=8))
    assert trace.token_ids == greedy.token_ids


def test_early_exit_amateur_reads_the_layer_of_the_same_pass(store: ModelStore) -> None:
    trace = run(store, toy_request(amateur="early_exit", amateur_layer=1))
    lm = store.get("toy")
    assert trace.extra["contrastive"]["amateur"] == "early_exit@1"
    assert trace.timing.extra["amateur_forward_passes"] == 0
    ids = list(trace.prompt_ids)
    for step in trace.steps:
        layer_logits = lm.logits_from_hidden(full_logits(lm, ids, hidden=True).hidden_states[1][:, -1])
        amateur = layer_logits.log_softmax(-1)[0]
        for cand in step.candidates:
            assert cand.extra["amateur_logprob"] == pytest.approx(amateur[cand.id].item(), abs=1e-4)
        ids.append(step.chosen)


@pytest.mark.parametrize("prompt,start", [("1 2 3 4", []), ("15 1 2 3", [15])])  # 15 = <bos>, kept
def test_window_amateur_sees_only_the_last_tokens(store: ModelStore, prompt: str, start: list[int]) -> None:
    trace = run(store, Request("toy", "contrastive", prompt, dict(amateur="window", amateur_window=2),
                               max_new_tokens=5))
    lm = store.get("toy")
    ids = list(trace.prompt_ids)
    for step in trace.steps:
        amateur = full_logits(lm, start + ids[-2:]).logits[0, -1].log_softmax(-1)
        for cand in step.candidates:
            assert cand.extra["amateur_logprob"] == pytest.approx(amateur[cand.id].item(), abs=1e-4)
        ids.append(step.chosen)
    assert trace.timing.extra["amateur_tokens_processed"] == (2 + len(start)) * len(trace.steps)


@pytest.mark.parametrize("selector", ["multinomial", "gumbel"])
def test_sampling_selector_draws_only_plausible_tokens_and_is_seeded(store: ModelStore, selector: str) -> None:
    params = dict(amateur="toy-small", selector=selector, temperature=1.5, alpha=0.2)
    texts = set()
    for seed in range(6):
        trace = run(store, Request("toy", "contrastive", "1 2", params, seed=seed, max_new_tokens=8))
        again = run(store, Request("toy", "contrastive", "1 2", params, seed=seed, max_new_tokens=8))
        assert again.token_ids == trace.token_ids
        for step in trace.steps:
            chosen = next(c for c in step.candidates if c.id == step.chosen)
            assert chosen.extra["plausible"] and chosen.kept
        assert [s.name for s in trace.steps[0].stages] == ["raw", "contrastive", "temperature"]
        texts.add(trace.text)
    assert len(texts) == 2  # both branches of the toy's 70/30 fork are drawn across seeds


def test_mismatched_pair_is_refused(store: ModelStore) -> None:
    with pytest.raises(InvalidRequest, match=r"amateur 'smollm2-135m' does not share the tokenizer of "
                                             r"'toy': 49152 vs 16 tokens"):
        run(store, toy_request(amateur="smollm2-135m"))


def test_same_size_tokenizers_with_different_tokens_are_refused() -> None:
    def fake(key: str, tokens: list[str]):
        vocab = {t: i for i, t in enumerate(tokens)}
        tok = SimpleNamespace(bos_token_id=0, eos_token_id=1, get_vocab=lambda: dict(vocab))
        return SimpleNamespace(key=key, tokenizer=tok, vocab_size=len(tokens))
    a = fake("a", ["<s>", "</s>", "x", "y"])
    b = fake("b", ["<s>", "</s>", "x", "z"])
    assert check_shared_tokenizer(a, fake("a2", ["<s>", "</s>", "x", "y"]), "amateur") == 4
    with pytest.raises(InvalidRequest, match=r"amateur 'b' does not share the tokenizer of 'a': token 3 is 'z'"):
        check_shared_tokenizer(a, b, "amateur")


@pytest.mark.parametrize("params,message", [
    (dict(alpha=1.5), r"alpha must be in \[0, 1\], got 1.5"),
    (dict(strength=-1), r"strength must be in \[0, 10\], got -1"),
    (dict(amateur_temperature=0), r"amateur_temperature must be in \(0, 10\], got 0"),
    (dict(amateur_window=0), r"amateur_window must be in \[1, 4096\], got 0"),
    (dict(selector="beam"), r"selector must be one of greedy, multinomial, gumbel, got 'beam'"),
    (dict(amateur=" "), r"amateur must be early_exit, window or a model key, got ' '"),
])
def test_bad_params_name_value_and_range(params: dict, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        ContrastiveParams.from_dict(params)


def test_layer_out_of_range_names_the_model(store: ModelStore) -> None:
    with pytest.raises(InvalidRequest, match=r"amateur_layer must be in \[0, 1\] for toy .*got 2"):
        run(store, toy_request(amateur="early_exit", amateur_layer=2))


# --- the views ----------------------------------------------------------------------------------


def test_views_show_the_step_and_the_disagreements(store: ModelStore) -> None:
    trace = run(store, toy_request(amateur="early_exit", amateur_layer=1)).to_dict()
    assert views(run(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=3)).to_dict()) == []
    step_view, run_view, text_view = views(trace)
    last = len(trace["steps"]) - 1
    assert step_view.title.startswith(f"Contrastive step {last}")
    assert views(trace, step=0)[0].title.startswith("Contrastive step 0")
    fig = step_view.figure
    threshold = [s for s in fig.layout.shapes if s.y0 == s.y1]
    assert threshold[0].y0 == pytest.approx(trace["steps"][-1]["alpha_threshold"])
    plausible = [c["plausible"] for c in trace["steps"][-1]["candidates"]]
    assert "#cbd5e1" in fig.data[0].marker.color or all(plausible)
    differ = sum(s["chosen"] != s["expert_choice"] for s in trace["steps"])
    assert f"{differ} of {len(trace['steps'])} steps differ" in run_view.figure.layout.title.text
    assert text_view.html.count("background:#fecaca") == differ


def test_chart_module_imports_no_torch() -> None:
    code = "import sys, playground.charts.contrastive; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


# --- Gemma 3 270M: contrast against a loop ----------------------------------------------------------

LOOP_PROMPT = "I like to eat"  # greedy on Gemma 3 270M base: "a lot of food. I like to eat a lot of food. ..."


def test_gemma_contrast_breaks_a_greedy_loop(store: ModelStore, gemma) -> None:
    """A late layer of the expert as the amateur (15 of 18; see contrastive_amateurs.auto_layer):
    it costs no extra forward, and among the amateurs tried it raised distinct-2 on every looping
    prompt (the window amateur fails when the loop fits in its window)."""
    greedy = run(store, Request("gemma3-270m", "greedy", LOOP_PROMPT, {}, max_new_tokens=48))
    contrast = run(store, Request("gemma3-270m", "contrastive", LOOP_PROMPT,
                                  dict(amateur="early_exit", amateur_layer=15, alpha=0.1, strength=1.0),
                                  max_new_tokens=48))
    assert len(greedy.tokens) == len(contrast.tokens) == 48
    greedy_d2, contrast_d2 = distinct_2(greedy.token_ids), distinct_2(contrast.token_ids)
    print(f"\ndistinct-2 over 48 tokens: greedy {greedy_d2:.3f}, contrastive {contrast_d2:.3f}")
    print(f"greedy: {greedy.text!r}\ncontrastive: {contrast.text!r}")
    assert greedy_d2 < 0.5  # the premise: greedy loops on this prompt
    assert contrast_d2 > greedy_d2
    # Every contrastive pick stayed inside the expert's plausible set.
    assert all(next(c for c in s.candidates if c.id == s.chosen).extra["plausible"] for s in contrast.steps)
