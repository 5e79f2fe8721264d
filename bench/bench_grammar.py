"""The grammar stage's cost on SmolLM2: the time of a decoding step with the stage against the same
run without it, greedy and sampling (goal: the stage adds under 5% to a step), and the one-off set-up.

Per step: (run seconds - prefill seconds) / tokens, the median over interleaved repeats (plain,
grammar, plain, grammar, ...), so a load change on a shared machine hits both sides. The grammar is
a regular expression that allows nearly every token at every step (the widest mask, the most work
for the matcher and the mask) and a JSON schema. Also the stage alone: ``decide`` (mask, Z) plus
``advance`` along the grammar run's own tokens, in milliseconds and as a share of a plain step.

One-off set-up: importing llguidance.torch, and llguidance's view of the tokenizer (the first
compile against a model; later compiles reuse it) against a later compile of the same grammar.

    .venv/bin/python bench/bench_grammar.py [--quick] [--tokens 48] [--repeats 5] [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, run
from playground.models import ModelStore
from strategies.sampling.grammar import Grammar, GrammarSpec, compile_grammar

MODEL = "smollm2-135m"
PROMPT = "Write a long, detailed story about a dragon who learns to bake bread."
GRAMMARS = {
    "regex": {"kind": "regex", "text": r"[^\x00]{1,4000}"},  # any text: nearly every token allowed
    "json": {"kind": "json", "text": json.dumps({
        "type": "object", "properties": {"title": {"type": "string"}, "story": {"type": "string"}},
        "required": ["title", "story"], "additionalProperties": False})},
}
GOAL = 0.05


def per_step(trace) -> float:
    return (trace.timing.seconds - trace.timing.extra["prefill_seconds"]) / max(len(trace.tokens), 1)


def run_once(store, strategy: str, tokens: int, grammar: dict | None):
    params = {"temperature": 0.9, "top_p": 0.95} if strategy == "sampling" else {}
    return run(store, Request(MODEL, strategy, PROMPT, params, seed=0, max_new_tokens=tokens, grammar=grammar))


def stage_alone(lm, grammar: dict, trace, repeats: int) -> float:
    """Milliseconds per step of the stage by itself (decide + advance), on the run's own logits."""
    compiled = compile_grammar(GrammarSpec.from_dict(grammar), lm)
    ids = torch.tensor([list(trace.prompt_ids) + trace.token_ids])
    with torch.inference_mode():
        logits = lm.forward(ids).logits[0, len(trace.prompt_ids) - 1:-1]
    best = float("inf")
    for _ in range(repeats):
        stage = Grammar(compiled)
        start = time.perf_counter()
        for row, token in zip(logits, trace.token_ids):
            stage.decide(row[None], ids[:, :0])
            if stage.stopped():
                break
            stage.advance([0], [token])
        best = min(best, (time.perf_counter() - start) / len(trace.token_ids))
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="6 tokens, 2 repeats, the regex grammar only")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared machine)")
    args = ap.parse_args()
    tokens, repeats = (6, 2) if args.quick else (args.tokens, args.repeats)
    grammars = {"regex": GRAMMARS["regex"]} if args.quick else GRAMMARS
    torch.set_num_threads(args.threads)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, torch threads {args.threads}")

    start = time.perf_counter()
    import llguidance.torch  # noqa: F401  (torch.compile's import inside it is most of this)
    import_seconds = time.perf_counter() - start
    store = ModelStore("cpu")
    lm = store.get(MODEL)
    spec = GrammarSpec.from_dict(GRAMMARS["json"])
    start = time.perf_counter()
    compile_grammar(spec, lm)
    first = time.perf_counter() - start
    start = time.perf_counter()
    compile_grammar(spec, lm)
    again = time.perf_counter() - start
    print(f"one-off set-up: import llguidance.torch {import_seconds:.2f} s; first compile against {MODEL} "
          f"{first:.2f} s (the tokenizer's set-up {first - again:.2f} s), a later compile {again * 1000:.1f} ms")

    for strategy in ("greedy", "sampling"):
        run_once(store, strategy, 2, None)  # warm-up
        for name, grammar in grammars.items():
            run_once(store, strategy, 2, grammar)
            plain, constrained, last = [], [], None
            for _ in range(repeats):
                plain.append(per_step(run_once(store, strategy, tokens, None)))
                last = run_once(store, strategy, tokens, grammar)
                constrained.append(per_step(last))
            p, g = statistics.median(plain), statistics.median(constrained)
            alone = stage_alone(lm, grammar, last, repeats)
            print(f"{strategy:8s} {name:5s}: plain {p * 1000:6.2f} ms/step, with the grammar {g * 1000:6.2f} ms/step "
                  f"({len(last.tokens)} tokens, {last.finish_reason}); grammar / plain per-step ratio {g / p:.3f} "
                  f"(goal <= {1 + GOAL:.2f}); the stage alone {alone:.2f} ms/step = {alone / (p * 1000):.1%} of a step")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
