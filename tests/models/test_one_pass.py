"""Scoring several tokens in one pass gives the logits of one token at a time, bit for bit, on the
lean forwards (bfloat16 and int4, SmolLM2 and Gemma 3), so greedy draft-and-verify writes plain
greedy's text; and where a CPU cannot have that, the trace, the status line and the break-even
caption say so with the measured figure."""
from __future__ import annotations

import random

import pytest
import torch

from playground.charts import break_even
from playground.engine import Request, run
from playground.models.fast import check, layers, rows
from playground.models.fast.gemma import LeanGemma
from playground.models.fast.layers import linear, stepwise_attention, tree_rows
from playground.ui.handlers import status_html
from strategies.speculative.eagle.tree import attention_mask

TEXT = "The sky is blue because sunlight is scattered by the air, and blue light is scattered the most."


def cut_logits(lm, ids: list[int], cuts: list[int]) -> torch.Tensor:
    """float32 logits of every position of ``ids`` fed in passes that end at ``cuts``."""
    cache, rows, start = lm.new_cache(), [], 0
    for end in [*cuts, len(ids)]:
        if end > start:
            rows.append(lm.forward(torch.tensor([ids[start:end]]), cache).logits[0])
            start = end
    return torch.cat(rows)


@pytest.mark.parametrize("key, weights", [("smollm2-135m", "bfloat16"), ("smollm2-135m", "int4"),
                                          ("gemma3-270m", "int4")])
def test_one_pass_equals_steps_bit_for_bit(store, key, weights):
    """The same text cut into passes four ways (one pass; one token a pass; a prompt then drafts of 5;
    random cuts) gives the same logits at every position, to the bit; a prefill's last row alone
    (``last=True``, the LM head on that row only) is the whole pass's last row, hidden states and all."""
    lm = store.get(key).with_weights(weights)
    ids = lm.encode(TEXT, chat=False)[:40]
    whole = cut_logits(lm, ids, [])
    prefill = lm.forward(torch.tensor([ids]), hidden=True, last=True)
    assert prefill.logits.shape[1] == 1 and torch.equal(prefill.logits[0, -1], whole[-1])
    full = lm.forward(torch.tensor([ids]), hidden=True)
    assert all(torch.equal(a, b) for a, b in zip(prefill.hidden_states, full.hidden_states))
    rng = random.Random(0)
    for cuts in (list(range(1, len(ids))), list(range(23, len(ids), 5)),
                 sorted(rng.sample(range(1, len(ids)), 6))):
        got = cut_logits(lm, ids, cuts)
        assert torch.equal(got, whole), (cuts, float((got - whole).abs().max()))
    assert lm.check is not None and lm.check.one_pass_gap == 0.0
    assert check.weights_record(lm.check, weights, [], lm.one_pass_gap)["one_pass_gap"] == 0.0


def test_a_tree_pass_equals_its_paths_stepped(store):
    """A draft tree in one pass (4D mask, scattered ancestors): each node's logits are those of its path
    fed one token at a time."""
    lm = store.get("smollm2-135m").with_weights("bfloat16")
    prompt = lm.encode(TEXT, chat=False)[:20]
    parents = [-1, 0, 0, 1, 1, 2, 3]  # node 0 is the root; 1, 2 its children; ...
    tokens = [279, 2136, 314, 1165, 253, 30, 28]
    cache = lm.new_cache()
    lm.forward(torch.tensor([prompt]), cache)
    depth = [0] * len(parents)
    for i, p in enumerate(parents[1:], start=1):
        depth[i] = depth[p] + 1
    tree = lm.forward(torch.tensor([tokens]), cache, attention_mask=attention_mask(parents, len(prompt)),
                      position_ids=torch.tensor([[len(prompt) + d for d in depth]])).logits[0]
    for node in range(len(parents)):
        path, n = [], node
        while n >= 0:
            path.insert(0, tokens[n])
            n = parents[n]
        stepped = cut_logits(lm, prompt + path, list(range(len(prompt), len(prompt) + len(path))))
        assert torch.equal(tree[node], stepped[-1]), node


def test_stepwise_attention_is_the_step_per_row():
    torch.manual_seed(0)
    q = torch.randn(1, 4, 6, 16).bfloat16()
    keys, values = torch.randn(1, 2, 64, 16).bfloat16(), torch.randn(1, 2, 64, 16).bfloat16()
    lengths = [35, 36, 37, 38, 39, 40]
    out = stepwise_attention(q, keys, values, lengths, enable_gqa=True)
    for r, n in enumerate(lengths):
        step = torch.nn.functional.scaled_dot_product_attention(q[:, :, r:r + 1], keys[:, :, :n], values[:, :, :n],
                                                                enable_gqa=True)
        assert torch.equal(out[:, :, r:r + 1], step)
    # the same rows as a tree over a copy of the keys in the cache's order: gathered rows give the same numbers
    mask = torch.zeros(1, 1, 6, 40)
    for r, n in enumerate(lengths):
        mask[0, 0, r, n:] = torch.finfo(torch.float32).min
    n_keys, slots = tree_rows(mask)
    assert n_keys == lengths and slots[2, :37].tolist() == list(range(37))
    assert torch.equal(stepwise_attention(q, keys, values, n_keys, slots, enable_gqa=True), out)


def test_a_local_layer_row_masks_what_its_step_masks():
    class Small:
        window = 4
        device = torch.device("cpu")
    assert LeanGemma._step_mask(Small(), 4) is None
    assert LeanGemma._step_mask(Small(), 6).tolist() == [[False, False, True, True, True, True]]


