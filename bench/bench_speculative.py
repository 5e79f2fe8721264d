"""Speculative decoding on SmolLM2-135M (CPU): acceptance, tokens per pass, and honest wall-clock.

    .venv/bin/python bench/bench_speculative.py [--tokens 24] [--quick] [--threads 1] [--dtype float32]

``--quick`` runs only the toy / toy-small pair, a few seeds (seconds; what the tests run).

For three fixed prompts (a chat answer, a summary of a pasted paragraph, a
code edit) at temperature 0 and 1, each configuration runs through the
``speculative`` strategy with ``measure_baseline`` on, so every speedup is the
ratio of two runs made back to back in the same request: plain target
decoding of the same length over speculative decoding (prefill included in
both). The draft kinds: early exit at a few depths and prompt lookup; the
smaller-model kind is measured on toy / toy-small (no smaller offline SmolLM2).

Each row prints alpha (accepted / checked drafts), tau (tokens per target
pass), c (draft cost per token in target steps), v (measured cost of one
verification pass of gamma+1 tokens, in target steps), Leviathan's expected
speedup (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), the same with the
verification pass at its measured cost v instead of 1, and the measured one.
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
from strategies.speculative.speedup import break_even_alpha, expected_speedup

PARAGRAPH = (
    "The Great Barrier Reef is the world's largest coral reef system, composed of over 2,900 individual reefs "
    "and 900 islands stretching for over 2,300 kilometres over an area of approximately 344,400 square "
    "kilometres. The reef is located in the Coral Sea, off the coast of Queensland, Australia. It can be seen "
    "from outer space and is the world's biggest single structure made by living organisms. The reef is "
    "threatened by climate change, which causes mass coral bleaching, by pollution, and by outbreaks of the "
    "crown-of-thorns starfish, which eats coral polyps.")
CODE = ("def mean(values):\n    total = 0\n    for value in values:\n        total = total + value\n"
        "    return total / len(values)\n\n\ndef variance(values):\n    m = mean(values)\n    total = 0\n"
        "    for value in values:\n        total = total + (value - m) ** 2\n    return total / len(values)\n")
PROMPTS = {
    "chat": "What are three simple tips for staying focused while studying?",
    "summary": f"Summarize this paragraph in two sentences.\n\n{PARAGRAPH}",
    "code": f"Add type hints and a one-line docstring to each function. Return the full code.\n\n{CODE}",
}
CONFIGS = [  # (label, params)
    ("early_exit L=4 g=2", {"draft": "early_exit", "draft_layer": 4, "gamma": 2}),
    ("early_exit L=12 g=2", {"draft": "early_exit", "draft_layer": 12, "gamma": 2}),
    ("prompt_lookup g=2", {"draft": "prompt_lookup", "gamma": 2}),
    ("prompt_lookup g=4", {"draft": "prompt_lookup", "gamma": 4}),
    ("prompt_lookup g=4 adaptive", {"draft": "prompt_lookup", "gamma": 4, "adaptive_gamma": True}),
]


def fmt(x: float | None, digits: int = 2) -> str:
    return "   -" if x is None else f"{x:.{digits}f}"


def measure(store: ModelStore, model: str, prompt: str, params: dict, tokens: int, seed: int = 0,
            dtype: str = "float32") -> dict:
    """The run's counts and its wall-clock figures (which the trace keeps under timing), in one dict."""
    trace = run(store, Request(model, "speculative", prompt, {"measure_baseline": True, **params}, seed=seed,
                               max_new_tokens=tokens, dtype=dtype)).to_dict()
    return {**trace["speculative"], **trace["timing"]["speculative"]}


def expectations(s: dict, gamma: int) -> tuple[float | None, float | None, float | None]:
    """(v, Leviathan's expected speedup, the same with the measured verification cost)."""
    alpha, c = s["alpha"], s["c"]
    v = (s.get("verify_cost") or {}).get(str(gamma + 1))
    if alpha is None or c is None:
        return v, None, None
    return v, expected_speedup(alpha, gamma, c), (expected_speedup(alpha, gamma, c, v) if v else None)


