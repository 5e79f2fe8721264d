"""``python -m playground run`` and ``list``: the same engine as the UI, text or JSON out.

Bad input exits with status 2 and one line naming the value and the allowed range (``main`` in
``playground.cli`` turns InvalidRequest into that line).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from playground.charts.distribution import distribution_figure
from playground.charts.phases import phase_line
from playground.cli.engine_flags import add_engine_flags, params_for, say, start_of, strategy_of
from playground.cli.flags import base_parser, flag, strategy_params, strategy_parser
from playground.cli.grammar_flags import grammar_of_args
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models import DEFAULT_MODEL, OFFLINE, ModelStore
from playground.serving.budget import Budget
from playground.whatif.lens import lens
from strategies.forcing import parse_force
from strategies.loops import LOOP_REASON
from strategies.params import describe
from strategies.registry import all_strategies, get_strategy


def cmd_list() -> int:
    print("models:")
    for key, spec in OFFLINE.items():
        print(f"  {key:14s} {spec.title}{'  (default)' if key == DEFAULT_MODEL else ''}")
    print("  <hub id>       any causal LM on the Hugging Face hub, where the network allows")
    print("strategies:")
    for s in all_strategies():
        print(f"  {s.name:16s} {s.summary}")
        for d in describe(s.params):
            print(f"      {flag(d['name']):24s} {d['type']:5s} default {d['default']!r:10} {d['range']}")
    return 0


def cmd_run(argv: Sequence[str]) -> int:
    known, _ = add_engine_flags(base_parser()).parse_known_args(argv)
    start = start_of(known)
    strategy = strategy_of(argv, known, start)
    get_strategy(strategy)
    args = strategy_parser(strategy, add_engine_flags(base_parser())).parse_args(argv)
    params = params_for(strategy, start, strategy_params(args))
    say(start.notes)
    seed = start.run_value(argv, "--seed", args.seed, start.seed)
    limit = start.run_value(argv, "--max-new-tokens", args.max_new_tokens, start.max_new_tokens)
    req = Request(model=args.model, strategy=strategy, prompt=args.prompt, params=params,
                  seed=args.seed if seed is None else seed, max_new_tokens=args.max_new_tokens if limit is None else limit,
                  system=args.system, chat=False if args.raw else None, top_n=args.top_n,
                  forced=parse_force(args.force), dtype=args.dtype, grammar=grammar_of_args(args) or start.grammar,
                  lens=tuple(args.lens))
    budget = Budget(seconds=args.time_budget)
    store = ModelStore(args.device)
    trace = run(store, req, progress=lambda f, m: print(f"[{f:4.0%}] {m}", file=sys.stderr), budget=budget)
    data = trace.to_dict()
    # greedy, sampling and gumbel read the layers of the steps asked for as they decode them; for the
    # other strategies, and a step past a run's end, the what-if reads them after (or says why not)
    read = {r["step"] for r in data.get("lens") or ()}
    missing = [step for step in dict.fromkeys(args.lens) if step not in read]
    if missing:
        data["lens"] = [*(data.get("lens") or ()), *(lens(store, data, step) for step in missing)]
    if args.html or args.png:
        _write_chart(data, args)
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else trace.text)
    if not args.json:
        for line in [phase_line(data), *loop_lines(data)]:
            if line:
                print(line)
        for record in data.get("lens") or ():
            print(lens_table(record))
    return 0


def loop_lines(trace: dict[str, Any]) -> list[str]:
    """One line per loop the run recorded (strategies/loops.py), and why the run ended when a loop ended it."""
    lines = []
    for loop in trace.get("loops") or []:
        tokens = "token" if loop["period"] == 1 else "tokens"
        lines.append(f"[loop] {loop['period']} {tokens} x {loop['repeats']} from step {loop['start']} "
                     f"(found at step {loop['found_at']}): {loop['text']!r}")
    if trace.get("finish_reason") == LOOP_REASON:
        lines.append(f"[loop] the run stopped at step {len(trace['tokens']) - 1}: loop_stop")
    return lines


def lens_table(record: dict[str, Any]) -> str:
    """The logit lens of one step as text: per layer its own top token and the chosen token's rank."""
    chosen, first = record["chosen"]["text"], record["first_top_layer"]
    where = "no layer ranks it first" if first is None else f"it first tops layer {first}"
    lines = [f"\nlogit lens at step {record['step']}: {chosen!r}, {where}",
             f"{'layer':>6}  {'top token':<18} {'p':>8}  {'rank of chosen':>14} {'p':>8}"]
    for row in record["rows"]:
        top = row["top"][0]
        lines.append(f"{row['layer']:>6}  {top['text']!r:<18} {top['prob']:>8.3g}  {row['chosen_rank']:>14,} "
                     f"{row['chosen_prob'] or 0.0:>8.3g}")
    return "\n".join(lines)


def _write_chart(data: dict[str, Any], args: argparse.Namespace) -> None:
    if not 0 <= args.step < len(data["steps"]):
        raise InvalidRequest(f"step must be in [0, {len(data['steps']) - 1}], got {args.step}")
    fig = distribution_figure(data, args.step)
    if args.html:
        fig.write_html(args.html, include_plotlyjs="cdn")
    if args.png:
        try:
            fig.write_image(args.png, width=1100, height=550, scale=2)
        except Exception as err:  # kaleido reports a missing Chromium in several ways
            raise InvalidRequest(f"PNG export needs kaleido and a Chromium browser: {err}") from None
