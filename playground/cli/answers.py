"""``python -m playground answers``: N samples of one prompt, an answer from each, and every rule's pick.

    answers --model M --prompt P --n N --tokens K --extract SPEC [--verify SPEC] [--expected A]...
            [--branches K] [--window W] [--eta PCT] [--json] [strategy flags]

Prints each sample's answer, then each rule's pick with the votes behind it (majority, highest mean
logprob, DeepConf, CoT-decoding on its own branches, the verifier with ``--verify``), where the rules
disagree and, with ``--expected``, each rule's accuracy at 1, 2, 4, ... samples with its interval
(playground/whatif/answers.py).
"""
from __future__ import annotations

import argparse
import json
from typing import Sequence

from playground.cli.flags import add_model_flags, parse_with_strategy, strategy_params
from playground.cli.sweep import print_progress
from playground.engine import Request
from playground.models import ModelStore
from playground.whatif.answers import DEFAULT_BRANCHES, RuleSettings, answers
from playground.whatif.rules import DEFAULT_ETA, DEFAULT_WINDOW
from playground.whatif.sample_many import MAX_SAMPLES, MAX_TOKENS


def answers_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground answers",
                                description="N samples, an answer from each, and every answer rule's pick.")
    add_model_flags(p, strategy="sampling")
    p.add_argument("--n", type=int, default=8, help=f"samples, 1 to {MAX_SAMPLES}")
    p.add_argument("--seed", type=int, default=0, help="the first seed")
    p.add_argument("--tokens", type=int, default=32, help=f"tokens per sample, 1 to {MAX_TOKENS}")
    p.add_argument("--extract", default="last_number", help="last_number, regex:P, json:FIELD or choices:A|B")
    p.add_argument("--verify", default=None, help="exact:VALUE, regex:P or json:SCHEMA: adds the verifier rule")
    p.add_argument("--expected", action="append", default=[], help="an accepted answer (repeatable): adds accuracy")
    p.add_argument("--branches", type=int, default=DEFAULT_BRANCHES, help="CoT-decoding's k (0: no branches)")
    p.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="DeepConf's group window, in tokens")
    p.add_argument("--eta", type=float, default=DEFAULT_ETA, help="DeepConf's filter: the top ETA percent kept")
    p.add_argument("--aggregate", action="store_true", help="CoT-decoding picks by the summed margin per answer")
    p.add_argument("--resamples", type=int, default=200, help="subsets per size for the accuracy curve")
    p.add_argument("--json", action="store_true", help="print the whole record as JSON")
    return p


def cmd_answers(argv: Sequence[str]) -> int:
    args = parse_with_strategy(answers_parser, argv)
    req = Request(model=args.model, strategy=args.strategy, prompt=args.prompt, params=strategy_params(args),
                  seed=args.seed, max_new_tokens=args.tokens, system=args.system,
                  chat=False if args.raw else None, dtype=args.dtype)
    settings = RuleSettings(args.window, args.eta, aggregate=args.aggregate)
    result = answers(ModelStore(args.device), req, args.n, args.extract, args.verify, args.expected, args.branches,
                     settings, args.resamples, progress=print_progress)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else answers_table(result))
    return 0


def answers_table(result: dict) -> str:
    lines = [f"{result['n']} samples of {result['tokens']} tokens, {result['strategy']} on {result['model']}, "
             f"answers by {result['extract']}"]
    for s in result["samples"]:
        lines.append(f"  seed {s['seed']:>5}  {str(s['answer'])[:24]!r:>26}  {s['text'][:70]!r}")
    for b in result["branches"]:
        lines.append(f"  branch {b['seed']:>3}  {str(b['answer'])[:24]!r:>26}  {b['text'][:70]!r}")
    lines.append(f"{'rule':>14}  pick  (votes)")
    for p in result["picks"]:
        votes = ", ".join(f"{a[:16]!r}: {v:.3g}" for a, v in sorted(p["votes"].items(), key=lambda kv: -kv[1])[:5])
        lines.append(f"{p['rule']:>14}  {str(p['answer'])!r}  ({votes})")
    d = result["disagreements"]
    lines.append("the rules agree" if d["agree"] else
                 "the rules disagree: " + "; ".join(f"{a!r} by {', '.join(r)}" for a, r in d["answers"].items()))
    for rule, curve in result.get("accuracy", {}).items():
        shown = [pt for pt in curve if pt["n"] & (pt["n"] - 1) == 0 or pt["n"] == curve[-1]["n"]]
        lines.append(f"{rule:>14}  accuracy " + "  ".join(
            f"N={pt['n']}: {pt['accuracy']:.2f} [{pt['low']:.2f}, {pt['high']:.2f}]" for pt in shown))
    return "\n".join(lines)