def smollm2(store: ModelStore, tokens: int, dtype: str) -> list[tuple[str, float]]:
    threads = torch.get_num_threads()
    print(f"SmolLM2-135M, CPU ({threads} thread{'s' if threads > 1 else ''}), {tokens} new tokens per run; "
          f"ratios are plain / speculative wall-clock measured back to back in one request\n")
    print(f"{'prompt':8} {'T':>2} {'config':26} {'alpha':>6} {'tau':>5} {'c':>5} {'v':>5} "
          f"{'E[lev]':>6} {'E[v]':>6} {'measured':>8}")
    results: dict[str, list[float]] = {}
    costs: dict[str, list[tuple[float, float]]] = {}
    for name, prompt in PROMPTS.items():
        for temperature in (0.0, 1.0):
            for label, params in CONFIGS:
                s = measure(store, "smollm2-135m", prompt, {**params, "temperature": temperature}, tokens,
                            dtype=dtype)
                v, lev, with_v = expectations(s, params["gamma"])
                results.setdefault(label, []).append(s["measured_speedup"])
                if s["c"] is not None and v is not None:
                    costs.setdefault(label, []).append((s["c"], v))
                print(f"{name:8} {temperature:>2.0f} {label:26} {fmt(s['alpha']):>6} {fmt(s['tau']):>5} "
                      f"{fmt(s['c']):>5} {fmt(v):>5} {fmt(lev):>6} {fmt(with_v):>6} "
                      f"{fmt(s['measured_speedup']):>8}", flush=True)
    summary = sorted(((statistics.geometric_mean(v), k) for k, v in results.items()), reverse=True)
    print("\ngeometric mean of the measured speedup over the prompt x temperature runs, and the alpha at which")
    print("Leviathan's formula breaks even with the median measured c and v of that configuration:")
    for mean, label in summary:
        gamma = dict(CONFIGS)[label]["gamma"]
        pairs = costs.get(label, [])
        if pairs:
            c, v = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
            even = f"c={c:.2f} v={v:.2f} -> alpha >= {break_even_alpha(gamma, c, v):.2f} to win"
        else:
            even = "no verification of gamma + 1 tokens measured"
        print(f"  {label:26} {mean:.3f}   {even}")
    return [(label, mean) for mean, label in summary]


def toy_pair(store: ModelStore, seeds: int) -> None:
    """The smaller-model kind: toy-small drafting for toy, averaged over seeds (toy texts are short)."""
    print(f"\ntoy target, toy-small draft (the smaller-model kind), {seeds} seeds each; measured = plain / "
          f"speculative wall-clock ratio, geometric mean:")
    print(f"{'T':>3} {'gamma':>5} {'alpha':>6} {'tau':>5} {'c':>5} {'measured':>8}")
    speedups = []
    for temperature in (0.0, 1.0):
        for gamma in (2, 4):
            rows = [measure(store, "toy", "1 2", {"draft": "toy-small", "gamma": gamma,
                                                  "temperature": temperature}, 7, seed) for seed in range(seeds)]
            acc, ev = sum(r["accepted"] for r in rows), sum(r["evaluated"] for r in rows)
            tau = statistics.mean(r["tau"] for r in rows)
            c = statistics.median(r["c"] for r in rows)
            sp = statistics.geometric_mean([r["measured_speedup"] for r in rows])
            print(f"{temperature:>3.0f} {gamma:>5} {acc / ev:>6.3f} {tau:>5.2f} {c:>5.2f} {sp:>8.3f}", flush=True)
            speedups.append(sp)
    print(f"toy: plain / speculative wall-clock ratio, geometric mean over {len(speedups)} configurations: "
          f"{statistics.geometric_mean(speedups):.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--quick", action="store_true", help="the toy pair only, 3 seeds (seconds)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads; 1 keeps timings stable on a CPU shared with other jobs")
    ap.add_argument("--dtype", default="float32", help="SmolLM2's weights: auto, float32, bfloat16 or int4")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    store = ModelStore("cpu")
    if args.quick:
        toy_pair(store, seeds=3)
        print(f"\nbench took {time.perf_counter() - started:.1f} s")
        return
    store.get("smollm2-135m")
    best = smollm2(store, args.tokens, args.dtype)
    toy_pair(store, seeds=20)
    label, mean = best[0]
    print(f"\nbest on SmolLM2 here: {label} ({mean:.3f}x geometric mean); bench took "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
