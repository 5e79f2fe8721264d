"""The bfloat16 fast path: the lean llama forward against transformers on the same weights, its
KV cache under the crops and reorders strategies make, the strategies on top of it, and the
``dtype`` request field. float32 (every other test) stays the transformers model as loaded.

Tolerances, measured on SmolLM2 and stated here once:
- lean vs transformers, both bfloat16, same weights: identical logits to transformers fed one token
  at a time, through every pass, crop, reorder and tree the strategies make (the lean forward
  computes each row of a pass as its one-token step: ``tests/models/test_one_pass.py``). transformers'
  own one pass rounds each row's attention over all the pass's keys, so it differs from its own
  steps (and from ours) by up to 0.7 in a logit (1.3 on AVX2 kernels); those comparisons bound the
  total variation of the distributions instead (``assert_near``).
- bfloat16 vs float32: per-position total variation distance at most 0.1 (measured 0.067), mean
  at most 0.03 (measured 0.017-0.020), top-1 agreement at least 95 % (measured 98 %).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from stepped import hf_stepped

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models.cpu import NATIVE_BF16_FLAGS
from playground.models.dtypes import cpu_has_native_bf16, weights_order
from playground.models.fast.llama import LeanCache
from strategies.sampling.chain import ChainParams, Multinomial, apply_chain, build_chain

PROMPT = "Name three colours of the rainbow."


@pytest.fixture(scope="module")
def fast(smollm):
    return smollm.with_dtype(torch.bfloat16)


def hf_logits(lm, ids: torch.Tensor) -> torch.Tensor:
    """transformers' own forward of ``lm.model`` (no cache), float32 [batch, n, vocab]."""
    with torch.inference_mode():
        return lm.model(input_ids=ids).logits.float()


def test_lean_path_is_used_only_in_bfloat16(smollm, fast, toy):
    assert smollm.fast is None and fast.fast is not None
    assert isinstance(fast.new_cache(), LeanCache)
    assert fast.dtype == torch.bfloat16 and smollm.dtype == torch.float32
    assert smollm.with_dtype(torch.float32) is smollm and smollm.with_dtype(torch.bfloat16) is fast
    assert toy.with_dtype(torch.bfloat16).fast is None  # GPT-2 architecture: transformers in bfloat16
    # the lean path shares the transformers copy's weights (Q/K/V rebound to views of the stack)
    attn = fast.model.model.layers[0].self_attn
    assert attn.k_proj.weight.untyped_storage().data_ptr() == fast.fast.layers[0].qkv.untyped_storage().data_ptr()


def test_one_pass_equals_transformers_in_bfloat16(smollm, fast):
    """Our one pass over the prompt is transformers fed one token at a time, bit for bit (and within a
    few bfloat16 steps of transformers' own one pass, whose attention rounds each row over all the keys)."""
    ids = torch.tensor([smollm.encode(PROMPT)])
    ours = fast.forward(ids).logits
    assert ours.dtype == torch.float32  # the chain always gets float32
    assert torch.equal(ours, hf_stepped(fast, ids))
    assert_near(ours, hf_logits(fast, ids))


def transformers_cache(lm):
    """A transformers cache: ``lm.forward`` then runs transformers' own forward on the same weights."""
    from transformers import DynamicCache
    return DynamicCache(config=lm.model.config)


