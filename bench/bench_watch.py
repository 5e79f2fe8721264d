"""The watch-list's cost on SmolLM2: the time of a decoding step with eight watched tokens against the same
run without them, greedy and sampling, in one process (goal: the watch-list adds under 2% to a step).

Per step: (run seconds - prefill seconds) / tokens, the median over interleaved repeats (plain, watched,
plain, watched, ...), so a load change on a shared machine hits both sides. Also the record alone: the
gathers and comparison counts of one step (``watch_record``) on SmolLM2's vocabulary, in milliseconds.

    .venv/bin/python bench/bench_watch.py [--quick] [--tokens 48] [--repeats 5] [--threads 1] [--dtype auto]

``--quick`` measures the toy model, 6 tokens, 2 repeats (seconds; what the tests run).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, run
from playground.models import ModelStore
from strategies.watch import watch_ids, watch_record

MODELS = {"smollm2-135m": ("Write a long, detailed story about a dragon who learns to bake bread.",
                           "the, dragon, bread, ., Paris, zebra, 42, oven"),
          "toy": ("1 2", "the, a, once, time, there, lived, happily, ever")}
GOAL = 0.02


def per_step(trace) -> float:
    return (trace.timing.seconds - trace.timing.extra["prefill_seconds"]) / max(len(trace.tokens), 1)


def run_once(store, model: str, strategy: str, tokens: int, watch: str, dtype: str = "auto"):
    prompt = MODELS[model][0]
    params = {"temperature": 0.9, "top_p": 0.95} if strategy == "sampling" else {}
    return run(store, Request(model, strategy, prompt, {**params, "watch": watch}, seed=0, max_new_tokens=tokens,
                              dtype=dtype))


def record_alone(lm, watch: str, repeats: int) -> float:
    """Milliseconds of one step's watch record (both distributions), on random logits of the vocabulary."""
    at = torch.tensor(watch_ids(lm, watch))
    raw = torch.randn(lm.vocab_size).log_softmax(-1).exp()
    final = (torch.randn(lm.vocab_size) * 2).log_softmax(-1).exp()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(100):
            watch_record(raw, final, at)
        best = min(best, (time.perf_counter() - start) / 100)
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="toy, 6 tokens, 2 repeats")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared machine)")
    ap.add_argument("--dtype", default="auto", help="the weights (auto: the page's, int4 where it runs)")
    args = ap.parse_args()
    model = "toy" if args.quick else "smollm2-135m"
    tokens, repeats = (6, 2) if args.quick else (args.tokens, args.repeats)
    torch.set_num_threads(args.threads)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, torch threads {args.threads}")
    store = ModelStore("cpu")
    watch = MODELS[model][1]
    for strategy in ("greedy", "sampling"):
        run_once(store, model, strategy, 2, "", args.dtype)  # warm-up
        run_once(store, model, strategy, 2, watch, args.dtype)
        plain, watched, last = [], [], None
        for _ in range(repeats):
            plain.append(per_step(run_once(store, model, strategy, tokens, "", args.dtype)))
            last = run_once(store, model, strategy, tokens, watch, args.dtype)
            watched.append(per_step(last))
        p, w = statistics.median(plain), statistics.median(watched)
        alone = record_alone(store.get(model), watch, repeats)
        assert last is not None
        print(f"{model} {last.extra.get('dtype', args.dtype)} {strategy:8s}: plain {p * 1000:6.2f} ms/step, watching {len(last.extra['watch'])} tokens "
              f"{w * 1000:6.2f} ms/step ({len(last.tokens)} tokens); watch / plain per-step ratio {w / p:.3f} "
              f"(goal <= {1 + GOAL:.2f}); the record alone {alone:.3f} ms/step = {alone / (p * 1000):.1%} of a step")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
