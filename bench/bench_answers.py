"""Accuracy of each answer rule at N = 1, 4, 16 samples on the question set (assets/questions.json).

For each model and question: 16 recorded samples (sampling, seeds 0..15) and 16 CoT-decoding branches;
each rule's accuracy on the question at N is the share of resampled subsets of N of the 16 samples whose
pick is right (playground/whatif/answers.py: rule_accuracy; CoT-decoding: its first N branches). The
figure per rule is the mean over the questions, with a 95% bootstrap interval over the questions (2000
resamples of the question set, percentiles), so it counts which questions were asked. The verifier is
given the expected answer (``exact:``), so its figure is pass@N: the ceiling a perfect checker reaches.

    .venv/bin/python bench/bench_answers.py [--models smollm2-135m,gemma3-270m] [--tokens 16]
        [--temperature 0.7] [--limit 40] [--every 1] [--threads 1] [--quick]

``--quick``: the toy's task only, N = 1 and 4.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request
from playground.models import ModelStore
from playground.whatif.answers import RuleSettings, rule_accuracy
from playground.whatif.cot_decoding import cot_branches
from playground.whatif.extractors import make_extractor
from playground.whatif.questions import Question, load_questions, toy_task
from playground.whatif.sample_records import draw_records
from playground.whatif.verifiers import make_verifier

RULES = ("majority", "mean_logprob", "deepconf", "cot_decoding", "verifier")


def bootstrap(values: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(rounds))
    return means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1]


def question_accuracy(store: ModelStore, model: str, q: Question, sizes: list[int], tokens: int,
                      temperature: float) -> dict[str, list[float]]:
    req = Request(model, "sampling", q.prompt, {"temperature": temperature}, seed=0, max_new_tokens=tokens,
                  dtype="auto")
    n = max(sizes)
    samples = draw_records(store, req, n).samples
    branches = cot_branches(store, req, n)
    extract = make_extractor(q.extract)
    got, branch_got = [extract(s.text) for s in samples], [extract(b.text) for b in branches]
    passes = make_verifier("exact:" + q.expected[0])
    out = {}
    for rule in RULES:
        pool, answers = (branches, branch_got) if rule == "cot_decoding" else (samples, got)
        curve = rule_accuracy(rule, pool, answers, q.expected, RuleSettings(), passes, resamples=100, sizes=sizes)
        out[rule] = [p["accuracy"] for p in curve]
    out["sample_share"] = [sum(rule_accuracy("majority", samples[i:i + 1], got[i:i + 1], q.expected, RuleSettings(),
                                             sizes=[1])[0]["accuracy"] for i in range(n)) / n]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--limit", type=int, default=40, help="the first LIMIT questions")
    ap.add_argument("--every", type=int, default=1, help="every EVERY-th question of those (2: half of each kind)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="the toy's task only, N = 1 and 4")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    store = ModelStore("cpu")
    if args.quick:
        task = toy_task()
        models = ["toy"]
        questions = [Question("toy", "toy", task["prompt"], task["extract"], tuple(task["expected"]))]
        sizes, tokens = [1, 4], task["tokens"]
    else:
        models, questions, sizes, tokens = args.models.split(","), load_questions()[:args.limit:args.every], [1, 4, 16], args.tokens
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {len(questions)} questions, "
          f"sampling at temperature {args.temperature}, {tokens} tokens")
    for model in models:
        start = time.perf_counter()
        per_q = []
        for i, q in enumerate(questions):
            per_q.append(question_accuracy(store, model, q, sizes, tokens, args.temperature))
            print(f"  {model} {q.id}: " + "  ".join(f"{r} {per_q[-1][r][-1]:.2f}" for r in RULES)
                  + f"  (single samples right {per_q[-1]['sample_share'][0]:.2f})", flush=True)
        print(f"{model}: {time.perf_counter() - start:.0f} s; accuracy (mean over questions [95% bootstrap interval])")
        for rule in RULES:
            cells = []
            for j, n in enumerate(sizes):
                values = [a[rule][j] for a in per_q]
                low, high = bootstrap(values)
                cells.append(f"N={n}: {sum(values) / len(values):.3f} [{low:.3f}, {high:.3f}]")
            print(f"  {rule:>13}  " + "   ".join(cells))
        sometimes = sum(0 < a["sample_share"][0] < 1 for a in per_q)
        print(f"  questions answered right by some samples and wrong by others: {sometimes} of {len(per_q)}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