def assert_near(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    """Near transformers' one pass: per-position total variation at most 0.1 (the weights check's bound;
    a wrong mask, position or cache gives about 1). Its logits differ from ours by up to 0.7 on AVX-512
    and 1.3 on AVX2 kernels: a bound on them would test the CPU's rounding, not the forward."""
    tv = 0.5 * (ours.softmax(-1) - theirs.softmax(-1)).abs().sum(-1)
    assert tv.max().item() <= 0.1


def lean_feed(lm):
    return lambda ids, cache: lm.forward(ids, cache).logits


def stepped_feed(lm):
    return lambda ids, cache: hf_stepped(lm, ids, cache)


def crop_and_verify(feed, cache, prompt: list[int]) -> torch.Tensor:
    """Prefill, two one-token steps, a 4-token verify pass of which 3 are cropped (a rejected
    draft), then 6 new tokens in one pass: every logit row produced, [prompt + 12, vocab]."""
    rows = [feed(torch.tensor([prompt]), cache)[0]]
    for token in (330, 1115):
        rows.append(feed(torch.tensor([[token]]), cache)[0])
    rows.append(feed(torch.tensor([[42, 1, 2, 3]]), cache)[0, :1])
    cache.crop(-3)
    assert cache.get_seq_length() == len(prompt) + 3
    rows.append(feed(torch.tensor([[7, 99, 12, 611, 28, 5]]), cache)[0])
    assert cache.get_seq_length() == len(prompt) + 9
    return torch.cat(rows)


def test_crop_and_verify_passes_match_transformers(smollm, fast):
    prompt = smollm.encode(PROMPT)
    ours = crop_and_verify(lean_feed(fast), fast.new_cache(), prompt)
    assert torch.equal(ours, crop_and_verify(stepped_feed(fast), transformers_cache(fast), prompt))


def tree_pass(lm, cache, prompt: list[int]) -> torch.Tensor:
    """A draft tree (root, two children, a grandchild) in one pass after the prompt: [4, vocab]."""
    from strategies.speculative.eagle.tree import attention_mask, position_ids
    parents = [-1, 0, 0, 1]
    lm.forward(torch.tensor([prompt[:-1]]), cache)
    past = cache.get_seq_length()
    return lm.forward(torch.tensor([[prompt[-1], 1115, 42, 7]]), cache, attention_mask=attention_mask(parents, past),
                      position_ids=position_ids(parents, past)).logits[0]


def test_a_draft_tree_pass_matches_transformers(smollm, fast):
    """Each node of a tree pass is transformers fed the node's own path one token at a time, bit for
    bit; and near transformers' own tree pass (the same 4D mask)."""
    import copy
    prompt = smollm.encode(PROMPT)
    ours = tree_pass(fast, fast.new_cache(), prompt)
    assert_near(ours, tree_pass(fast, transformers_cache(fast), prompt))
    before = transformers_cache(fast)
    hf_stepped(fast, torch.tensor([prompt[:-1]]), before)
    for node, path in enumerate(([prompt[-1]], [prompt[-1], 1115], [prompt[-1], 42], [prompt[-1], 1115, 7])):
        stepped = hf_stepped(fast, torch.tensor([path]), copy.deepcopy(before))
        assert torch.equal(ours[node], stepped[0, -1]), node


def beams(feed, cache, prompt: list[int]) -> torch.Tensor:
    """One prompt row copied to three beams, each fed its own token, then gathered [2, 0, 0] as
    beam search does, and fed again: [3, vocab]."""
    feed(torch.tensor([prompt]), cache)
    cache.reorder_cache(torch.zeros(3, dtype=torch.long))
    feed(torch.tensor([[330], [1115], [42]]), cache)
    cache.reorder_cache(torch.tensor([2, 0, 0]))
    return feed(torch.tensor([[7], [8], [9]]), cache)[:, -1]


def test_reorder_grows_and_gathers_beams_as_transformers(smollm, fast):
    """Each gathered beam's row is its own path fed alone through transformers, one token at a time (a
    batch of beams gives each row the numbers of a one-row step: transformers' own 3-row step need
    not, where the CPU's kernel blocks rows together)."""
    prompt = smollm.encode(PROMPT)
    ours = beams(lean_feed(fast), fast.new_cache(), prompt)
    paths = [[42, 7], [330, 8], [330, 9]]  # after the gather [2, 0, 0]
    alone = torch.stack([hf_stepped(fast, torch.tensor([prompt + path]))[0, -1] for path in paths])
    assert torch.equal(ours, alone)


def test_cache_grows_past_its_first_block(smollm, fast):
    """300 positions (more than one 256-position block) cut into passes two ways, so the cache grows
    inside a pass once and between passes once: the same logits to the bit, and near transformers'."""
    ids = (smollm.encode(PROMPT) * 20)[:300]
    logits = []
    for cut in (250, 100):
        cache = fast.new_cache()
        fast.forward(torch.tensor([ids[:cut]]), cache)
        logits.append(fast.forward(torch.tensor([ids[cut:]]), cache).logits[0, -50:])
        assert cache.get_seq_length() == 300
    assert torch.equal(*logits)
    cache = transformers_cache(fast)
    fast.forward(torch.tensor([ids[:250]]), cache)
    theirs = fast.forward(torch.tensor([ids[250:]]), cache).logits[0]
    assert_near(logits[0], theirs)


def test_hidden_states_and_early_exit_match_transformers(smollm, fast):
    ids = torch.tensor([smollm.encode(PROMPT)])
    ours = fast.forward(ids, hidden=True).hidden_states
    _, ref = hf_stepped(fast, ids, hidden=True)
    assert len(ours) == len(ref) == 31
    for a, b in zip(ours, ref):
        assert torch.equal(a, b)
    short = fast.truncated(12)
    assert short.fast is not None and len(short.fast.layers) == 12
    assert torch.equal(short.forward(ids).logits[0, -1], fast.logits_from_hidden(ours[12][0, -1]))


def test_greedy_equals_transformers_greedy_in_bfloat16(store, fast):
    """Our bfloat16 greedy is transformers' greedy fed one token at a time (the reference the lean forward
    equals to the bit), token for token. transformers' generate() reads the prompt in one pass, which rounds
    otherwise (the module docstring): its text is ours until a step where its own scores give our token and
    its pick within that bound (on an AVX512-FP16 CPU: step 5, both 21.625, a tie its argmax breaks by id)."""
    from transformers import DynamicCache
    trace = run(store, Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=32, dtype="bfloat16"))
    cache = DynamicCache(config=fast.model.config)
    logits, stepped = hf_stepped(fast, torch.tensor([trace.prompt_ids]), cache)[0, -1], []
    for _ in range(len(trace.token_ids)):
        stepped.append(int(logits.argmax()))
        logits = hf_stepped(fast, torch.tensor([[stepped[-1]]]), cache)[0, -1]
    assert trace.token_ids == stepped
    assert trace.to_dict()["dtype"] == "bfloat16"
    with torch.inference_mode():
        out = fast.model.generate(torch.tensor([trace.prompt_ids]), max_new_tokens=32, do_sample=False,
                                  output_scores=True, return_dict_in_generate=True,
                                  pad_token_id=fast.tokenizer.pad_token_id or 0)
    theirs = out.sequences[0, len(trace.prompt_ids):].tolist()
    parted = next((k for k, (a, b) in enumerate(zip(theirs, trace.token_ids)) if a != b), None)
    if parted is not None:
        scores = out.scores[parted][0].float()
        assert scores.max() - scores[trace.token_ids[parted]] <= 1.3, f"generate() parts at step {parted}"


