"""Sample many on SmolLM2: N samples of K tokens as rows of one batched pass, against transformers
generate() drawing the same N sequences in one batch, and against one run per seed.

Prints seconds for each, the ratios, the goal (500 samples of 8 tokens in at most 20 s), how many
replayed seeds wrote another text than their batched row (batched floating point), and the load.

    .venv/bin/python bench/bench_sample_many.py [--quick] [--n 500] [--tokens 8] [--replays 10] [--threads 1]
        [--dtype auto] [--skip-generate]

``--dtype``: the weights' dtype, ``auto`` as the page and the CLI use it (bfloat16 on a CPU with
native bf16); the replayed single runs use the same dtype.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, in_dtype, run
from playground.models import ModelStore
from playground.whatif.sample_many import sample_many

PROMPT = "Write a haiku about the sea."
GOAL_SECONDS = 20.0


def generate_seconds(lm, prompt_ids: list[int], n: int, tokens: int) -> float:
    ids = torch.tensor([prompt_ids])
    start = time.perf_counter()
    lm.model.generate(ids, do_sample=True, top_k=0, max_new_tokens=tokens, min_new_tokens=tokens,
                      num_return_sequences=n, pad_token_id=0)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="100 samples, 3 replays")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--replays", type=int, default=10, help="seeds replayed as single runs")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: on a shared 2-core machine, "
                    "OpenMP threads waiting for each other made 2 threads 8x slower here)")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "int4"])
    ap.add_argument("--skip-generate", action="store_true", help="no transformers generate() reference")
    args = ap.parse_args()
    n, replays = (100, 3) if args.quick else (args.n, args.replays)
    torch.set_num_threads(args.threads)
    store = ModelStore("cpu")
    lm = in_dtype(store.get("smollm2-135m"), args.dtype)  # generate() runs lm.model: for int4, its bfloat16 copy
    req = Request("smollm2-135m", "sampling", PROMPT, {}, seed=0, max_new_tokens=args.tokens, dtype=args.dtype)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, torch threads {args.threads}, "
          f"dtype {args.dtype}")
    sample_many(store, req, 4)  # warm-up
    result = sample_many(store, req, n)
    batched = result["timing"]["sampling_seconds"]
    print(f"sample many: {n} samples of {args.tokens} tokens in {batched:.2f} s sampling, "
          f"{result['timing']['seconds']:.2f} s with the exact enumeration "
          f"({len(result['outcomes'])} outcomes; goal for 500 x 8: <= {GOAL_SECONDS:.0f} s)")
    if not args.skip_generate:
        gen = generate_seconds(lm, lm.encode(PROMPT), n, args.tokens)
        print(f"transformers generate, {n} sequences in one batch: {gen:.2f} s; ratio sample many / generate "
              f"{batched / gen:.3f}")
    by_seed = {s: o["ids"] for o in result["outcomes"] for s in o["seeds"]}
    start, changed = time.perf_counter(), 0
    for seed in range(replays):
        trace = run(store, Request("smollm2-135m", "sampling", PROMPT, {}, seed=seed, max_new_tokens=args.tokens,
                                   dtype=args.dtype))
        changed += trace.token_ids != by_seed[seed]
    single = (time.perf_counter() - start) / replays
    print(f"one run per seed: {single:.3f} s per sample, {single * n:.1f} s for {n} (extrapolated); "
          f"ratio sample many / one by one {batched / (single * n):.3f}")
    print(f"replayed seeds that wrote another text than their batched row: {changed} of {replays}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
