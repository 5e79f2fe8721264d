"""The traced loop against transformers, the toy's known 70/30 branch, determinism,
the trace contract, and the registry contract."""
import dataclasses
import json
import math

import pytest
import torch

from playground.engine import Request, run, stream
from strategies.registry import all_strategies


def hf_greedy(lm, prompt_ids, n):
    out = lm.model.generate(torch.tensor([prompt_ids]), max_new_tokens=n, do_sample=False,
                            pad_token_id=lm.tokenizer.pad_token_id or 0)
    return out[0, len(prompt_ids):].tolist()


@pytest.mark.parametrize("prompt", ["1 2", "1 2 9", "once upon a time"])
def test_greedy_equals_generate_on_toy(store, toy, prompt):
    trace = run(store, Request("toy", "greedy", prompt, max_new_tokens=12))
    assert trace.token_ids == hf_greedy(toy, trace.prompt_ids, 12)[:len(trace.token_ids)]
    assert trace.finish_reason == "eos" and trace.token_ids[-1] == 0


def test_greedy_equals_generate_on_smollm2(store, smollm):
    trace = run(store, Request("smollm2-135m", "greedy", "Name three colours of the rainbow.",
                               max_new_tokens=16))
    assert len(trace.token_ids) == 16
    assert trace.token_ids == hf_greedy(smollm, trace.prompt_ids, 16)
    assert trace.timing.target_forward_passes == 16


def test_sampling_at_temperature_0_is_greedy(store):
    a = run(store, Request("toy", "greedy", "1 2", max_new_tokens=8))
    b = run(store, Request("toy", "sampling", "1 2", {"temperature": 0}, seed=5, max_new_tokens=8))
    assert a.token_ids == b.token_ids
    assert all(c["prob"] in (0.0, 1.0) for s in b.to_dict()["steps"] for c in s["candidates"])


def test_toy_branch_is_taken_about_70_percent(store, toy):
    """2,000 seeded runs of one token from [1, 2] at temperature 1.

    The count of token 3 is Binomial(2000, p) with p the model's own P(3 | 1 2), which
    training pins near 0.7. Its standard deviation is sqrt(2000 * 0.7 * 0.3) = 20.5
    draws, so 4 sigma (82 draws, 4.1 points) makes a false alarm a 1-in-15,000 event
    while a selector off by 5 points fails."""
    with torch.no_grad():
        p3 = toy.forward(torch.tensor([[1, 2]])).logits[0, -1].softmax(-1)[3].item()
    assert abs(p3 - 0.7) < 0.01
    n = 2000
    hits = sum(run(store, Request("toy", "sampling", "1 2", seed=s, max_new_tokens=1)).token_ids[0] == 3
               for s in range(n))
    sigma = math.sqrt(n * p3 * (1 - p3))
    assert abs(hits - n * p3) < 4 * sigma, (hits, n * p3)


@pytest.mark.parametrize("model, strategy, params", [
    ("toy", "sampling", {"temperature": 1.3, "top_p": 0.95}),
    ("toy", "gumbel", {"top_k": 3}),
    ("smollm2-135m", "sampling", {"temperature": 0.9, "min_p": 0.05, "repetition_penalty": 1.2}),
])
def test_same_request_gives_byte_identical_trace(store, model, strategy, params):
    req = Request(model, strategy, "Tell me a story." if model != "toy" else "1 2", params, seed=11,
                  max_new_tokens=10)
    a, b = run(store, req).to_json(timing=False), run(store, req).to_json(timing=False)
    assert a == b
    other = run(store, dataclasses.replace(req, seed=12)).to_json(timing=False)
    assert json.loads(other)["seed"] == 12


def test_trace_contract(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.5, "top_k": 3}, seed=2,
                               max_new_tokens=5, top_n=20))
    d = json.loads(trace.to_json())
    for key in ("model", "strategy", "params", "seed", "prompt", "text", "tokens", "steps", "timing"):
        assert key in d
    assert set(d["tokens"][0]) >= {"id", "text", "logprob"}
    assert set(d["timing"]) >= {"seconds", "tokens_per_second", "target_forward_passes"}
    step = d["steps"][0]
    assert set(step) >= {"position", "chosen", "candidates", "stages"}
    assert len(step["candidates"]) == 16  # top 20 of a 16-token vocabulary
    assert step["chosen"] in [c["id"] for c in step["candidates"]]
    kept = [c for c in step["candidates"] if c["kept"]]
    assert len(kept) == 3 and math.isclose(sum(c["prob"] for c in kept), 1.0, rel_tol=1e-4)
    assert [s["name"] for s in step["stages"]] == ["raw", "temperature", "top_k"]
    assert [s["kept_count"] for s in step["stages"]] == [16, 16, 3]
    assert [s["kept"] for s in step["stages"]][-1] == [c["kept"] for c in step["candidates"]]
    assert [sum(s["kept"]) for s in step["stages"]] == [16, 16, 3]
    assert "decision" not in step["stages"][0]
    assert step["stages"][1]["decision"] == {"t": 1.5}
    assert set(step["stages"][2]["decision"]) == {"k", "cut_logit", "cut_prob"}
    raw = {c["id"]: c["raw_prob"] for c in step["candidates"]}
    assert step["stages"][0]["probs"] == [raw[c["id"]] for c in step["candidates"]]
    assert d["text"] == trace.text and d["chain"] == ["temperature", "top_k", "multinomial"]


