"""Beam search speed and pruning on SmolLM2-135M, CPU, one process.

1. Our traced `beam` (engine.run, whole trace built) vs transformers
   `generate(num_beams=4)` on the same prompt ids: goal at most 1.2x its time.
2. vs a per-beam loop without a KV cache that re-runs the model on the whole
   sequence for every beam at every step (the course notes' loop): goal at
   least 3x faster.
3. Pruning (Freitag & Al-Onaizan 2017) on a few prompts: the fraction of
   beam candidates it removed, the hypotheses fed to the model with and
   without it, and whether the best sequence changed.

Our runs and transformers' alternate; the ratio is given best-to-best and as
the median of the paired runs' ratios, so a busy machine slows both sides
alike. Usage: python bench/bench_beam.py [--threads N] [--repeats R] [--quick]
(``--quick``: the toy model, one repeat, seconds; what the tests run).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from playground.engine import Request, run
from playground.models import ModelStore


@dataclass(frozen=True)
class Setup:
    model: str
    beams: int
    new_tokens: int
    prompt: str
    prune_prompts: tuple[str, ...]


FULL = Setup("smollm2-135m", 4, 32, "Explain in two sentences why the sky is blue.",
             ("Explain in two sentences why the sky is blue.", "Write a short poem about autumn leaves.",
              "What is the capital of Australia?", "Give me three tips for learning to cook."))
QUICK = Setup("toy", 3, 10, "once upon", ("once upon", "upon the hill"))  # toy knows 16 words
PAPER_RULES = {"relative_threshold": 0.6, "absolute_threshold": 2.5, "local_threshold": 0.02,
               "max_candidates_per_node": 3}  # the settings Freitag & Al-Onaizan report


def ours(store: ModelStore, setup: Setup, prompt: str, params: dict) -> tuple[float, object]:
    start = time.perf_counter()
    trace = run(store, Request(model=setup.model, strategy="beam", prompt=prompt, params=params,
                               max_new_tokens=setup.new_tokens))
    return time.perf_counter() - start, trace


@torch.inference_mode()
def transformers_beam(lm, setup: Setup, ids: list[int]) -> tuple[float, list[int]]:
    start = time.perf_counter()
    out = lm.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            num_beams=setup.beams, do_sample=False, max_new_tokens=setup.new_tokens,
                            length_penalty=1.0,
                            early_stopping=False, eos_token_id=sorted(lm.eos_ids),
                            pad_token_id=lm.model.generation_config.pad_token_id)
    seconds = time.perf_counter() - start
    tokens: list[int] = []
    for t in out[0, len(ids):].tolist():  # up to the first EOS, which transformers also uses as padding
        tokens.append(t)
        if t in lm.eos_ids:
            break
    return seconds, tokens


@torch.inference_mode()
def naive_beam(lm, setup: Setup, ids: list[int]) -> tuple[float, list[int]]:
    """Per-beam loop, no cache: every beam re-runs the model on its whole sequence every step."""
    start = time.perf_counter()
    beams = [(0.0, list(ids))]
    for _ in range(setup.new_tokens):
        candidates = []
        for score, seq in beams:
            logprobs = lm.model(torch.tensor([seq])).logits[0, -1].float().log_softmax(-1)
            top = logprobs.topk(setup.beams)
            candidates += [(score + float(v), seq + [int(i)]) for v, i in zip(top.values, top.indices)]
        beams = sorted(candidates, key=lambda c: -c[0])[:setup.beams]
    return time.perf_counter() - start, beams[0][1][len(ids):]


def speed(store: ModelStore, setup: Setup, repeats: int) -> None:
    lm = store.get(setup.model)
    ids = lm.encode(setup.prompt)
    beam = {"num_beams": setup.beams}
    ours(store, setup, setup.prompt, beam)  # warm-up
    transformers_beam(lm, setup, ids[:8])
    mine, theirs, naive = [], [], []
    for _ in range(repeats):
        t, trace = ours(store, setup, setup.prompt, beam)
        mine.append(t)
        t, hf_tokens = transformers_beam(lm, setup, ids)
        theirs.append(t)
    t, naive_tokens = naive_beam(lm, setup, ids)
    naive.append(t)
    m, h, n = min(mine), min(theirs), statistics.median(naive)
    paired = statistics.median(a / b for a, b in zip(mine, theirs))
    print(f"{setup.model}, prompt: {len(ids)} tokens; {setup.beams} beams, {setup.new_tokens} new tokens; torch threads "
          f"{torch.get_num_threads()}; repeats {repeats} (naive: 1)")
    print(f"generated {len(trace.tokens)} tokens, {trace.beam['counters']['forward_passes']} forward passes, "
          f"{len(trace.beam['nodes'])} traced candidates")
    print(f"ours (traced beam, engine.run):      best {m:7.3f} s  (runs: {', '.join(f'{x:.3f}' for x in mine)})")
    print(f"transformers generate(num_beams={setup.beams}):  best {h:7.3f} s  (runs: {', '.join(f'{x:.3f}' for x in theirs)})")
    print(f"naive per-beam loop, no cache:       {n:7.3f} s")
    print(f"ours / transformers = {m / h:.3f}x best-to-best, {paired:.3f}x median of paired runs  (goal <= 1.2x)")
    print(f"naive / ours        = {n / statistics.median(mine):.2f}x against our median run  (goal >= 3x)")
    print(f"same best sequence as transformers: {trace.token_ids == hf_tokens}")
    print(f"same best sequence as the naive loop (no EOS rule there): {trace.token_ids == naive_tokens}")


def pruning(store: ModelStore, setup: Setup) -> None:
    print(f"pruning with {PAPER_RULES}")
    for prompt in setup.prune_prompts:
        t0, base = ours(store, setup, prompt, {"num_beams": setup.beams})
        t1, pruned = ours(store, setup, prompt, {"num_beams": setup.beams, **PAPER_RULES})
        c, c0 = pruned.beam["counters"], base.beam["counters"]
        removed = 1 - c["expanded"] / c["expanded_without_pruning"]
        print(f"  {prompt[:40]!r:44} removed {removed:6.1%} of beam candidates "
              f"({c['pruned']} pruned: {c['pruned_by_rule']}); rows fed {c['expanded']} vs {c0['expanded']} "
              f"unpruned; time {t1:.2f} s vs {t0:.2f} s; best changed: {pruned.token_ids != base.token_ids}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="the toy model, one repeat (seconds)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    setup = QUICK if args.quick else FULL
    store = ModelStore("cpu")
    speed(store, setup, 1 if args.quick else args.repeats)
    pruning(store, setup)


if __name__ == "__main__":
    main()
