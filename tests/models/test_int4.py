"""The int4 weights: SmolLM2's lean forward multiplying by its GGUF file's own blocks (Q4_1
layers, the Q8_0 head as two 4-bit planes; ``playground.gguf_int4``), against gguf-py's reading of
the file, against transformers on the very same weights, and against float32.

Tolerances, measured on SmolLM2 and stated here once:
- the kernel's weights vs the file's (the float32 weights transformers loads): per weight within
  the bfloat16 rounding of its block's scale and zero, 2**-8 * (8 |scale| + |zero|);
- the lean int4 forward vs transformers in float32 on those same weights (and the same bfloat16
  norms and embedding), so that only the activations' bfloat16 differs: per-position total
  variation at most 0.08 (measured 0.050, mean 0.019), top-1 agreement at least 90 % (measured 51
  of 53 positions), and where the top-1 differs the reference's two best are a near tie, within
  0.05 of each other (measured 0.009 and 0.042);
- int4 vs float32: per-position total variation at most 0.1 (measured 0.062, mean 0.019; bfloat16
  gives 0.067 and 0.022), mean at most 0.03, top-1 agreement at least 95 % (measured 96 %);
- int4 through the cache (steps, crops, reorders, a draft tree's pass) vs one pass over the same
  text: logits within ``PASS_SHAPES`` and the same argmax. The kernel itself gives the same product
  for one row as for many on every capability; the bfloat16 activations of attention and norms
  round otherwise in passes of other shapes (measured 0.125 with AVX-512 kernels, 0.48 and 0.64
  with AVX2's).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, dequantize

from playground import models
from playground.engine import Request, in_dtype, run
from playground.errors import InvalidRequest
from playground.models.dtypes import INT4_FAST_CAPABILITIES, cpu_capability, cpu_has_native_bf16, weights_order
from playground.models.fast import int4 as gguf_int4
from playground.models.fast.gguf_tensors import tensor_table
from playground.models.fast.llama import LeanCache
from strategies.speculative.eagle.tree import attention_mask, position_ids

PROMPT = "Name three colours of the rainbow."
PASS_SHAPES = 1.0  # eight bfloat16 steps at a logit of 16
NEAR_TIE = 0.08  # top two probabilities a pass of another shape may swap (measured up to 0.050)
pytestmark = pytest.mark.skipif(not gguf_int4.kernel_available(), reason="this torch has no CPU int4 kernel")


@pytest.fixture(scope="module")
def int4(smollm):
    return smollm.with_weights("int4")


@pytest.fixture(scope="module")
def int4_layers(smollm):
    """SmolLM2's layer matrices over the file's blocks, as its int4 copy is built from them, without the
    copy's self-check, whose probe alone takes about 30 s on the default (scalar) kernels, where
    tests/models/test_cpu_capabilities.py runs this file's layout tests."""
    return gguf_int4.layer_linears(smollm.model, models.gguf_path("smollm2-135m"))


@pytest.fixture(scope="module")
def tensors():
    return tensor_table(str(models.gguf_path("smollm2-135m")))


def kernel_form(blocks: gguf_int4.Blocks) -> np.ndarray:
    """The sum over planes of (q - 8) * scale + zero, per block of 32, in float32."""
    planes, rows, cols = blocks.q.shape
    q = blocks.q.reshape(planes, rows, -1, 32).astype(np.float32)
    return ((q - 8) * blocks.scale[..., None] + blocks.zero[..., None]).sum(0).reshape(rows, cols)