def test_trace_records_gumbel_noise(store):
    d = run(store, Request("toy", "gumbel", "1 2", seed=4, max_new_tokens=3)).to_dict()
    for step in d["steps"]:
        best = max(step["candidates"], key=lambda c: c["perturbed_logit"] if c["kept"] else -1e9)
        assert best["id"] == step["chosen"]  # the argmax of logits + noise is the chosen token
        assert all("gumbel" in c for c in step["candidates"])


def test_real_model_steps_record_at_least_20_candidates(store):
    d = run(store, Request("smollm2-135m", "sampling", "Hi", {"top_p": 0.9}, seed=1, max_new_tokens=3)).to_dict()
    for step in d["steps"]:
        assert len(step["candidates"]) >= 20
        probs = [c["prob"] for c in step["candidates"]]
        assert probs == sorted(probs, reverse=True)


def test_stream_yields_after_every_token(store):
    lengths = [len(t.tokens) for t in stream(store, Request("toy", "greedy", "1 2", max_new_tokens=10))]
    assert lengths[:7] == list(range(1, 8))


def test_every_strategy_runs_on_toy_with_its_defaults(store):
    names = [s.name for s in all_strategies()]
    assert {"greedy", "sampling", "gumbel"} <= set(names)
    for spec in all_strategies():
        trace = run(store, Request("toy", spec.name, "1 2", seed=0, max_new_tokens=6))
        assert trace.strategy == spec.name
        assert 1 <= len(trace.tokens) <= 6 and trace.text.strip(), spec.name
        json.loads(trace.to_json())


def test_chat_template_and_raw_mode(store, smollm):
    chat = smollm.encode("What is 2+2?", system="Answer briefly.")
    text = smollm.tokenizer.decode(chat)
    assert "Answer briefly." in text and "<|im_start|>assistant" in text
    raw = smollm.encode("What is 2+2?", chat=False)
    assert smollm.tokenizer.decode(raw) == "What is 2+2?"


def test_toy_prompt_numbers_and_words_agree(toy):
    assert toy.encode("1 2") == toy.encode("once upon") == [1, 2]
    assert toy.piece(3) == " a"


# --- a byte token is written as its byte ------------------------------------------------------------

@pytest.mark.parametrize("raw, decoded, shown", [
    ("<0xE2>", "\ufffd", "<0xE2>"),  # sentencepiece's byte fallback (Gemma)
    ("<0xe2>", "\ufffd", "<0xE2>"),
    ("â", "\ufffd", "<0xE2>"),  # byte-level BPE (SmolLM2): "â" is the byte 0xE2
    ("Ġâ", " \ufffd", " <0xE2>"),  # "Ġ" its space
    ("âĢ", "\ufffd", "<0xE2><0x80>"),  # two bytes of one three-byte character
    ("âĢĻ", "’", "’"),  # the whole character: as it is
    ("ï¿½", "\ufffd", "\ufffd"),  # a true U+FFFD is one
])
def test_a_byte_token_is_written_as_its_byte_not_drawn_as_a_box(raw, decoded, shown):
    from playground.models.lm import byte_piece
    assert byte_piece(raw, decoded) == shown


def test_the_models_pieces_write_a_split_character_s_bytes():
    """LM.piece, on a tokenizer whose token 7 is the first byte of '’' (alone it decodes to U+FFFD)."""
    from types import SimpleNamespace

    from playground.models.lm import LM
    tokenizer = SimpleNamespace(convert_ids_to_tokens=lambda i: {7: "â", 8: "Ġa"}[i],
                                decode=lambda ids: {7: "\ufffd", 8: " a"}[ids[0]])
    lm = SimpleNamespace(_piece_cache={}, tokenizer=tokenizer)
    assert LM.piece(lm, 7) == "<0xE2>" and LM.piece(lm, 8) == " a"
