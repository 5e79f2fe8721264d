"""Gemma 3's lean forward (``playground.models.fast.gemma``) against transformers' Gemma 3 on the same
bfloat16 weights, and Gemma on its GGUF file's blocks (int4) against gguf-py and float32.

Measured on Gemma 3 270M and stated here once:
- lean vs transformers, both bfloat16: identical logits on one pass and through cached one-token
  steps (max difference 0.0); past the 512-position sliding window, where transformers drops the
  older keys and the lean cache masks them, within 1e-3 in float32 and 0.6 in bfloat16;
- int4 (Q5_0 and Q8_0 as two 4-bit planes, Q4_K as one; the Q6_K down projections of nine layers
  stay bfloat16) vs float32: per-position total variation at most 0.1 (measured 0.066; bfloat16
  gives 0.061), top-1 agreement at least 95 % (measured 100 % on the test text).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, dequantize
from stepped import hf_stepped

from playground import models
from playground.engine import Request, run
from playground.models.dtypes import cast_model
from playground.models.fast import int4 as gguf_int4
from playground.models.fast.gemma import LeanGemma
from playground.models.fast.gguf_tensors import tensor_table
from playground.models.fast.llama import LeanCache

TEXT = "The quick brown fox jumps over the lazy dog because"


@pytest.fixture(scope="module")
def lean(gemma):
    return gemma.with_dtype(torch.bfloat16)


def hf(lm, ids: torch.Tensor, cache=None) -> torch.Tensor:
    with torch.inference_mode():
        return lm.model(input_ids=ids, past_key_values=cache, use_cache=cache is not None).logits.float()


def test_the_lean_forward_is_used_in_bfloat16(gemma, lean):
    assert gemma.fast is None and isinstance(lean.fast, LeanGemma) and isinstance(lean.new_cache(), LeanCache)
    assert [layer.sliding for layer in lean.fast.layers] == [t == "sliding_attention" for t in gemma.model.config.layer_types]


def test_one_pass_and_steps_equal_transformers(gemma, lean):
    """Our one pass is transformers fed one token at a time, bit for bit (each row attends as its step
    does), and near transformers' own one pass; then steps alike."""
    from transformers import DynamicCache
    ids = torch.tensor([gemma.encode(TEXT)])
    ours, theirs = lean.new_cache(), DynamicCache(config=lean.model.config)
    one_pass = lean.forward(ids, ours).logits
    assert torch.equal(one_pass, hf_stepped(lean, ids, theirs))
    tv = 0.5 * (one_pass.softmax(-1) - hf(lean, ids).softmax(-1)).abs().sum(-1)
    assert tv.max().item() <= 0.1  # transformers' one pass rounds each row over all its keys
    for token in (330, 1115, 42):
        step = torch.tensor([[token]])
        assert torch.equal(lean.forward(step, ours).logits, hf(lean, step, theirs))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_sliding_window_matches_transformers(gemma, dtype):
    """600 positions, then one more: local layers see only their last 512. transformers' sliding
    cache drops the older keys, the lean cache masks them, so a step attends over other shapes:
    in float32 the logits agree within 1e-3 (the same keys), in bfloat16 within 0.6 (passes of other
    shapes round otherwise, as ``test_fast_path`` states for llama; measured 0.31), where a near tie
    may pick the other token."""
    from transformers import DynamicCache
    model = cast_model(gemma.model, dtype)  # a copy: the lean forward rebinds the copy's Q/K/V
    lean = LeanGemma(model)
    ids = torch.tensor([(gemma.encode(TEXT) * 60)[:600]])
    ours, theirs = lean.new_cache(), DynamicCache(config=model.config)
    tolerance = 1e-3 if dtype == torch.float32 else 0.6
    with torch.inference_mode():
        for feed in (ids, torch.tensor([[42]]), torch.tensor([[7]])):
            a = lean.forward(feed, ours, last=True)[0].float()[0, -1]  # the head on the last row, as logits_to_keep
            b = model(input_ids=feed, past_key_values=theirs, use_cache=True, logits_to_keep=1).logits.float()[0, -1]
            assert (a - b).abs().max().item() <= tolerance
            assert b[a.argmax()] >= b.max() - 2 * tolerance  # our top token is theirs, or a near tie of theirs
    assert ours.get_seq_length() == 602


