"""SynthID's detector scores (strategies/synthid_detect.py, playground/whatif/watermark.py, the CLI's
``detect --watermark synthid``): g-values and masks equal transformers' compute_g_values,
compute_context_repetition_mask and compute_eos_token_mask; the Mean and Weighted Mean scores are the
paper's formulas; the stage's running score ends at the detector's; a SynthID SmolLM2 text scores
clearly above the same prompt's text without it."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import SynthIDTextWatermarkLogitsProcessor

from playground.cli import main
from playground.engine import Request, run
from playground.whatif.watermark import detect_synthid_text
from strategies.g_values import ngram_g_values, sampling_table
from strategies.synthid_detect import detect, eos_mask, mean_score, repetition_mask, weighted_mean_score

KEYS = [654, 400, 836, 123, 340, 443, 597, 160, 57]


def paper_scores(g_values: np.ndarray, mask: np.ndarray) -> tuple[float, float]:
    """Mean and Weighted Mean as the paper's detector_mean.py writes them (batch of one)."""
    depth = g_values.shape[-1]
    mean = np.sum(g_values * mask[:, None]) / (depth * np.sum(mask))
    weights = np.linspace(start=10, stop=1, num=depth)
    weights *= depth / np.sum(weights)
    weighted = np.sum(g_values * weights[None, :] * mask[:, None]) / (depth * np.sum(mask))
    return float(mean), float(weighted)


def assert_parity(ids: list[int], keys: list[int], ngram_len: int, history: int, eos: int) -> None:
    processor = SynthIDTextWatermarkLogitsProcessor(ngram_len, keys, 2**16, 0, history, "cpu")
    batch = torch.tensor([ids])
    tokens = torch.tensor(ids)
    g = ngram_g_values(tokens, ngram_len, torch.tensor(keys), sampling_table())
    assert torch.equal(g, processor.compute_g_values(batch)[0])
    repeats = repetition_mask(tokens, ngram_len, history)
    assert torch.equal(repeats, processor.compute_context_repetition_mask(batch)[0])
    ends = eos_mask(tokens, {eos}, ngram_len)
    assert torch.equal(ends, processor.compute_eos_token_mask(batch, eos)[0, ngram_len - 1:].bool())
    found = detect(ids, keys, ngram_len, history_size=history, eos_ids={eos})
    mask = repeats & ends
    assert found.scored == int(mask.sum())
    mean, weighted = paper_scores(g.numpy().astype(np.float64), mask.numpy())
    assert found.mean == pytest.approx(mean, rel=1e-12) and found.weighted_mean == pytest.approx(weighted, rel=1e-12)
    assert (mean_score(g, mask), weighted_mean_score(g, mask)) == (found.mean, found.weighted_mean)
    last = found.marks[-1] if mask[-1] else next(m for m in reversed(found.marks) if m.counted)
    assert last.mean == pytest.approx(found.mean, rel=1e-12)
    assert [m.counted for m in found.marks] == [False] * (ngram_len - 1) + mask.tolist()
    assert [m.g_values for m in found.marks[ngram_len - 1:]] == g.tolist()


def test_parity_with_transformers_masks_and_g_values_on_toy_ids():
    ids = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 7, 2, 3, 8, 9, 0, 5, 6]  # a repeated context, then EOS (0)
    for keys, ngram_len, history in ((KEYS, 5, 1024), ([1, 2], 2, 3), ([7], 3, 1024)):
        assert_parity(ids, keys, ngram_len, history, eos=0)


def test_parity_with_transformers_masks_and_g_values_on_smollm2_ids(smollm):
    ids = smollm.encode("The sea is calm tonight. The tide is full, the moon lies fair. The sea is calm tonight.",
                        chat=False)
    eos = min(smollm.eos_ids)
    assert_parity(ids + [eos] + ids[:6], KEYS, 5, 1024, eos)
    assert_parity(ids, KEYS[:3], 4, 8, eos)


def test_the_stages_running_score_ends_at_the_detectors(store):
    params = {"synthid_keys": "11,22,33,44", "synthid_ngram_len": 3, "temperature": 1.5}
    forced = {5: 3, 6: 4, 7: 5, 8: 3, 9: 4, 10: 5}  # a repeated context; forced tokens are scored as drawn ones
    trace = run(store, Request("toy", "sampling", "1 2", params, seed=2, max_new_tokens=40, forced=forced)).to_dict()
    ids = [t["id"] for t in trace["tokens"]]
    found = detect(ids, [11, 22, 33, 44], 3, eos_ids={0})
    records = [next(st for st in step["stages"] if st["name"] == "synthid")["decision"] for step in trace["steps"]]
    assert [r["counted"] for r in records] == [m.counted for m in found.marks]
    assert not records[10]["counted"] and records[10]["repeated"]  # (3, 4) again: neither watermarked nor scored
    assert records[-1]["scored"] == found.scored
    assert records[-1]["mean"] == pytest.approx(found.mean, rel=1e-5)
    assert records[-1]["weighted_mean"] == pytest.approx(found.weighted_mean, rel=1e-5)
    for record, mark in zip(records, found.marks):
        if mark.mean is not None:
            assert record["mean"] == pytest.approx(mark.mean, rel=1e-5)


