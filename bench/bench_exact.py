"""What exact verification costs: the lean forwards' row-by-row attention and products in calls of the
row counts probed exact on this CPU (``playground.models.fast.rows``: every row of a pass computed as
its one-token step computes it) against one attention call with a causal mask and one product over
all rows, and against the fixed form before the probe (dense products in calls of 32 rows, 4-bit
ones whole, which this CPU's kernels need not keep exact), the same weights, one process.

For each weights type it prints plain decoding's tokens/s, the prefill of the prompt and the cost
of verifying a draft of ``--draft`` tokens (one pass after the prompt), per token, in both forms,
with the ratios exact / one call and exact / fixed 32 (plain decoding runs one row a pass, so its
ratios should be about 1), and the largest logit difference between one pass and one token at a time
in each form.

    .venv/bin/python bench/bench_exact.py [--tokens 32] [--repeats 5] [--draft 5] [--quick]

``--quick``: SmolLM2 in bfloat16 only, 8 tokens, 2 repeats (what the tests run).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground import models
from playground.models.fast import check, gemma, layers, llama

PROMPT = "Explain in one sentence why the sky is blue, and then say why sunsets are red."


def one_call_attention(q, keys, values, lengths, gather=None, step_mask=None, **kwargs):
    """The form before: every row in one call over all the pass's keys, later ones masked (chains only)."""
    end = max(lengths)
    masks = []
    for length in lengths:
        row = torch.zeros(end, dtype=torch.bool, device=q.device)
        window = step_mask(length) if step_mask is not None else None
        row[:length] = True if window is None else window[0]
        masks.append(row)
    return F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=torch.stack(masks),
                                          **kwargs)


@contextmanager
def one_call():
    saved = llama.stepwise_attention, gemma.stepwise_attention, layers.row_calls
    llama.stepwise_attention = gemma.stepwise_attention = one_call_attention
    layers.row_calls = lambda weight, n: [n]
    try:
        yield
    finally:
        llama.stepwise_attention, gemma.stepwise_attention, layers.row_calls = saved


@contextmanager
def fixed_rows(rows: int = 32):
    """The form before the probe: dense products in calls of ``rows`` rows, 4-bit ones in one call."""
    saved = layers.row_calls
    layers.row_calls = lambda weight, n: ([min(rows, n - i) for i in range(0, n, rows)]
                                          if isinstance(weight, torch.Tensor) else [n])
    try:
        yield
    finally:
        layers.row_calls = saved


@torch.inference_mode()
def measure(lm, prompt_ids: list[int], tokens: int, repeats: int, draft: int, gap: bool = True) -> dict[str, float]:
    prefill, decode, verify = [], [], []
    for _ in range(repeats):
        cache = lm.new_cache()
        start = time.perf_counter()
        logits = lm.forward(torch.tensor([prompt_ids]), cache).logits[0, -1]
        prefill.append(time.perf_counter() - start)
        start = time.perf_counter()
        ids = []
        for _ in range(tokens):
            ids.append(int(logits.argmax()))
            logits = lm.forward(torch.tensor([[ids[-1]]]), cache).logits[0, -1]
        decode.append((time.perf_counter() - start) / tokens)
        cache.crop(-tokens)
        start = time.perf_counter()
        lm.forward(torch.tensor([ids[:draft]]), cache)
        verify.append((time.perf_counter() - start) / draft)
    if gap:
        steps, continuation = check.probe_logits(lm, prompt_ids)
        gap = check.one_pass_gap(lm, prompt_ids, continuation, steps)
    return {"prefill": statistics.median(prefill), "decode": statistics.median(decode),
            "verify": statistics.median(verify), "gap": gap}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--draft", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="SmolLM2 bfloat16 only, 8 tokens, 2 repeats")
    args = ap.parse_args()
    runs = [("smollm2-135m", "bfloat16")]
    if args.quick:
        args.tokens, args.repeats = 8, 2
    else:
        runs = [(key, w) for key in ("smollm2-135m", "gemma3-270m") for w in ("bfloat16", "int4")]
    store = models.ModelStore("cpu")
    for key, weights in runs:
        lm = store.get(key).with_weights(weights)
        prompt_ids = lm.encode(PROMPT)
        measure(lm, prompt_ids, 4, 1, args.draft, gap=False)  # warm-up
        with one_call():
            before = measure(lm, prompt_ids, args.tokens, args.repeats, args.draft)
        with fixed_rows():
            fixed = measure(lm, prompt_ids, args.tokens, args.repeats, args.draft)
        after = measure(lm, prompt_ids, args.tokens, args.repeats, args.draft)
        print(f"{key} {weights}: {len(prompt_ids)}-token prompt, {args.tokens} tokens, median of {args.repeats}")
        print(f"  plain decode   one call {1 / before['decode']:6.1f} tok/s   exact {1 / after['decode']:6.1f} tok/s   "
              f"ratio exact / one call {after['decode'] / before['decode']:.3f}")
        print(f"  prefill        one call {1000 * before['prefill']:6.1f} ms      exact {1000 * after['prefill']:6.1f} ms      "
              f"ratio exact / one call {after['prefill'] / before['prefill']:.3f}")
        print(f"  verify {args.draft} tokens one call {1000 * before['verify']:6.2f} ms/token exact {1000 * after['verify']:6.2f} "
              f"ms/token ratio exact / one call {after['verify'] / before['verify']:.3f}")
        print(f"  against the fixed 32-row form: plain decode ratio {after['decode'] / fixed['decode']:.3f}, "
              f"prefill {after['prefill'] / fixed['prefill']:.3f}, verify {after['verify'] / fixed['verify']:.3f}")
        print(f"  largest logit difference, one pass vs one token at a time: one call {before['gap']:.3g}, "
              f"fixed 32 {fixed['gap']:.3g}, exact {after['gap']:.3g}")
        if lm.check is not None:
            for form in lm.check.row_forms:
                print(f"    {form.describe()}")


if __name__ == "__main__":
    main()