@pytest.mark.parametrize("weights", ["bfloat16", "int4"])
def test_batched_rows_equal_each_row_alone(store, weights):
    """Rows in one batch (beams, sample many) get the numbers each row gets alone: a prompt pass of
    three different rows, then a step of each, bit for bit."""
    lm = store.get("smollm2-135m").with_weights(weights)
    rows = [lm.encode(text, chat=False)[:8] for text in (TEXT, "Once upon a time there lived a dragon who baked",
                                                         "Name three colours of the rainbow and say why each")]
    assert all(len(r) == 8 for r in rows) and rows[0] != rows[1]
    cache = lm.new_cache()
    batched = [lm.forward(torch.tensor(rows), cache).logits,
               lm.forward(torch.tensor([[279], [2136], [314]]), cache).logits]
    for b, (row, token) in enumerate(zip(rows, (279, 2136, 314))):
        alone = lm.new_cache()
        assert torch.equal(lm.forward(torch.tensor([row]), alone).logits[0], batched[0][b])
        assert torch.equal(lm.forward(torch.tensor([[token]]), alone).logits[0], batched[1][b])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_by_roll_is_rotate_half_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 5, 9, 64, generator=gen) * 30).to(dtype)  # [batch, n, heads, head_dim]
    x[0, 0, 0, :4] = 0.0  # zeros keep their sign as the reference gives it
    angles = torch.randn(2, 5, 1, 64, generator=gen) * 100
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    reference = x * cos + layers.rotate_half(x) * sin
    ours = layers.rope(x, cos, layers.signed_sin(sin))
    assert ours.dtype == dtype
    assert torch.equal(ours.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                       reference.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))


@pytest.mark.parametrize("shape", [(96, 64), (576, 1536), (640, 2048)])
def test_a_dense_product_of_many_rows_is_its_rows_one_at_a_time(shape):
    """Whatever limit the probe chose on this CPU (SmolLM2's and Gemma 3's down products among the
    shapes), a product over many rows gives each row its one-row numbers."""
    torch.manual_seed(0)
    weight = torch.randn(*shape).bfloat16()
    limit = rows.form(weight)
    assert 1 <= limit.rows <= rows.MAX_ROWS and limit.threads == torch.get_num_threads()
    x = torch.randn(1, 2 * rows.MAX_ROWS + 5, shape[1]).bfloat16()
    # each row as a step's own [1, 1, in] tensor (x[0, i][None, None] has a fresh tensor's strides)
    one_by_one = torch.cat([torch.nn.functional.linear(x[0, i][None, None], weight) for i in range(x.shape[1])], dim=1)
    assert torch.equal(linear(x, weight), one_by_one)
    again = rows.probe(weight)  # the probe measures the kernel, not chance: the same choice twice
    assert (again.rows, again.stop) == (limit.rows, limit.stop) or "probe time" in limit.stop + again.stop


@pytest.mark.parametrize("prompt, weights, tokens", [
    ("Tell me a short story about a dragon.", "bfloat16", 14),  # parted at token 10: the prompt cut as the draft cuts it
    ("How does rain form?", "bfloat16", 40),  # parted at token 37: an exact tie, rows of a 35-row product
    ("Explain in one sentence why the sky is blue.", "int4", 32),  # parted at token 9 (early exit)
])
@pytest.mark.parametrize("draft", ["early_exit", "prompt_lookup", "eagle"])
def test_greedy_speculative_equals_greedy_on_the_lean_path(store, prompt, weights, tokens, draft):
    greedy = run(store, Request("smollm2-135m", "greedy", prompt, max_new_tokens=tokens, dtype=weights))
    params = {"draft": draft, "gamma": 4, "temperature": 0, "measure_baseline": False}
    spec = run(store, Request("smollm2-135m", "speculative", prompt, params, max_new_tokens=tokens, dtype=weights))
    assert spec.token_ids == greedy.token_ids
    assert spec.to_dict()["weights_check"]["one_pass_gap"] == 0.0


def test_the_reference_weights_record_their_own_gap(store):
    """float32 runs through transformers, whose products are not row-invariant: its gap is measured
    on its probe and recorded in every trace, not assumed."""
    trace = run(store, Request("smollm2-135m", "greedy", "1 2 3", max_new_tokens=2))
    record = trace.to_dict()["weights_check"]
    lm = store.get("smollm2-135m")
    assert record["one_pass_gap"] == lm.one_pass_gap
    probe = lm._probe
    steps, _ = check.probe_logits(lm, probe.prompt_ids, probe.continuation)
    assert lm.one_pass_gap == check.one_pass_gap(lm, probe.prompt_ids, probe.continuation, steps)


def test_a_gap_is_said_where_the_run_shows():
    trace = {"strategy": "speculative", "model": "m", "tokens": [], "timing": {},
             "weights_check": {"weights": "float32", "reference": "float32", "passed": True, "one_pass_gap": 3e-5}}
    assert "can part from plain decoding at a near tie" in status_html(trace, final=True)
    assert "3e-05" in status_html(trace, final=True)
    assert "3e-05" in break_even.gap_note(trace) and "near tie" in break_even.gap_note(trace)
    assert "3e-05" in check.describe_record(trace["weights_check"])
    exact = {**trace, "weights_check": {**trace["weights_check"], "one_pass_gap": 0.0}}
    assert "part from" not in status_html(exact, final=True) and break_even.gap_note(exact) == ""
    assert "bit for bit" in check.describe_record(exact["weights_check"])
