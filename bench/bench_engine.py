"""Traced decoding vs transformers generate(), same model, prompt and token count, one process.

Prints the time ratio traced / generate for greedy and for sampling (goal: <= 1.10),
tokens/s per model, and cold (GGUF dequantisation) and warm (converted cache) start times.

    .venv/bin/python bench/bench_engine.py [--tokens 64] [--repeats 3] [--skip-cold] [--quick]

``--quick`` measures the toy model only, warm, one repeat (seconds; what the tests run).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground import models
from playground.engine import Request, run

PROMPT = "Write a long, detailed story about a dragon who learns to bake bread."
TOY_PROMPT = "once upon"  # toy knows 16 words and 64 positions


def hf_time(lm, prompt_ids, n, sample):
    ids = torch.tensor([prompt_ids])
    kw = dict(do_sample=True, temperature=0.9, top_p=0.95, top_k=0) if sample else dict(do_sample=False)
    start = time.perf_counter()
    out = lm.model.generate(ids, max_new_tokens=n, min_new_tokens=n, pad_token_id=0, **kw)
    return time.perf_counter() - start, out.shape[1] - ids.shape[1]


def ours_time(store, key, prompt, n, sample):
    params = {"temperature": 0.9, "top_p": 0.95} if sample else {}
    req = Request(key, "sampling" if sample else "greedy", prompt, params, seed=0, max_new_tokens=n)
    start = time.perf_counter()
    trace = run(store, req)
    return time.perf_counter() - start, len(trace.tokens), trace


def compare(store, key, prompt, n, repeats):
    lm = store.get(key)
    prompt_ids = lm.encode(prompt)
    for sample in (False, True):
        hf, ours = [], []
        ours_time(store, key, prompt, 4, sample)  # warm-up
        for _ in range(repeats):
            t, k = hf_time(lm, prompt_ids, n, sample)
            hf.append(t / k)
            t, k, _ = ours_time(store, key, prompt, n, sample)
            ours.append(t / k)
        h, o = statistics.median(hf), statistics.median(ours)
        name = "sampling" if sample else "greedy"
        print(f"{key:14s} {name:9s} generate {1 / h:6.2f} tok/s   traced {1 / o:6.2f} tok/s   "
              f"ratio traced/generate {o / h:5.3f}")


def start_times(key):
    with tempfile.TemporaryDirectory() as tmp:
        old = models.os.environ.get("PLAYGROUND_CACHE")
        models.os.environ["PLAYGROUND_CACHE"] = tmp
        try:
            cold = models.ModelStore("cpu").get(key).load_seconds
            warm = models.ModelStore("cpu").get(key).load_seconds
        finally:
            if old is None:
                models.os.environ.pop("PLAYGROUND_CACHE")
            else:
                models.os.environ["PLAYGROUND_CACHE"] = old
    print(f"{key:14s} start: cold {cold:6.1f} s (GGUF dequantisation)   warm {warm:5.2f} s (converted cache)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-cold", action="store_true")
    ap.add_argument("--quick", action="store_true", help="toy only, 16 tokens, one repeat, no cold start")
    args = ap.parse_args()
    store = models.ModelStore("cpu")
    if args.quick:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, 16 new tokens, one run")
        compare(store, "toy", TOY_PROMPT, 16, 1)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.tokens} new tokens, "
          f"median of {args.repeats}")
    compare(store, "smollm2-135m", PROMPT, args.tokens, args.repeats)
    compare(store, "gemma3-270m", PROMPT, args.tokens // 2, max(1, args.repeats - 1))
    if not args.skip_cold:
        for key in ("smollm2-135m", "gemma3-270m"):
            start_times(key)


if __name__ == "__main__":
    main()