def test_bfloat16_logits_close_to_float32(smollm, fast):
    prompt = smollm.encode(PROMPT)
    ids = torch.tensor([prompt + run_ids(fast, prompt)])
    p32, p16 = smollm.forward(ids).logits[0].softmax(-1), fast.forward(ids).logits[0].softmax(-1)
    tv = 0.5 * (p32 - p16).abs().sum(-1)
    assert tv.max().item() <= 0.1 and tv.mean().item() <= 0.03
    assert (p32.argmax(-1) == p16.argmax(-1)).float().mean().item() >= 0.95


def run_ids(lm, prompt: list[int], n: int = 16) -> list[int]:
    with torch.inference_mode():
        return lm.model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                                 pad_token_id=0)[0, len(prompt):].tolist()


@pytest.mark.parametrize("draft, layer", [("early_exit", 10), ("prompt_lookup", 0)])
def test_greedy_speculative_equals_greedy_in_bfloat16(store, draft, layer):
    greedy = run(store, Request("smollm2-135m", "greedy", PROMPT, max_new_tokens=16, dtype="bfloat16"))
    params = {"draft": draft, "draft_layer": layer, "gamma": 4, "temperature": 0}
    spec = run(store, Request("smollm2-135m", "speculative", PROMPT, params, max_new_tokens=16, dtype="bfloat16"))
    # bfloat16 logits can tie exactly (this prompt has one at step 5 on the lean path: 0.326282 twice); a
    # verify pass scores each row as its step would, so the tie breaks the same way: the same text.
    assert spec.token_ids == greedy.token_ids
    assert len(spec.token_ids) == len(greedy.token_ids)


def test_beam_search_matches_transformers_in_bfloat16(store, fast):
    """Beam search on the lean path (reordered cache) finds transformers' beams on the same weights."""
    trace = run(store, Request("smollm2-135m", "beam", PROMPT, {"num_beams": 3}, max_new_tokens=8,
                               dtype="bfloat16"))
    with torch.inference_mode():
        out = fast.model.generate(torch.tensor([trace.prompt_ids]), num_beams=3, do_sample=False,
                                  max_new_tokens=8, early_stopping=False, pad_token_id=0,
                                  eos_token_id=sorted(fast.eos_ids))
    best = out[0, len(trace.prompt_ids):].tolist()
    assert trace.token_ids == best[:len(trace.token_ids)]
    assert trace.beam["counters"]["cache_reorders"] > 0