SMOL_PROMPT = "Write a long story about a dragon who learns to bake bread in a small village."
SMOL_KEYS = ",".join(str(k) for k in range(101, 121))  # 20 layers


def test_a_synthid_smollm2_text_scores_clearly_above_the_same_prompts_plain_text(store):
    scores = []
    for keys in (SMOL_KEYS, ""):
        trace = run(store, Request("smollm2-135m", "sampling", SMOL_PROMPT, {"synthid_keys": keys, "top_k": 100},
                                   seed=7, max_new_tokens=130)).to_dict()
        ids = [t["id"] for t in trace["tokens"]]
        assert len(ids) >= 100
        found = detect(ids, [int(k) for k in SMOL_KEYS.split(",")], eos_ids=store.get("smollm2-135m").eos_ids)
        again = detect_synthid_text(store, "smollm2-135m", trace["text"], SMOL_KEYS)  # re-tokenized, as the CLI reads
        scores.append((len(ids), found.scored, found.mean, found.weighted_mean, again["mean"]))
    print(f"\nwatermarked: {scores[0]}\nplain: {scores[1]}  (tokens, scored, mean, weighted mean, re-tokenized mean)")
    marked, plain = scores
    assert marked[2] > plain[2] + 0.08 and marked[3] > plain[3] + 0.08
    assert marked[4] > plain[4] + 0.08
    assert abs(plain[2] - 0.5) < 0.04


def test_cli_detect_synthid_json_matches_the_detector_on_a_toy_run(capsys):
    assert main(["run", "--model", "toy", "--strategy", "sampling", "--prompt", "1 2", "--seed", "5",
                 "--max-new-tokens", "20", "--temperature", "2", "--synthid-keys", "1,2,3", "--synthid-ngram-len",
                 "2", "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["params"]["synthid_keys"] == "1,2,3"
    ids = [t["id"] for t in trace["tokens"]]
    text = " ".join(str(i) for i in ids)
    assert main(["detect", "--model", "toy", "--watermark", "synthid", "--synthid-keys", "1,2,3",
                 "--synthid-ngram-len", "2", "--text", text, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    expected = detect(ids, [1, 2, 3], 2, eos_ids={0})
    assert (result["mean"], result["weighted_mean"], result["scored"], result["depth"]) == (
        expected.mean, expected.weighted_mean, expected.scored, 3)
    assert [m["id"] for m in result["marks"]] == ids
    assert [m["g_values"] for m in result["marks"]] == [m.g_values for m in expected.marks]
    assert [m["mean"] for m in result["marks"]] == [m.mean for m in expected.marks]
    assert all(m["text"] for m in result["marks"])
    last = next(st for st in trace["steps"][-1]["stages"] if st["name"] == "synthid")["decision"]
    assert last["mean"] == pytest.approx(expected.mean, rel=1e-5)
    assert main(["detect", "--model", "toy", "--watermark", "synthid", "--synthid-keys", "1,2,3",
                 "--synthid-ngram-len", "2", "--text", text]) == 0
    assert f"mean g-value {expected.mean:.3f}" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--synthid-keys", "1,x"], "synthid_keys must be integers in [0, 2^63 - 1], comma-separated, got '1,x'"),
    (["--synthid-keys", ",".join(["1"] * 65)], "synthid_keys must hold 1 to 64 keys (one per tournament layer), got 65"),
    (["--synthid-keys", ""], "synthid_keys must name the keys the text was watermarked with, got none"),
    (["--synthid-keys", "1", "--synthid-ngram-len", "1"], "synthid_ngram_len must be in [2, 32], got 1"),
    (["--synthid-keys", "1", "--synthid-ngram-len", "five"], "synthid_ngram_len must be an integer, got 'five'"),
    (["--synthid-keys", "1", "--synthid-ngram-len", "9"], "text must hold at least ngram_len (9) tokens"),
])
def test_cli_detect_synthid_bad_input_exits_2_with_one_line(capsys, args, message):
    assert main(["detect", "--model", "toy", "--watermark", "synthid", "--text", "3 4 5 6 7", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and message in err


def test_parity_with_transformers_masks_and_g_values_on_gemma_ids(gemma):
    ids = gemma.encode("The sea is calm tonight. The tide is full, the moon lies fair. The sea is calm tonight.",
                       chat=False)
    eos = min(gemma.eos_ids)
    assert_parity(ids + [eos] + ids[:6], KEYS, 5, 1024, eos)
    assert_parity(ids, KEYS[:3], 4, 8, eos)
