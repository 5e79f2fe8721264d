"""Beam search's two finishing rules: transformers' finished set (the default, checked against
generate() in test_beam.py) and keep_slot, the course notes' textbook rule, checked here against a
plain uncached loop written from the notes' description."""
from __future__ import annotations

import pytest
import torch
from beam_fakes import FakeLM, final, table_lm

from playground.charts.beam import finished_table
from strategies.beam.beam import BeamParams, beam


def notes_beam_search(lm, prompt_ids: list[int], k: int, max_length: int) -> list[tuple[tuple[int, ...], float]]:
    """The notes' beam search, one uncached forward pass per hypothesis and step.

    For i in 1..max_length: every hypothesis in the beam proposes its top k next tokens (a
    hypothesis that ends in EOS may only repeat EOS, at log-probability 0); the new beam is the k
    best proposals by summed log-probability. The result is the final beam, best first, each
    hypothesis cut after its first EOS.
    """
    eos = lm.eos_ids
    beams: list[tuple[torch.Tensor, list[int]]] = [(torch.tensor(0.0), [])]
    for _ in range(max_length):
        proposals = []
        for score, seq in beams:
            if seq and seq[-1] in eos:
                logprobs = torch.full((lm.vocab_size,), float("-inf"))
                logprobs[seq[-1]] = 0.0
            else:
                with torch.no_grad():
                    logits = lm.forward(torch.tensor([list(prompt_ids) + seq])).logits[0, -1]
                logprobs = logits.float().log_softmax(-1)
            top = logprobs.topk(k)
            proposals += [(score + lp, seq + [int(tok)]) for lp, tok in zip(top.values, top.indices)
                          if lp > float("-inf")]
        beams = sorted(proposals, key=lambda h: -float(h[0]))[:k]
    out = []
    for score, seq in beams:
        end = next((i + 1 for i, t in enumerate(seq) if t in eos), len(seq))
        out.append((tuple(seq[:end]), float(score)))
    return out


def ours(lm, prompt_ids, k, n) -> list[tuple[tuple[int, ...], float]]:
    trace = final(beam, lm, BeamParams(num_beams=k, finishing="keep_slot"), prompt_ids, n)
    assert trace.token_ids == trace.beam["finished"][0]["token_ids"]
    return [(tuple(f["token_ids"]), f["score"]) for f in trace.beam["finished"]]


def assert_same(got, expected):
    assert [seq for seq, _ in got] == [seq for seq, _ in expected]
    for (_, a), (_, b) in zip(got, expected):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_keep_slot_is_the_notes_loop_on_random_tables(k):
    # A 12-token vocabulary with EOS about as likely as any other token: hypotheses finish at every
    # step, so finished ones hold slots, get pushed out, and fill the beam.
    ended = 0
    for seed in range(12):
        lm = FakeLM(vocab_size=12, seed=seed, eos_logit=None)
        expected = notes_beam_search(lm, [5], k, 6)
        ended += any(seq[-1] in lm.eos_ids for seq, _ in expected)
        assert_same(ours(lm, [5], k, 6), expected)
    assert ended >= 3  # the cases exercise finished hypotheses holding slots


@pytest.mark.parametrize("prompt_ids,k,n", [([1, 2], 3, 10), ([4, 4], 4, 8), ([12, 3], 2, 9), ([5], 5, 7)])
def test_keep_slot_is_the_notes_loop_on_the_toy_model(toy, prompt_ids, k, n):
    assert_same(ours(toy, prompt_ids, k, n), notes_beam_search(toy, prompt_ids, k, n))


# A hand-made model, k = 2, three tokens. After the prompt (7): EOS 0.5, a (1) 0.3, b (2) 0.2.
# After a: EOS 0.1, c (3) 0.9. After b: EOS 0.6, d (4) 0.4. After c or d: EOS.
HAND = {7: {0: 0.5, 1: 0.3, 2: 0.2}, 1: {0: 0.1, 3: 0.9}, 2: {0: 0.6, 4: 0.4}, 3: {0: 1.0}, 4: {0: 1.0}}


def test_the_two_rules_return_different_best_hypotheses_on_a_hand_made_case():
    """transformers (length_penalty 1): "EOS" finishes at step 0 (-0.693147 / 1); b EOS finishes at
    step 1 ((ln 0.2 + ln 0.6) / 2 = -1.060132) while a c and b d keep running; at step 2 a c EOS scores
    (ln 0.3 + ln 0.9) / 3 = -0.436444 and b d EOS (ln 0.2 + ln 0.4) / 3 = -0.841910: the finished set
    keeps a c EOS, then EOS.
    keep_slot: EOS (-0.693147) keeps a slot from step 0, so only a runs; a c (-1.309333) takes the
    other slot and ends; the result is EOS, then a c EOS, by raw score."""
    lm = table_lm(HAND, vocab=8)
    default = final(beam, lm, BeamParams(num_beams=2), [7], 3)
    assert [(f["token_ids"], f["penalised"]) for f in default.beam["finished"]] == [
        ([1, 3, 0], pytest.approx(-0.436444, abs=1e-5)), ([0], pytest.approx(-0.693147, abs=1e-5))]
    slot = final(beam, lm, BeamParams(num_beams=2, finishing="keep_slot"), [7], 3)
    assert [(f["token_ids"], f["score"], f["penalised"]) for f in slot.beam["finished"]] == [
        ([0], pytest.approx(-0.693147, abs=1e-5), None), ([1, 3, 0], pytest.approx(-1.309333, abs=1e-5), None)]
    assert default.token_ids == [1, 3, 0] and slot.token_ids == [0]
    assert_same([(tuple(f["token_ids"]), f["score"]) for f in slot.beam["finished"]],
                notes_beam_search(lm, [7], 2, 3))
    statuses = {n["token_id"]: n["status"] for n in slot.beam["nodes"] if n["step"] == 0}
    assert statuses[0] == "finished" and statuses[1] == "kept" and statuses[2] == "fell_off"


def test_keep_slot_results_say_what_ranks_them():
    lm = table_lm(HAND, vocab=8)
    slot = final(beam, lm, BeamParams(num_beams=2, finishing="keep_slot"), [7], 3).to_dict()
    assert slot["beam"]["finishing"] == "keep_slot" and slot["beam"]["length_penalty"] is None
    table = finished_table(slot)
    assert "log-prob (sum, ranks)" in table and "length^" not in table
    default = final(beam, lm, BeamParams(num_beams=2), [7], 3).to_dict()
    assert "score / length^1 (ranks)" in finished_table(default)