@pytest.mark.parametrize("name", ["blk.0.attn_q.weight", "blk.29.ffn_down.weight", "token_embd.weight"])
def test_blocks_read_as_gguf_py_dequantises_them(tensors, name):
    tensor = tensors[name]
    every = max(1, len(tensor.data) // 2048)  # a large matrix is compared on 2,048 rows spread over it
    blocks = gguf_int4.read_blocks(tensor).rows(list(range(0, len(tensor.data), every)))
    raw = np.asarray(tensor.data)[::every]
    reference = dequantize(raw, GGMLQuantizationType[tensor.kind]).reshape(blocks.shape)
    assert np.array_equal(blocks.values, reference)
    assert blocks.q.min() >= 0 and blocks.q.max() <= 15
    assert len(blocks.q) == (2 if tensor.kind == "Q8_0" else 1)
    assert np.allclose(kernel_form(blocks), reference, rtol=1e-6, atol=1e-6)
    if tensor.kind == "Q8_0":  # the two planes are exact: d * q with d in float32 here
        assert np.array_equal(kernel_form(blocks), reference)


@pytest.mark.parametrize("rows, cols", [(64, 32), (192, 96), (48, 64), (16, 576)])
def test_a_packed_plane_multiplies_as_its_dense_matrix(rows, cols):
    """Packed for the kernel this process runs, a plane multiplies as the dense matrix it stands
    for: any layout but the kernel's own would scramble the weights (the identity through the
    kernel reads each weight back, in bfloat16)."""
    rng = np.random.default_rng(rows)
    q = rng.integers(0, 16, (1, rows, cols), dtype=np.uint8)
    scale = rng.uniform(0.001, 0.02, (1, rows, cols // 32)).astype(np.float32)
    zero = rng.normal(0, 0.01, (1, rows, cols // 32)).astype(np.float32)
    scale, zero = (torch.from_numpy(x).bfloat16().float().numpy() for x in (scale, zero))
    blocks = gguf_int4.Blocks(q, scale, zero, np.zeros((rows, cols), np.float32))
    expected = torch.from_numpy(kernel_form(blocks)).bfloat16().float()
    assert torch.equal(gguf_int4.Int4Linear([blocks]).dequantised(), expected)
    with pytest.raises(ValueError, match="rows in multiples of 16, this one has 40"):
        gguf_int4.pack(np.zeros((40, 32), np.uint8))


@pytest.mark.parametrize("sliced", [True, False])
def test_a_plane_packed_in_slices_is_the_plane_packed_whole(monkeypatch, sliced):
    """A plane of more than ``PACK_ROWS`` rows is packed a slice at a time where this process's kernel
    packs rows apart (``_packs_by_rows``, checked where it runs), and whole where it does not; either
    way the result is the converter's on the whole plane."""
    if sliced and not gguf_int4._packs_by_rows():
        pytest.skip("this kernel's converter does not pack rows apart: planes are packed whole here")
    monkeypatch.setattr(gguf_int4, "_packs_by_rows", lambda: sliced)
    calls = []
    convert = gguf_int4._convert
    monkeypatch.setattr(gguf_int4, "_convert", lambda q: calls.append(len(q)) or convert(q))
    rows = 2 * gguf_int4.PACK_ROWS + 48
    q = np.random.default_rng(7).integers(0, 16, (rows, 64), dtype=np.uint8)
    whole = torch.ops.aten._convert_weight_to_int4pack_for_cpu(torch.from_numpy(q.astype(np.int32)), 1)
    assert torch.equal(gguf_int4.pack(q), whole)
    assert calls == ([gguf_int4.PACK_ROWS, gguf_int4.PACK_ROWS, 48] if sliced else [rows])


def test_a_stack_of_one_and_two_plane_matrices(tensors):
    """Q4_1 rows stacked on Q8_0 rows (one plane and two): the one-plane part gets a zero plane."""
    k = gguf_int4.read_blocks(tensors["blk.0.attn_k.weight"])  # Q4_1 [192, 576]
    embed = gguf_int4.read_blocks(tensors["token_embd.weight"]).rows(list(range(64)))  # Q8_0 [64, 576]
    weights = gguf_int4.Int4Linear([k, embed]).dequantised()
    parts = [gguf_int4.Int4Linear([k]).dequantised(), gguf_int4.Int4Linear([embed]).dequantised()]
    assert weights.shape == (256, 576) and torch.equal(weights, torch.cat(parts))


@pytest.mark.parametrize("match_rows", [gguf_int4.MATCH_ROWS, 100])  # 100: 6 slices, the last short
def test_rows_are_matched_to_the_loaded_weights_exactly(smollm, tensors, monkeypatch, match_rows):
    monkeypatch.setattr(gguf_int4, "MATCH_ROWS", match_rows)
    attn = smollm.model.model.layers[3].self_attn
    blocks = gguf_int4.read_blocks(tensors["blk.3.attn_q.weight"])
    # llama.cpp stores Q's rows in another order (its RoPE layout): the match undoes it
    assert not np.array_equal(blocks.values, attn.q_proj.weight.detach().numpy())
    matched = gguf_int4.match_rows(blocks, attn.q_proj.weight, "q")
    assert np.array_equal(matched.values, attn.q_proj.weight.detach().numpy())
    changed = attn.q_proj.weight.detach().clone()
    changed[5, 0] += 1e-3
    with pytest.raises(ValueError, match="row 5 of the loaded weight is not a row of the file's blocks"):
        gguf_int4.match_rows(blocks, changed, "q")
    with pytest.raises(ValueError, match="is F32, not a block type the kernel takes"):
        gguf_int4.read_blocks(tensors["blk.3.attn_norm.weight"])


def test_the_kernel_multiplies_by_the_files_weights(smollm, int4_layers, tensors):
    attn = smollm.model.model.layers[7].self_attn
    ours = int4_layers[7]["qkv"].dequantised()
    file_values = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]).detach()
    parts = [gguf_int4.match_rows(gguf_int4.read_blocks(tensors[f"blk.7.attn_{p}.weight"]), w, p)
             for p, w in (("q", attn.q_proj.weight), ("k", attn.k_proj.weight), ("v", attn.v_proj.weight))]

    def per_weight(values: list[np.ndarray]) -> torch.Tensor:
        return torch.from_numpy(np.concatenate(values)).bfloat16().float().repeat_interleave(32, 1)

    scale, zero = per_weight([p.scale[0] for p in parts]), per_weight([p.zero[0] for p in parts])
    q = torch.from_numpy(np.concatenate([p.q[0] for p in parts])).float()
    kernel_form = (q - 8) * scale + zero  # with the scale and zero in bfloat16
    assert torch.equal(ours, kernel_form.bfloat16().float())  # (read back through a bfloat16 product)
    # the only rounding: scale and zero to bfloat16, each within 2**-8 of itself
    assert ((kernel_form - file_values).abs() <= 2.0 ** -8 * (8 * scale.abs() + zero.abs())).all()
    assert (kernel_form == file_values).float().mean().item() > 0.05  # and some weights come through exactly


def test_the_int4_variant(smollm, int4, toy):
    assert int4.weights == "int4" and int4.int4 and int4.dtype == torch.bfloat16
    assert smollm.with_weights("int4") is int4 and smollm.with_weights("float32") is smollm
    assert isinstance(int4.new_cache(), LeanCache)
    assert all(isinstance(getattr(layer, m), gguf_int4.Int4Linear)
               for layer in int4.fast.layers for m in ("qkv", "out", "gate_up", "down"))
    short = int4.truncated(6)  # early exit: the first layers, still on the 4-bit blocks
    assert short.weights == "int4" and isinstance(short.fast.layers[5].down, gguf_int4.Int4Linear)
    # norms and embedding are the bfloat16 variant's, shared; the head is the file's Q8_0 as two planes
    assert int4.fast.embed.data_ptr() == smollm.with_dtype(torch.bfloat16).fast.embed.data_ptr()
    assert isinstance(int4.fast.head, gguf_int4.Int4Linear) and len(int4.fast.head.packed) == 2
    packed = sum(getattr(layer, m).nbytes for layer in int4.fast.layers for m in ("qkv", "out", "gate_up", "down"))
    dense = sum(p.numel() * 2 for layer in smollm.model.model.layers for p in layer.parameters() if p.dim() == 2)
    assert packed / dense == 5 / 16  # 4 bits a weight and two bfloat16 per 32 against bfloat16's 16
    with pytest.raises(InvalidRequest, match="int4 weights are not available for toy: .*not loaded from one"):
        toy.with_weights("int4")


def test_auto_picks_int4_where_it_runs(store, smollm):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    yes, no = (lambda: True), (lambda: False)
    assert weights_order("int4", cpu, torch.float32, toy=False, has_int4=no) == ("int4",)
    assert weights_order("bfloat16", cpu, torch.float32, toy=False, has_int4=yes) == ("bfloat16",)
    assert weights_order("auto", cuda, torch.float16, toy=False, has_int4=yes) == ("float16",)
    assert weights_order("auto", cpu, torch.float32, toy=True, has_int4=yes) == ("float32",)
    fast_int4 = cpu_capability() in INT4_FAST_CAPABILITIES
    bf16 = ("bfloat16",) if cpu_has_native_bf16() else ()
    assert weights_order("auto", cpu, torch.float32, toy=False, has_int4=yes) == (
        ("int4",) * fast_int4 + bf16 + ("float32",))
    assert weights_order("auto", cpu, torch.float32, toy=False, has_int4=no) == (*bf16, "float32")
    if fast_int4:
        assert in_dtype(smollm, "auto").weights == "int4"
        trace = run(store, Request("gemma3-270m", "greedy", "The sky is", max_new_tokens=2, dtype="auto"))
        assert trace.to_dict()["dtype"] == "int4"
        assert trace.to_dict()["weights_check"]["passed"] and trace.to_dict()["weights_check"]["weights"] == "int4"


def same_weights_in_float32(smollm, int4, tensors):
    """transformers' float32 model with the int4 variant's weights: the kernel's matrices
    dequantised, the bfloat16 norms and embedding, and the head the kernel's two planes make of the
    file's Q8_0 blocks (untied from the embedding)."""
    model = copy.deepcopy(smollm.model).to(torch.bfloat16).float()
    head = gguf_int4.read_blocks(tensors["token_embd.weight"])  # Q8_0, rows in the model's order already
    head.scale, head.zero = (torch.from_numpy(x).bfloat16().float().numpy() for x in (head.scale, head.zero))
    model.lm_head = torch.nn.Linear(head.shape[1], head.shape[0], bias=False)
    model.lm_head.weight.data = torch.from_numpy(kernel_form(head))
    for layer, lean in zip(model.model.layers, int4.fast.layers):
        attn, mlp = layer.self_attn, layer.mlp
        qkv = lean.qkv.dequantised().split([attn.q_proj.out_features, attn.k_proj.out_features,
                                            attn.v_proj.out_features])
        gate_up = lean.gate_up.dequantised().split(mlp.gate_proj.out_features)
        for module, weight in ((attn.q_proj, qkv[0]), (attn.k_proj, qkv[1]), (attn.v_proj, qkv[2]),
                               (attn.o_proj, lean.out.dequantised()), (mlp.gate_proj, gate_up[0]),
                               (mlp.up_proj, gate_up[1]), (mlp.down_proj, lean.down.dequantised())):
            module.weight.data.copy_(weight)
    model.model.rotary_emb.inv_freq = smollm.model.model.rotary_emb.inv_freq.clone()
    return model


def tv(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return 0.5 * (a.softmax(-1) - b.softmax(-1)).abs().sum(-1)


def test_lean_int4_is_transformers_on_the_same_weights(smollm, int4, tensors):
    prompt = smollm.encode(PROMPT)
    with torch.inference_mode():
        ids = smollm.model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, pad_token_id=0)
        ref = same_weights_in_float32(smollm, int4, tensors)(input_ids=ids).logits[0].float()
    ours = int4.forward(ids).logits[0]
    assert tv(ours, ref).max().item() <= 0.08
    differ = torch.nonzero(ours.argmax(-1) != ref.argmax(-1)).flatten()
    assert len(differ) <= 0.1 * len(ours)
    for i in differ:
        best, second = ref[i].softmax(-1).topk(2).values.tolist()
        assert best - second <= 0.05, (i, best, second)


def test_int4_logits_close_to_float32(smollm, int4):
    prompt = smollm.encode(PROMPT)
    with torch.inference_mode():
        ids = smollm.model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, pad_token_id=0)
    distance = tv(int4.forward(ids).logits[0], smollm.forward(ids).logits[0])
    assert distance.max().item() <= 0.1 and distance.mean().item() <= 0.03
    agree = (int4.forward(ids).logits[0].argmax(-1) == smollm.forward(ids).logits[0].argmax(-1)).float().mean()
    assert agree.item() >= 0.95


def test_cached_steps_crops_and_reorders_agree_with_one_pass(smollm, int4):
    """Through the cache (prefill, steps, a cropped verify pass, a beam reorder) int4 gives what one
    pass over the same text gives, within ``PASS_SHAPES``, and the same argmax."""
    prompt = smollm.encode(PROMPT)
    cache = int4.new_cache()
    int4.forward(torch.tensor([prompt]), cache)
    int4.forward(torch.tensor([[330, 1115, 42, 7]]), cache)
    cache.crop(-2)  # keeps 330 1115
    cache.reorder_cache(torch.zeros(2, dtype=torch.long))  # two beams of one row
    stepped = int4.forward(torch.tensor([[12], [12]]), cache).logits[:, -1]
    whole = int4.forward(torch.tensor([prompt + [330, 1115, 12]])).logits[0, -1]
    for row in stepped:
        assert (row - whole).abs().max().item() <= PASS_SHAPES and row.argmax() == whole.argmax()


def test_a_draft_tree_pass_and_keep_on_the_lean_cache(smollm, int4):
    """A tree of drafts in one pass gives each node what its own path gives, and ``keep`` leaves
    the cache as if only the kept path had been fed."""
    prompt = smollm.encode(PROMPT)
    parents, tokens = [-1, 0, 0, 1], [330, 1115, 42, 7]  # node 0 the root; 1, 2 its children; 3 under 1
    cache = int4.new_cache()
    int4.forward(torch.tensor([prompt[:-1]]), cache)
    past = cache.get_seq_length()
    tree = int4.forward(torch.tensor([[prompt[-1]] + tokens[1:]]), cache, attention_mask=attention_mask(parents, past),
                        position_ids=position_ids(parents, past)).logits[0]
    alone = int4.forward(torch.tensor([prompt + [1115, 7]])).logits[0]
    assert (tree[3] - alone[-1]).abs().max().item() <= PASS_SHAPES and tree[3].argmax() == alone[-1].argmax()
    assert (tree[1] - alone[-2]).abs().max().item() <= PASS_SHAPES
    sibling = int4.forward(torch.tensor([prompt + [42]])).logits[0, -1]
    assert (tree[2] - sibling).abs().max().item() <= PASS_SHAPES and tree[2].argmax() == sibling.argmax()
    keys, values = cache.keys.clone(), cache.values.clone()
    cache.keep(list(range(past)) + [past, past + 1, past + 3])  # the root, node 1, node 3
    assert cache.get_seq_length() == len(prompt) + 2
    n = past + 3
    assert torch.equal(cache.keys[:, :, :, :n], torch.cat([keys[:, :, :, :past + 2], keys[:, :, :, past + 3:past + 4]], 3))
    assert torch.equal(cache.values[:, :, :, :n], torch.cat([values[:, :, :, :past + 2],
                                                             values[:, :, :, past + 3:past + 4]], 3))
    after = int4.forward(torch.tensor([[5]]), cache).logits[0, -1]
    fresh = int4.forward(torch.tensor([prompt + [1115, 7, 5]])).logits[0, -1]
    assert after.argmax() == fresh.argmax()  # (passes of other shapes round otherwise in bfloat16: up to ~1)


@pytest.mark.parametrize("dtype", ["bfloat16", "int4"])
@pytest.mark.parametrize("prompt", ["Why do leaves change colour in autumn?", PROMPT])
def test_greedy_eagle_is_greedy_on_the_lean_forward(store, dtype, prompt):
    """EAGLE's tree passes run on the lean forward too. Each token it commits is the argmax of the
    distribution it recorded for that step, and its text is the same weights' greedy text up to a
    near tie: a pass over several tokens rounds bfloat16 activations otherwise than a one-token
    step (in transformers as here), which moves probabilities by up to a few hundredths (measured
    on these prompts: top two 0.339 / 0.299 in int4 where the tree pass took the second; 0.228 /
    0.178 in bfloat16 with oneDNN's AVX2 kernels, which emulate bfloat16)."""
    plain = run(store, Request("smollm2-135m", "greedy", prompt, max_new_tokens=24, dtype=dtype))
    eagle = run(store, Request("smollm2-135m", "speculative", prompt, {"draft": "eagle", "temperature": 0.0,
                                                                       "measure_baseline": False},
                               max_new_tokens=24, dtype=dtype))
    assert eagle.to_dict()["dtype"] == plain.to_dict()["dtype"] == dtype
    assert eagle.extra["speculative"]["rounds"] < len(eagle.tokens)
    for step, token in zip(eagle.steps, eagle.token_ids):
        assert max(step.candidates, key=lambda c: c.raw_prob).id == token
    first = next((i for i, (a, b) in enumerate(zip(eagle.token_ids, plain.token_ids)) if a != b), None)
    if first is not None:
        best, second = sorted(plain.steps[first].candidates, key=lambda c: -c.raw_prob)[:2]
        assert best.raw_prob - second.raw_prob <= NEAR_TIE and eagle.token_ids[first] == second.id, (first, best, second)


def test_greedy_and_sampling_run_and_record_int4(store, smollm, int4):
    greedy = run(store, Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=12, dtype="int4"))
    assert greedy.to_dict()["dtype"] == "int4"
    # greedy is the argmax of the int4 forward at every step, recomputed here through a fresh cache
    cache = int4.new_cache()
    logits = int4.forward(torch.tensor([greedy.prompt_ids]), cache).logits[0, -1]
    for step, token in zip(greedy.steps, greedy.token_ids):
        assert int(logits.argmax()) == token
        recorded = next(c.raw_prob for c in step.candidates if c.id == token)
        assert abs(logits.softmax(-1)[token].item() - recorded) <= 1e-6
        logits = int4.forward(torch.tensor([[token]]), cache).logits[0, -1]
    a = run(store, Request("smollm2-135m", "sampling", PROMPT, {"temperature": 0.9}, seed=5, max_new_tokens=12,
                           dtype="int4"))
    b = run(store, Request("smollm2-135m", "sampling", PROMPT, {"temperature": 0.9}, seed=5, max_new_tokens=12,
                           dtype="int4"))
    assert a.token_ids == b.token_ids  # reproducible by seed
