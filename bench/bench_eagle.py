"""EAGLE drafts against plain decoding and the other drafts: tau and honest wall-clock ratios.

    .venv/bin/python bench/bench_eagle.py [--model smollm2-135m] [--tokens 48] [--dtype float32] [--quick]

``--quick`` runs toy with its shipped head on its held-out prompts (seconds; what the tests run).
Otherwise the model's held-out prompts from its head record (prompts its training never saw).
Every configuration runs through the ``speculative`` strategy with ``measure_baseline`` on, so each
ratio is plain target decoding of the same length over the speculative run, measured back to back
in the same request; rows are chain drafts (branching 1), static trees, a dynamic tree (temperature
0 only), early exit and prompt lookup. Per row: tau (tokens per target pass, mean over prompts) and
the geometric mean of the wall-clock ratios.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, run  # noqa: E402
from playground.models import ModelStore  # noqa: E402
from strategies.speculative.eagle.head import head_dir  # noqa: E402

CONFIGS = [  # (label, params)
    ("eagle chain depth 4", {"draft": "eagle", "eagle_depth": 4, "eagle_branching": 1}),
    ("eagle chain depth 6", {"draft": "eagle", "eagle_depth": 6, "eagle_branching": 1}),
    ("eagle tree 4x2 (31 nodes)", {"draft": "eagle", "eagle_depth": 4, "eagle_branching": 2}),
    ("eagle tree 3x3 (40 nodes)", {"draft": "eagle", "eagle_depth": 3, "eagle_branching": 3}),
    ("eagle dynamic 5x3 keep 16", {"draft": "eagle", "eagle_tree": "dynamic", "eagle_depth": 5,
                                   "eagle_branching": 3, "eagle_total_tokens": 16}),
    ("early_exit g=2", {"draft": "early_exit", "gamma": 2}),
    ("prompt_lookup g=4", {"draft": "prompt_lookup", "gamma": 4}),
]


def measure(store: ModelStore, model: str, prompts: list[str], params: dict, tokens: int,
            dtype: str = "float32") -> tuple[float, float]:
    """(mean tau, geometric mean of plain / speculative wall-clock) over ``prompts``."""
    taus, logs = [], []
    for prompt in prompts:
        trace = run(store, Request(model, "speculative", prompt, {"measure_baseline": True, **params}, seed=0,
                                   max_new_tokens=tokens, dtype=dtype))
        taus.append(len(trace.tokens) / trace.extra["speculative"]["verify_passes"])
        logs.append(math.log(trace.timing.extra["speculative"]["measured_speedup"]))
    return sum(taus) / len(taus), math.exp(sum(logs) / len(logs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtype", default="float32", help="the target's weights: auto, float32, bfloat16 or int4")
    args = ap.parse_args()
    model = "toy" if args.quick else args.model
    tokens = 16 if args.quick else args.tokens
    prompts = json.loads((head_dir(model) / "head.json").read_text())["held_out"]["prompts"]
    store = ModelStore("cpu")
    store.get(model)
    for temperature in (0.0, 1.0):
        for label, params in CONFIGS:
            if params.get("eagle_tree") == "dynamic" and temperature:
                continue
            tau, ratio = measure(store, model, prompts, {"temperature": temperature, **params}, tokens, args.dtype)
            print(f"{model}: T={temperature:g} {label:28s} tau {tau:.2f}  plain / speculative wall-clock ratio, "
                  f"geometric mean over {len(prompts)} prompts: {ratio:.2f}x", flush=True)


if __name__ == "__main__":
    main()
