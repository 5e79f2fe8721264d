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
alike. Usage: python bench/bench_beam.py [--threads N] [--repeats R]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from playground.engine import Request, run  # noqa: E402
from playground.models import ModelStore  # noqa: E402

MODEL = "smollm2-135m"
BEAMS, NEW_TOKENS = 4, 32
PROMPT = "Explain in two sentences why the sky is blue."
PRUNE_PROMPTS = [PROMPT, "Write a short poem about autumn leaves.", "What is the capital of Australia?",
                 "Give me three tips for learning to cook."]
PAPER_RULES = {"relative_threshold": 0.6, "absolute_threshold": 2.5, "local_threshold": 0.02,
               "max_candidates_per_node": 3}  # the settings Freitag & Al-Onaizan report


def ours(store: ModelStore, prompt: str, params: dict) -> tuple[float, object]:
    start = time.perf_counter()
    trace = run(store, Request(model=MODEL, strategy="beam", prompt=prompt, params=params,
                               max_new_tokens=NEW_TOKENS))
    return time.perf_counter() - start, trace


@torch.inference_mode()
def transformers_beam(lm, ids: list[int]) -> tuple[float, list[int]]:
    start = time.perf_counter()
    out = lm.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                            num_beams=BEAMS, do_sample=False, max_new_tokens=NEW_TOKENS, length_penalty=1.0,
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
def naive_beam(lm, ids: list[int]) -> tuple[float, list[int]]:
    """Per-beam loop, no cache: every beam re-runs the model on its whole sequence every step."""
    start = time.perf_counter()
    beams = [(0.0, list(ids))]
    for _ in range(NEW_TOKENS):
        candidates = []
        for score, seq in beams:
            logprobs = lm.model(torch.tensor([seq])).logits[0, -1].float().log_softmax(-1)
            top = logprobs.topk(BEAMS)
            candidates += [(score + float(v), seq + [int(i)]) for v, i in zip(top.values, top.indices)]
        beams = sorted(candidates, key=lambda c: -c[0])[:BEAMS]
    return time.perf_counter() - start, beams[0][1][len(ids):]


def speed(store: ModelStore, repeats: int) -> None:
    lm = store.get(MODEL)
    ids = lm.encode(PROMPT)
    ours(store, "Hi", {"num_beams": BEAMS})  # warm-up
    transformers_beam(lm, ids[:8])
    mine, theirs, naive = [], [], []
    for _ in range(repeats):
        t, trace = ours(store, PROMPT, {"num_beams": BEAMS})
        mine.append(t)
        t, hf_tokens = transformers_beam(lm, ids)
        theirs.append(t)
    t, naive_tokens = naive_beam(lm, ids)
    naive.append(t)
    m, h, n = min(mine), min(theirs), statistics.median(naive)
    paired = statistics.median(a / b for a, b in zip(mine, theirs))
    print(f"prompt: {len(ids)} tokens; {BEAMS} beams, {NEW_TOKENS} new tokens; torch threads "
          f"{torch.get_num_threads()}; repeats {repeats} (naive: 1)")
    print(f"generated {len(trace.tokens)} tokens, {trace.beam['counters']['forward_passes']} forward passes, "
          f"{len(trace.beam['nodes'])} traced candidates")
    print(f"ours (traced beam, engine.run):      best {m:7.3f} s  (runs: {', '.join(f'{x:.3f}' for x in mine)})")
    print(f"transformers generate(num_beams=4):  best {h:7.3f} s  (runs: {', '.join(f'{x:.3f}' for x in theirs)})")
    print(f"naive per-beam loop, no cache:       {n:7.3f} s")
    print(f"ours / transformers = {m / h:.3f}x best-to-best, {paired:.3f}x median of paired runs  (goal <= 1.2x)")
    print(f"naive / ours        = {n / statistics.median(mine):.2f}x against our median run  (goal >= 3x)")
    print(f"same best sequence as transformers: {trace.token_ids == hf_tokens}")
    print(f"same best sequence as the naive loop (no EOS rule there): {trace.token_ids == naive_tokens}")


def pruning(store: ModelStore) -> None:
    print(f"pruning with {PAPER_RULES}")
    for prompt in PRUNE_PROMPTS:
        t0, base = ours(store, prompt, {"num_beams": BEAMS})
        t1, pruned = ours(store, prompt, {"num_beams": BEAMS, **PAPER_RULES})
        c, c0 = pruned.beam["counters"], base.beam["counters"]
        removed = 1 - c["expanded"] / c["expanded_without_pruning"]
        print(f"  {prompt[:40]!r:44} removed {removed:6.1%} of beam candidates "
              f"({c['pruned']} pruned: {c['pruned_by_rule']}); rows fed {c['expanded']} vs {c0['expanded']} "
              f"unpruned; time {t1:.2f} s vs {t0:.2f} s; best changed: {pruned.token_ids != base.token_ids}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    store = ModelStore("cpu")
    speed(store, args.repeats)
    pruning(store)


if __name__ == "__main__":
    main()
