"""``python -m playground run|list|sample|score``: the same engine as the UI, text or JSON out.

Strategy flags are derived from the chosen strategy's Params dataclass: each
field ``top_p`` becomes ``--top-p``. Bad input exits with status 2 and one
line naming the value and the allowed range.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Sequence

from playground.models.dtypes import DTYPES
from playground.models import DEFAULT_MODEL, MAX_NEW_TOKENS, OFFLINE, ModelStore
from playground.errors import InvalidRequest
from strategies.forcing import parse_force
from strategies.params import describe, field_kind
from strategies.registry import all_strategies, get_strategy


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def base_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground run", description="Decode once and print the result.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"offline: {', '.join(OFFLINE)}; or a hub id")
    p.add_argument("--strategy", default="greedy", help="see `python -m playground list`")
    p.add_argument("--prompt", required=True, help="prompt text; for toy also token numbers like '1 2'")
    p.add_argument("--system", default="", help="system prompt (chat models)")
    p.add_argument("--raw", action="store_true", help="plain completion: no chat template")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=32, help=f"1 to {MAX_NEW_TOKENS}")
    p.add_argument("--top-n", type=int, default=20, help="candidates recorded per step")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop decoding after this many seconds, keeping the trace so far (default: no limit)")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--dtype", default="auto",
                   help=f"weights: {', '.join(DTYPES)} (int4: the GGUF file's own blocks through the int4 "
                        "kernel, SmolLM2 and Gemma 3 on the CPU; auto: int4 where it runs, else bfloat16, on "
                        "CPUs with native bfloat16; the dtype loaded on GPUs; float32 elsewhere and for toy models)")
    p.add_argument("--json", action="store_true", help="print the whole trace as JSON")
    p.add_argument("--html", metavar="FILE", help="write the per-step distribution chart as HTML")
    p.add_argument("--png", metavar="FILE", help="write the per-step distribution chart as PNG (kaleido)")
    p.add_argument("--step", type=int, default=0, help="which step the chart shows")
    p.add_argument("--force", action="append", default=[], metavar="STEP:TOKEN",
                   help="take TOKEN at step STEP (0 = the first new token) instead of the strategy's choice; "
                        "TOKEN is an id or text that is one token; repeatable")
    return p


def strategy_parser(strategy: str, base: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """``base`` (default: the run parser) plus one flag per parameter of ``strategy``."""
    p = base or base_parser()
    group = p.add_argument_group(f"{strategy} parameters")
    for f in dataclasses.fields(get_strategy(strategy).params):
        meta = f.metadata
        group.add_argument(_flag(f.name), dest=f"param_{f.name}", type=str, default=None,
                           help=f"{meta.get('help', '')} Default {f.default!r}. {_range(meta, field_kind(f))}")
    return p


def strategy_params(args: argparse.Namespace) -> dict[str, str]:
    return {k[len("param_"):]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}


def _range(meta: dict[str, Any], kind: type) -> str:
    from strategies.params import range_text
    return range_text(meta).capitalize() + "." if (meta.get("choices") or kind in (int, float)) else ""


def cmd_list() -> int:
    print("models:")
    for key, spec in OFFLINE.items():
        print(f"  {key:14s} {spec.title}{'  (default)' if key == DEFAULT_MODEL else ''}")
    print("  <hub id>       any causal LM on the Hugging Face hub, where the network allows")
    print("strategies:")
    for s in all_strategies():
        print(f"  {s.name:16s} {s.summary}")
        for d in describe(s.params):
            print(f"      {_flag(d['name']):24s} {d['type']:5s} default {d['default']!r:10} {d['range']}")
    return 0


def cmd_run(argv: Sequence[str]) -> int:
    from playground.serving.budget import Budget
    from playground.engine import Request, run

    known, _ = base_parser().parse_known_args(argv)
    get_strategy(known.strategy)
    args = strategy_parser(known.strategy).parse_args(argv)
    params = strategy_params(args)
    req = Request(model=args.model, strategy=args.strategy, prompt=args.prompt, params=params, seed=args.seed,
                  max_new_tokens=args.max_new_tokens, system=args.system, chat=False if args.raw else None,
                  top_n=args.top_n, forced=parse_force(args.force), dtype=args.dtype)
    budget = Budget(seconds=args.time_budget)
    store = ModelStore(args.device)
    trace = run(store, req, progress=lambda f, m: print(f"[{f:4.0%}] {m}", file=sys.stderr), budget=budget)
    data = trace.to_dict()
    if args.html or args.png:
        _write_chart(data, args)
    print(trace.to_json(indent=2) if args.json else trace.text)
    return 0


def _write_chart(data: dict[str, Any], args: argparse.Namespace) -> None:
    from playground.charts.figures import distribution_figure

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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m playground {run,list,sample,score} [options]   (run --help for the options)")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    from playground.cli.whatif import COMMANDS as WHATIF
    try:
        if command == "list":
            return cmd_list()
        if command == "run":
            return cmd_run(rest)
        if command in WHATIF:
            return WHATIF[command](rest)
        print(f"error: command must be run, list, sample or score, got {command!r}", file=sys.stderr)
        return 2
    except InvalidRequest as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
