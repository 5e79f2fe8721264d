"""EAGLE drafts against plain decoding and the other drafts: tau and honest wall-clock ratios.

    .venv/bin/python bench/bench_eagle.py [--model smollm2-135m] [--tokens 48] [--dtypes bfloat16,int4] [--quick]

``--quick`` runs toy with its shipped head on its held-out prompts (seconds; what the tests run).
Otherwise the model's held-out prompts from its head record (prompts its training never saw).
Every configuration runs through the ``speculative`` strategy with ``measure_baseline`` on, after one
warm-up request that is not counted (once-per-process work such as the auto tree's cost curve), so each
ratio is plain target decoding of the same length over the speculative run, measured back to back
in the same request; rows are chain drafts (branching 1), static trees, a dynamic tree (temperature
0 only), the ``auto`` tree (chosen from this machine's measured pass costs), the head's draft
vocabulary at several sizes (when it stores a map), early exit and prompt lookup, for each of the
target's weights in ``--dtypes`` (every ratio is against plain decoding on the same weights). Per
row: tau (tokens per target pass, mean over prompts), the geometric mean of the wall-clock ratios,
and the break-even's parts: draft and verify ms per round and plain ms per step after the prompt (means).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, run
from playground.models import ModelStore
from strategies.speculative.eagle.head import head_dir, load_head

CONFIGS = [  # (label, params)
    ("eagle chain depth 4", {"draft": "eagle", "eagle_depth": 4, "eagle_branching": 1}),
    ("eagle chain depth 6", {"draft": "eagle", "eagle_depth": 6, "eagle_branching": 1}),
    ("eagle tree 4x2 (31 nodes)", {"draft": "eagle", "eagle_depth": 4, "eagle_branching": 2}),
    ("eagle tree 3x3 (40 nodes)", {"draft": "eagle", "eagle_depth": 3, "eagle_branching": 3}),
    ("eagle dynamic 5x3 keep 16", {"draft": "eagle", "eagle_tree": "dynamic", "eagle_depth": 5,
                                   "eagle_branching": 3, "eagle_total_tokens": 16}),
    ("eagle auto", {"draft": "eagle", "eagle_tree": "auto"}),
    ("eagle auto, full vocabulary", {"draft": "eagle", "eagle_tree": "auto", "eagle_vocab": -1}),
    ("eagle tree 4x2, vocab 8192", {"draft": "eagle", "eagle_depth": 4, "eagle_branching": 2, "eagle_vocab": 8192}),
    ("eagle tree 4x2, vocab 16384", {"draft": "eagle", "eagle_depth": 4, "eagle_branching": 2,
                                     "eagle_vocab": 16384}),
    ("eagle tree 4x2, full vocab", {"draft": "eagle", "eagle_depth": 4, "eagle_branching": 2, "eagle_vocab": -1}),
    ("early_exit g=2", {"draft": "early_exit", "gamma": 2}),
    ("prompt_lookup g=4", {"draft": "prompt_lookup", "gamma": 4}),
]


def measure(store: ModelStore, model: str, prompts: list[str], params: dict, tokens: int,
            dtype: str) -> dict[str, float]:
    """Means over ``prompts``: tau, draft / verify ms per round, plain ms per token; and the geometric
    mean of plain / speculative wall-clock."""
    taus, logs, draft, verify, plain, rounds = [], [], 0.0, 0.0, [], 0
    # a warm-up request first, not counted: what a configuration does once per process (the auto tree's
    # cost measurement, the draft rows) is not what it costs a token
    warm = run(store, Request(model, "speculative", prompts[0], {"measure_baseline": True, **params}, seed=0,
                              max_new_tokens=tokens, dtype=dtype))
    once = (warm.extra["speculative"].get("auto_tree") or {}).get("costs_seconds") or 0.0
    for prompt in prompts:
        trace = run(store, Request(model, "speculative", prompt, {"measure_baseline": True, **params}, seed=0,
                                   max_new_tokens=tokens, dtype=dtype))
        spec, speed = trace.extra["speculative"], trace.timing.extra["speculative"]
        taus.append(len(trace.tokens) / spec["verify_passes"])
        logs.append(math.log(speed["measured_speedup"]))
        per_round = trace.timing.extra["rounds"]
        draft += sum(r["draft"] for r in per_round)
        verify += sum(r["verify"] for r in per_round)
        rounds += len(per_round)
        base = speed["baseline"]
        plain.append(base["step_seconds"] or base["seconds"] / max(1, base["tokens"]))
    return {"tau": sum(taus) / len(taus), "ratio": math.exp(sum(logs) / len(logs)),
            "draft_ms": 1000 * draft / rounds, "verify_ms": 1000 * verify / rounds,
            "plain_ms": 1000 * sum(plain) / len(plain),  # a plain step after the prompt
            "once_s": once}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtypes", default="bfloat16,int4,float32",
                    help="the target's weights, comma-separated: auto, float32, bfloat16, int4")
    ap.add_argument("--temperatures", default="0,1", help="comma-separated")
    ap.add_argument("--only", default="", help="comma-separated substrings: run only rows whose label has one")
    args = ap.parse_args()
    model = "toy" if args.quick else args.model
    wanted = [w for w in args.only.split(",") if w]
    tokens = 16 if args.quick else args.tokens
    dtypes = ["float32"] if args.quick else args.dtypes.split(",")
    prompts = json.loads((head_dir(model) / "head.json").read_text())["held_out"]["prompts"]
    store = ModelStore("cpu")
    lm = store.get(model)
    mapped = load_head(lm)[0].draft_ids is not None
    for dtype in dtypes:
        try:
            store.get(model).with_weights(dtype) if dtype != "auto" else None
        except Exception as e:  # weights this CPU cannot run (int4 on a scalar kernel, a failed check)
            print(f"{model}: {dtype} skipped: {e}")
            continue
        for temperature in (float(t) for t in args.temperatures.split(",")):
            for label, params in CONFIGS:
                if wanted and not any(w in label for w in wanted):
                    continue
                if params.get("eagle_tree") == "dynamic" and temperature:
                    continue
                if "eagle_vocab" in params and not mapped:
                    continue
                m = measure(store, model, prompts, {"temperature": temperature, **params}, tokens, dtype)
                print(f"{model}: T={temperature:g} {label:30s} tau {m['tau']:.2f}  plain / speculative "
                      f"wall-clock ratio, geometric mean over {len(prompts)} prompts: {m['ratio']:.2f}x  "
                      f"({dtype}; draft {m['draft_ms']:.1f} ms + verify {m['verify_ms']:.1f} ms a round; plain "
                      f"{m['plain_ms']:.1f} ms a token"
                      + (f"; pass costs measured once in {m['once_s']:.1f} s, not counted" if m["once_s"] else "")
                      + ")", flush=True)


if __name__ == "__main__":
    main()