def test_hidden_states_equal_transformers(gemma, lean):
    ids = torch.tensor([gemma.encode(TEXT)])
    ours = lean.forward(ids, hidden=True).hidden_states
    _, ref = hf_stepped(lean, ids, hidden=True)
    assert len(ours) == len(ref) == 19
    assert all(torch.equal(a, b) for a, b in zip(ours, ref))


def test_greedy_equals_transformers_generate_in_bfloat16(store, lean):
    trace = run(store, Request("gemma3-270m", "greedy", "The capital of France is", max_new_tokens=16,
                               dtype="bfloat16"))
    with torch.inference_mode():
        out = lean.model.generate(torch.tensor([trace.prompt_ids]), max_new_tokens=16, do_sample=False,
                                  pad_token_id=0)
    assert trace.token_ids == out[0, len(trace.prompt_ids):].tolist()[:len(trace.token_ids)]


def test_a_draft_tree_pass_is_each_path_alone(gemma):
    """A tree of drafts in one pass (float32 copy, so only the semantics can differ): each node's
    logits are those of its own path fed alone, within 1e-3."""
    import copy

    from strategies.speculative.eagle.tree import attention_mask, position_ids
    lean = LeanGemma(copy.deepcopy(gemma.model))
    prompt = gemma.encode(TEXT)
    parents, tokens = [-1, 0, 0, 1], [prompt[-1], 1115, 42, 7]  # a root, two children, a grandchild
    with torch.inference_mode():
        cache = lean.new_cache()
        lean.forward(torch.tensor([prompt[:-1]]), cache)
        past = cache.length
        tree = lean.forward(torch.tensor([tokens]), cache, attention_mask=attention_mask(parents, past),
                            position_ids=position_ids(parents, past))[0][0]
        for node, path in ((1, [1115]), (2, [42]), (3, [1115, 7])):
            alone = lean.forward(torch.tensor([prompt + path]), lean.new_cache())[0][0, -1]
            assert (tree[node] - alone).abs().max().item() <= 1e-3, node


@pytest.fixture(scope="module")
def tensors():
    return tensor_table(str(models.gguf_path("gemma3-270m")))


@pytest.mark.parametrize("name", ["blk.0.attn_output.weight", "blk.0.attn_q.weight", "blk.3.attn_v.weight",
                                  "blk.0.ffn_down.weight", "blk.2.ffn_down.weight", "blk.5.ffn_up.weight"])
def test_gemma_blocks_read_as_gguf_py_dequantises_them(tensors, name):
    tensor = tensors[name]
    if tensor.kind not in gguf_int4.BLOCK_BYTES:
        with pytest.raises(ValueError, match="not a block type the kernel takes"):
            gguf_int4.read_blocks(tensor)
        return
    blocks = gguf_int4.read_blocks(tensor)
    reference = dequantize(np.asarray(tensor.data), GGMLQuantizationType[tensor.kind]).reshape(blocks.shape)
    planes, rows, cols = blocks.q.shape
    q = blocks.q.reshape(planes, rows, -1, 32).astype(np.float32)
    form = ((q - 8) * blocks.scale[..., None] + blocks.zero[..., None]).sum(0).reshape(rows, cols)
    assert np.array_equal(form, reference)  # exact before the scales and zeros go to bfloat16
    assert planes == (1 if tensor.kind.startswith("Q4") else 2)


def test_gemma_on_its_files_blocks(gemma, tensors):
    int4 = gemma.with_weights("int4")
    assert int4.weights == "int4" and isinstance(int4.fast, LeanGemma)
    for i, layer in enumerate(int4.fast.layers):
        for matrix, name in (("qkv", "attn_q"), ("out", "attn_output"), ("gate_up", "ffn_gate"), ("down", "ffn_down")):
            in_blocks = tensors[f"blk.{i}.{name}.weight"].kind in gguf_int4.BLOCK_BYTES
            assert isinstance(getattr(layer, matrix), gguf_int4.Int4Linear) == in_blocks, (i, matrix)
    assert isinstance(int4.fast.head, gguf_int4.Int4Linear)
    ids = torch.tensor([gemma.encode(TEXT)])
    p32, p4 = gemma.forward(ids).logits[0].softmax(-1), int4.forward(ids).logits[0].softmax(-1)
    tv = 0.5 * (p32 - p4).abs().sum(-1)
    assert tv.max().item() <= 0.1 and tv.mean().item() <= 0.03
    assert (p32.argmax(-1) == p4.argmax(-1)).float().mean().item() >= 0.95
