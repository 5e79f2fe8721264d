"""What the logit lens costs beside a decoding step: one process, the same weights.

For each model and weights type it times, after a prompt and some decoded tokens: a plain one-token
step (the reference), the same step asking for its hidden states, the lens's read of one step's hidden
states (every layer through the final norm and the LM head, ``LM.layer_logits``, and the record,
``strategies.lens``), and the page's button (``playground.whatif.lens``: one pass over the step's
context, then the read). It prints each as a ratio to the plain step.

    .venv/bin/python bench/bench_lens.py [--models smollm2-135m,gemma3-270m] [--dtypes int4,float32]
                                         [--repeats 5] [--quick]

``--quick``: toy only, 2 repeats (what the tests run).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, run
from playground.models import ModelStore
from playground.whatif.lens import lens
from strategies.lens import lens_record

PROMPTS = {"toy": "1 2", "default": "Write a short story about a lighthouse keeper and a dragon."}


def timed(fn, repeats: int) -> float:
    """The median seconds of ``fn()`` over ``repeats`` calls, after one untimed."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


@torch.inference_mode()
def bench(store: ModelStore, model: str, dtype: str, repeats: int, tokens: int) -> None:
    trace = run(store, Request(model, "greedy", PROMPTS.get(model, PROMPTS["default"]), {}, max_new_tokens=tokens,
                               dtype=dtype)).to_dict()
    lm = store.get(model)
    if trace.get("dtype") and trace["dtype"] != lm.weights:
        lm = lm.with_weights(trace["dtype"])
    k = len(trace["tokens"]) - 1
    context = trace["prompt_ids"] + [t["id"] for t in trace["tokens"][:k]]
    ids = torch.tensor([context[:-1]], device=lm.device)
    last = torch.tensor([context[-1:]], device=lm.device)

    def step(hidden: bool):
        def go():
            out = lm.forward(last, cache, hidden=hidden)
            cache.crop(-1)  # the next call is the same step again
            return out
        return go

    cache = lm.forward(ids).cache
    plain = timed(step(False), repeats)
    with_states = timed(step(True), repeats)
    out = step(True)()
    states, own = out.hidden_states, out.logits[0, -1]
    chosen = int(trace["tokens"][k]["id"])
    # as a run reads its step: the step's own logits are the last row
    read = timed(lambda: lens_record(lm.layer_logits(states, last=own), chosen, lm.piece, spend=True), repeats)
    button = timed(lambda: lens(store, trace, k), repeats)
    print(f"{model:14s} {trace.get('dtype', dtype):8s} {lm.num_layers + 1:3d} rows, context {len(context)}: "
          f"step {plain * 1e3:7.1f} ms; with hidden states {with_states / plain:.2f}; "
          f"lens read {read * 1e3:7.1f} ms = ratio lens / step {read / plain:.2f}; "
          f"the page's button (a pass over the context + the read) {button / plain:.1f} steps")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--dtypes", default="int4,float32")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=24, help="decoded before the step read")
    ap.add_argument("--quick", action="store_true", help="toy only, 2 repeats")
    args = ap.parse_args()
    torch.set_num_threads(1)
    store = ModelStore("cpu")
    if args.quick:
        bench(store, "toy", "float32", 2, 6)
        return
    for model in args.models.split(","):
        for dtype in args.dtypes.split(","):
            bench(store, model, dtype, args.repeats, args.tokens)


if __name__ == "__main__":
    main()
