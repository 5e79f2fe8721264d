"""``python -m playground sample`` and ``python -m playground score``: the "what if" questions.

    sample --model M --strategy S --prompt P --n N --tokens K [--json] [--one-by-one] [grammar flag] [strategy flags]
    score  --model M --text T [--prompt P] [--raw] [--json] [grammar flag]

A grammar flag (``--grammar-json``, ``--grammar-regex``, ``--grammar-choices``, ``--grammar-lark``;
playground.cli.grammar_flags): sample draws under the grammar's mask and sets the frequencies beside
both the masked reference and P(y | y valid); score says at which token the text leaves the grammar.

Bad input exits with status 2 and one line naming the value and the allowed range (``main`` in
``playground.cli`` turns InvalidRequest into that line).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from playground.cli.flags import add_model_flags, parse_with_strategy, strategy_params
from playground.cli.grammar_flags import add_grammar_flags, grammar_of_args
from playground.engine import Request
from playground.models import ModelStore
from playground.whatif.sample_many import MAX_SAMPLES, MAX_TOKENS, check_size, sample_many
from playground.whatif.score import score, summary


def _common(prog: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m playground {prog}", description=description)
    add_model_flags(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return add_grammar_flags(p)


def sample_parser() -> argparse.ArgumentParser:
    p = _common("sample", "Draw N samples (seeds s, s+1, ...) and compare their frequencies with the exact "
                          "probabilities.")
    p.add_argument("--strategy", default="sampling", help="see `python -m playground list`")
    p.add_argument("--seed", type=int, default=0, help="the first seed")
    p.add_argument("--n", type=int, default=500, help=f"samples, 1 to {MAX_SAMPLES}")
    p.add_argument("--tokens", type=int, default=8, help=f"tokens per sample (the outcome), 1 to {MAX_TOKENS}")
    p.add_argument("--one-by-one", action="store_true", help="one run per seed instead of one batched pass")
    return p


def cmd_sample(argv: Sequence[str]) -> int:
    args = parse_with_strategy(sample_parser, argv)
    check_size(args.n, args.tokens, args.seed)
    req = Request(model=args.model, strategy=args.strategy, prompt=args.prompt, params=strategy_params(args),
                  seed=args.seed, max_new_tokens=args.tokens, system=args.system,
                  chat=False if args.raw else None, grammar=grammar_of_args(args))
    result = sample_many(ModelStore(args.device), req, args.n, batched=not args.one_by_one, progress=_progress)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else sample_table(result))
    return 0


def sample_table(result: dict) -> str:
    """The outcomes as text: count, frequency, exact probability, text; then the test."""
    lines = [f"{result['n']} samples of {result['tokens']} tokens, {result['strategy']} on {result['model']}, "
             f"seeds {result['seed']}..{result['seed'] + result['n'] - 1} "
             f"({'batched' if result['batched'] else 'one run per seed'}, {result['timing']['seconds']} s)",
             f"{'count':>6} {'freq':>7} {'exact':>9}  text"]
    for o in result["outcomes"][:30]:
        exact = "-" if o["probability"] is None else f"{o['probability']:.4g}"
        lines.append(f"{o['count']:>6} {o['frequency']:>7.3f} {exact:>9}  {o['text']!r}")
    if len(result["outcomes"]) > 30:
        lines.append(f"... {len(result['outcomes']) - 30} more outcomes (--json lists them all)")
    test = result["chi_square"]
    lines.append(f"reference: {result['reference']}")
    if test:
        lines.append(f"chi-square {test['statistic']:.3f}, df {test['df']}, p = {test['p_value']:.4g}; "
                     f"total variation {result['tv_distance']:.4f}")
    if result.get("grammar"):
        lines += gap_lines(result["grammar"])
    return "\n".join(lines)


def gap_lines(gap: dict) -> list[str]:
    """Constrained is not conditioned: each valid text's frequency, masked and conditional probability."""
    if not gap["enumerated"]:
        return [gap["note"]]
    lines = ["valid texts: frequency, masked sampling's exact probability, P(y | y valid)",
             f"{'freq':>7} {'masked':>9} {'P(y|ok)':>9}  text"]
    for v in gap["valid"][:30]:
        lines.append(f"{v['frequency']:>7.3f} {v['masked']:>9.4g} {v['conditional']:>9.4g}  {v['text']!r}")
    for name in ("masked", "conditional"):
        test = gap[f"chi_square_{name}"]
        if test:
            lines.append(f"against {name}: chi-square {test['statistic']:.4g}, df {test['df']}, "
                         f"p = {test['p_value']:.4g}; total variation {gap[f'tv_{name}']:.4f}")
    return lines + [gap["meaning"]]


def score_parser() -> argparse.ArgumentParser:
    p = _common("score", "Teacher-force a text through the model: each token's probability, rank, "
                         "surprisal; the perplexity.")
    p.add_argument("--text", required=True, help="the text to score (with a chat model: the answer to --prompt)")
    return p


def cmd_score(argv: Sequence[str]) -> int:
    args = score_parser().parse_args(argv)
    trace = score(ModelStore(args.device), args.model, args.text, args.prompt, args.system,
                  False if args.raw else None, progress=_progress, grammar=grammar_of_args(args))
    result = summary(trace)
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else score_table(result))
    return 0


def score_table(result: dict) -> str:
    lines = [f"{'prob':>9} {'rank':>6} {'bits':>7}  token  (greedy)"]
    for t in result["tokens"]:
        if t["prob"] is None:
            lines.append(f"{'-':>9} {'-':>6} {'-':>7}  {t['text']!r}  (context)")
        else:
            lines.append(f"{t['prob']:>9.4g} {t['rank']:>6} {t['surprisal']:>7.3f}  {t['text']!r}  ({t['greedy']!r})")
    lines.append(f"perplexity {result['perplexity']:.4g}, total log-probability {result['total_logprob']:.4g} "
                 f"({result['mode']})")
    g = result.get("grammar")
    if g:
        lines.append(f"the text leaves the grammar at token {g['leaves_at']} ({g['token']!r}): {g['message']}"
                     if g["leaves_at"] is not None else
                     f"the text stays in the grammar{' and is a whole valid text' if g['whole'] else ' (not yet whole)'}")
    return "\n".join(lines)


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {"sample": cmd_sample, "score": cmd_score}
