"""``python -m playground sweep``: one parameter over a grid, N samples at each value, the measures as a table.

    sweep --model M --strategy S --prompt P --param NAME (--values 0.2,0.5,1 | --grid lin:0.1:1.5:8) --n N
          --tokens K [--extract SPEC] [--expected A]... [--json] [strategy flags]

Each row is one value: loop rate, distinct-1/2/3, mean surprisal and entropy of the chosen tokens (nats),
mean length, the share agreeing with the modal answer and, with ``--expected``, the accuracy
(playground/whatif/sweep_metrics.py). Ctrl-C stops the sweep and prints the values done.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from playground.cli.flags import add_model_flags, parse_with_strategy, strategy_params
from playground.engine import Request
from playground.errors import InvalidRequest
from playground.models import ModelStore
from playground.whatif.grid import MAX_POINTS, parse_values
from playground.whatif.sample_many import MAX_TOKENS
from playground.whatif.sweep import sweep


def sweep_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground sweep",
                                description="Sweep one parameter: N samples at each value, measured.")
    add_model_flags(p, strategy="sampling")
    p.add_argument("--param", required=True, help="the numeric parameter to sweep (temperature, top_k, num_beams, gamma, ...)")
    p.add_argument("--values", default=None, help="values separated by commas, e.g. 0.2,0.5,1")
    p.add_argument("--grid", default=None, help=f"lin:LOW:HIGH:COUNT or log:LOW:HIGH:COUNT (COUNT <= {MAX_POINTS})")
    p.add_argument("--n", type=int, default=8, help="samples per value")
    p.add_argument("--seed", type=int, default=0, help="the first seed (the same seeds at every value)")
    p.add_argument("--tokens", type=int, default=16, help=f"tokens per sample, 1 to {MAX_TOKENS}")
    p.add_argument("--extract", default=None, help="answer extractor: last_number, regex:P, json:FIELD, choices:A|B")
    p.add_argument("--expected", action="append", default=[], help="an accepted answer (repeatable): adds accuracy")
    p.add_argument("--json", action="store_true", help="print the sweep record as JSON (with every sample)")
    return p


def cmd_sweep(argv: Sequence[str]) -> int:
    args = parse_with_strategy(sweep_parser, argv)
    if (args.values is None) == (args.grid is None):
        raise InvalidRequest("give the values either as --values or as --grid, exactly one of them")
    values = parse_values(args.values if args.values is not None else args.grid)
    req = Request(model=args.model, strategy=args.strategy, prompt=args.prompt, params=strategy_params(args),
                  seed=args.seed, max_new_tokens=args.tokens, system=args.system,
                  chat=False if args.raw else None, dtype=args.dtype)
    interrupted: list[bool] = []
    store = ModelStore(args.device)
    try:
        result = sweep(store, req, args.param, values, args.n, args.extract, args.expected,
                       keep_samples=args.json, progress=print_progress, stop=lambda: bool(interrupted))
    except KeyboardInterrupt:
        print("interrupted before the first value finished", file=sys.stderr)
        return 130
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else sweep_table(result))
    return 0


def _cell(x: float | None, width: int, digits: int = 3) -> str:
    return f"{'-':>{width}}" if x is None else f"{x:>{width}.{digits}f}"


def sweep_table(result: dict) -> str:
    """One line per value: the measures of sweep_metrics.py."""
    accuracy = bool(result["expected"])
    width = max(12, len(result["param"]))
    lines = [f"{result['param']} sweep: {result['strategy']} on {result['model']}, {result['n']} samples of "
             f"{result['tokens']} tokens per value, seeds {result['seed']}..{result['seed'] + result['n'] - 1} "
             f"({'batched rows' if result['batched'] else 'one run per seed'}; loops: "
             f"{result['loop_repeats']} repeats of >= {result['loop_min_span']} tokens; {result['timing']['seconds']} s)",
             f"{result['param']:>{width}} {'loops':>6} {'dist1':>6} {'dist2':>6} {'dist3':>6} {'surpr':>6} {'entropy':>7} "
             f"{'length':>6} {'modal':>6}" + (f" {'acc':>6}" if accuracy else "") + "  modal answer"]
    for p in result["points"]:
        lines.append(f"{p['value']:>{width}.4g} {_cell(p['loop_rate'], 6, 2)} {_cell(p['distinct_1'], 6)} "
                     f"{_cell(p['distinct_2'], 6)} {_cell(p['distinct_3'], 6)} {_cell(p['surprisal'], 6)} "
                     f"{_cell(p['entropy'], 7)} {_cell(p['length'], 6, 1)} {_cell(p['modal_share'], 6, 2)}"
                     + (f" {_cell(p.get('accuracy'), 6, 2)}" if accuracy else "")
                     + f"  {str(p['modal_answer'])[:40]!r}")
    if result["stopped"]:
        lines.append(f"stopped after {len(result['points'])} of {len(result['values'])} values")
    return "\n".join(lines)


def print_progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)
