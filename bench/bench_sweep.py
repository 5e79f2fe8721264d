"""The sweep's cost against N separate runs: one parameter over V values with N samples each, drawn as
sample many's batched rows (playground/whatif/sweep.py), against the same V x N samples as one engine run
per seed, in the same process and on the same model.

Prints the seconds of each, the ratio sweep / separate runs, how many of the replayed runs wrote another
text than their batched row (batched floating point; 0 expected on toy), and the load.

    .venv/bin/python bench/bench_sweep.py [--quick] [--model smollm2-135m] [--n 16] [--tokens 16]
        [--values 0.3,0.7,1.0,1.5] [--threads 1]

``--quick``: toy, 4 temperatures x 16 samples of 8 tokens (a few seconds).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, run
from playground.models import ModelStore
from playground.whatif.grid import parse_values
from playground.whatif.sweep import sweep

PROMPTS = {"toy": "1 2", "smollm2-135m": "Write a haiku about the sea.", "gemma3-270m": "Once upon a time"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="toy, 4 temperatures x 16 samples of 8 tokens")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--values", default="0.3,0.7,1.0,1.5", help="temperatures")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared machine)")
    args = ap.parse_args()
    model, n, tokens = ("toy", 16, 8) if args.quick else (args.model, args.n, args.tokens)
    values = parse_values(args.values)
    torch.set_num_threads(args.threads)
    store = ModelStore("cpu")
    req = Request(model, "sampling", PROMPTS.get(model, "Hello"), {}, seed=0, max_new_tokens=tokens)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, torch threads {args.threads}")
    sweep(store, req, "temperature", values[:1], 2, keep_samples=False)  # warm-up: load, first pass
    start = time.perf_counter()
    result = sweep(store, req, "temperature", values, n)
    swept = time.perf_counter() - start
    start, changed = time.perf_counter(), 0
    for point in result["points"]:
        for sample in point["samples"]:
            trace = run(store, Request(model, "sampling", req.prompt, {"temperature": point["value"]},
                                       seed=sample["seed"], max_new_tokens=tokens))
            changed += trace.token_ids != sample["ids"]
    separate = time.perf_counter() - start
    total = n * len(values)
    print(f"{model}: sweep of {len(values)} temperatures x {n} samples of {tokens} tokens: {swept:.2f} s; "
          f"{total} separate runs: {separate:.2f} s; ratio sweep / separate runs {swept / separate:.3f}")
    print(f"separate runs that wrote another text than their batched row: {changed} of {total}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