@pytest.mark.parametrize("weights", ["bfloat16", "int4"])
def test_sampler_statistics_hold_on_the_lean_paths_logits(smollm, weights):
    """The multinomial selector after top-k on the lean path's first-step logits (bfloat16 and the
    GGUF file's int4 blocks) draws from exactly the chained distribution (chi-square over the kept
    tokens, 20,000 draws, fixed seed). The selector sees the kept tokens and 2,000 cut ones (-inf
    logits, which carry no mass), not all 49,152 columns: the same law, a 20th of the work."""
    logits = smollm.with_weights(weights).forward(torch.tensor([smollm.encode(PROMPT)])).logits[0, -1]
    context = torch.zeros((1, 0), dtype=torch.long)
    chained = apply_chain(build_chain(ChainParams(temperature=1.3, top_k=40)), logits[None], context)[0]
    kept_ids = torch.nonzero(torch.isfinite(chained)).flatten()
    assert 3 <= len(kept_ids) < 200, "the case should keep several, not all, tokens"
    cut_ids = torch.nonzero(~torch.isfinite(chained)).flatten()
    cut_ids = cut_ids[torch.randperm(len(cut_ids), generator=torch.Generator().manual_seed(7))[:2000]]
    final = chained[torch.cat([kept_ids, cut_ids])]
    kept = np.arange(len(kept_ids))
    expected = final.softmax(-1).double().numpy()
    assert np.all(expected[len(kept_ids):] == 0) and np.all(expected[kept] > 0)
    draws = 20_000
    ids, _ = Multinomial(torch.Generator().manual_seed(13)).select(final.expand(draws, -1))
    counts = np.bincount(ids.numpy(), minlength=len(expected))
    assert counts.sum() == counts[kept].sum(), "a truncated token was drawn"
    exp = expected[kept] / expected[kept].sum() * draws
    observed = counts[kept]
    assert exp.min() >= 5, "chi-square needs expected counts of at least 5"
    assert chisquare(observed, exp).pvalue > 1e-3


def test_dtype_is_validated_and_recorded(store):
    with pytest.raises(InvalidRequest, match=r"dtype must be one of auto, float32, bfloat16, int4, got 'half'"):
        Request("toy", "greedy", "1 2", dtype="half")
    trace = run(store, Request("toy", "greedy", "1 2", max_new_tokens=2, dtype="auto"))
    assert trace.to_dict()["dtype"] == "float32"  # toy models stay float32 under auto
    assert run(store, Request("toy", "greedy", "1 2", max_new_tokens=2)).to_dict()["dtype"] == "float32"


def test_auto_dtype_follows_the_cpu():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    no_int4 = lambda: False  # noqa: E731
    assert weights_order("float32", cpu, torch.float32, toy=False, has_int4=no_int4) == ("float32",)
    assert weights_order("bfloat16", cpu, torch.float32, toy=True, has_int4=no_int4) == ("bfloat16",)
    assert weights_order("auto", cuda, torch.float16, toy=False, has_int4=no_int4) == ("float16",)  # as loaded
    assert weights_order("auto", cpu, torch.float32, toy=True, has_int4=no_int4) == ("float32",)
    native = weights_order("auto", cpu, torch.float32, toy=False, has_int4=no_int4)
    assert native == (("bfloat16", "float32") if cpu_has_native_bf16() else ("float32",))


def test_native_bf16_is_read_from_cpu_flags(tmp_path):
    with_flag, without = tmp_path / "a", tmp_path / "b"
    with_flag.write_text(f"processor\t: 0\nflags\t\t: fpu avx512f {sorted(NATIVE_BF16_FLAGS)[0]} sse\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx2 sse\n")
    assert cpu_has_native_bf16(with_flag) and not cpu_has_native_bf16(without)
    assert not cpu_has_native_bf16(tmp_path / "missing")


def test_cli_takes_dtype(capsys):
    from playground.cli import main
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--dtype", "half"]) == 2
    assert "dtype must be one of auto, float32, bfloat16, int4, got 'half'" in capsys.readouterr().err
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--max-new-tokens", "2", "--dtype", "bfloat16",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "bfloat16"
