"""Greedy draft-and-verify against plain greedy, prompt by prompt: does each draft write greedy's text?

Lossless speculative decoding at temperature 0 writes exactly plain greedy's text whenever scoring
several tokens in one pass gives the logits of one token at a time (``one_pass_gap`` 0; see
playground.models.fast.check). This sweep is the end-to-end side of that claim: for each weights type,
every prompt, every draft, it compares the token ids and prints where a text parts.

    python -m playground.tools.same_text --model smollm2-135m --weights float32,bfloat16,int4
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 python -m playground.tools.same_text ...   # AVX2 kernels

``--quick``: 2 prompts x 20 tokens, every weights type and draft (under a minute on SmolLM2; the
capability sweep runs it on every kernel tier: tests/models/test_cpu_capabilities.py).

It prints one line per weights type: ``<model> <weights>: differing texts 0 of 60 (early_exit 0, ...)``,
and exits with status 1 if any text differs.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from playground.engine import Request, run
from playground.models import ModelStore
from playground.models.cpu import torch_capability

PROMPTS = ["Explain in one sentence why the sky is blue.", "Name three colours of the rainbow.",
           "Write a haiku about autumn.", "What is the capital of France?", "List five fruits.",
           "Tell me a short story about a dragon.", "How do plants make food?", "Give two tips for learning to code.",
           "What is 12 times 7?", "Describe the ocean in three words.", "Why do cats purr?",
           "Summarise the plot of Cinderella.", "What is a prime number?", "Write a limerick about a frog.",
           "How does rain form?", "Name the planets of the solar system.", "What is photosynthesis?",
           "Translate 'good morning' into Spanish.", "Explain gravity to a child.", "What makes a good friend?"]
TOY_PROMPTS = ["1 2", "once upon", "upon the hill", "a time there"]
DRAFTS = {"early_exit": {"draft": "early_exit"}, "prompt_lookup": {"draft": "prompt_lookup"},
          "eagle": {"draft": "eagle"}, "toy-small": {"draft": "toy-small"}}


def parted_at(a: list[int], b: list[int]) -> int:
    """The first position where two token lists differ (the shorter length if one is a prefix)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def sweep(store, model: str, weights: str, prompts: list[str], tokens: int, drafts: list[str],
          out=sys.stdout) -> dict[str, int]:
    """Differing texts per draft for one weights type; each difference is printed as it is found."""
    differing = {d: 0 for d in drafts}
    for prompt in prompts:
        greedy = run(store, Request(model, "greedy", prompt, max_new_tokens=tokens, dtype=weights)).token_ids
        for draft in drafts:
            params = {**DRAFTS[draft], "gamma": 4, "temperature": 0, "measure_baseline": False}
            spec = run(store, Request(model, "speculative", prompt, params, max_new_tokens=tokens,
                                      dtype=weights)).token_ids
            if spec != greedy:
                differing[draft] += 1
                print(f"  {weights} {draft} {prompt!r}: parts from greedy at token {parted_at(spec, greedy)}",
                      file=out, flush=True)
    return differing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--weights", default="float32,bfloat16,int4", help="comma-separated: float32, bfloat16, int4")
    ap.add_argument("--prompts", type=int, default=20, help=f"how many of the {len(PROMPTS)} prompts")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--drafts", default="", help="comma-separated (default: early_exit, prompt_lookup, and eagle "
                                                 "where the model has a head; toy-small for toy)")
    ap.add_argument("--quick", action="store_true", help="2 prompts x 20 tokens")
    args = ap.parse_args(argv)
    if args.quick:
        args.prompts, args.tokens = min(args.prompts, 2), min(args.tokens, 20)
    torch.set_num_threads(1)
    toy = args.model.startswith("toy")
    if args.drafts:
        drafts = args.drafts.split(",")
    else:
        drafts = ["early_exit", "prompt_lookup", "toy-small"] if toy else \
            ["early_exit", "prompt_lookup"] + (["eagle"] if args.model == "smollm2-135m" else [])
    unknown = [d for d in drafts if d not in DRAFTS]
    if unknown:
        ap.error(f"unknown draft {unknown[0]!r}: one of {', '.join(DRAFTS)}")
    prompts = (TOY_PROMPTS if toy else PROMPTS)[:args.prompts]
    store, failed = ModelStore("cpu"), False
    print(f"{args.model}: {len(prompts)} prompts x {args.tokens} tokens, drafts {', '.join(drafts)}, "
          f"torch CPU capability {torch_capability()}", flush=True)
    for weights in args.weights.split(","):
        started = time.perf_counter()
        differing = sweep(store, args.model, weights, prompts, args.tokens, drafts)
        total = sum(differing.values())
        failed |= total > 0
        print(f"{args.model} {weights}: differing texts {total} of {len(prompts) * len(drafts)} "
              f"({', '.join(f'{d} {n}' for d, n in differing.items())}); "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        check = store.get(args.model).with_weights(weights).check
        for form in check.row_forms if check is not None else ():
            print(f"  {form.describe()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
