"""``python -m playground diff``: two models, or one model in two weights types, reading one text in
lockstep (playground/whatif/lockstep.py).

    diff --model-a M [--dtype-a float32] [--model-b M2] [--dtype-b int4] (--text T | --generate N)
         [--prompt P] [--raw] [--html FILE] [--json]

``--generate N``: the text is model A's greedy continuation of the prompt, N tokens (the run's own
output). Model B defaults to model A (then the weights types should differ). Bad input exits with
status 2 and one line naming the value and the allowed range.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from playground.charts.lockstep import lockstep_figure
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models import DEFAULT_MODEL, MAX_NEW_TOKENS, OFFLINE, ModelStore
from playground.models.dtypes import DTYPES
from playground.whatif.lockstep import TOP_K, lockstep


def diff_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground diff",
                                description="Two models (or two weights types) read one text in lockstep: "
                                            "per step KL both ways, total variation, top-K overlap, argmax.")
    p.add_argument("--model-a", default=DEFAULT_MODEL, help=f"offline: {', '.join(OFFLINE)}; or a hub id")
    p.add_argument("--model-b", default=None, help="default: model A")
    p.add_argument("--dtype-a", default="float32", help=f"weights of A: {', '.join(DTYPES)}")
    p.add_argument("--dtype-b", default="float32", help=f"weights of B: {', '.join(DTYPES)}")
    text = p.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="the text both read (with a chat model: the answer to --prompt)")
    text.add_argument("--generate", type=int, metavar="N", help="the text is model A's greedy continuation, N tokens")
    p.add_argument("--prompt", default="", help="prompt text; for toy also token numbers like '1 2'")
    p.add_argument("--system", default="", help="system prompt (chat models)")
    p.add_argument("--raw", action="store_true", help="plain completion: no chat template")
    p.add_argument("--top-k", type=int, default=TOP_K, help="K of the top-K overlap, 1 to 100")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--html", metavar="FILE", help="write the lockstep chart as HTML")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    return p


def cmd_diff(argv: Sequence[str]) -> int:
    args = diff_parser().parse_args(argv)
    store = ModelStore(args.device)
    chat = False if args.raw else None
    text = args.text
    if args.generate is not None:
        if not 1 <= args.generate <= MAX_NEW_TOKENS:
            raise InvalidRequest(f"generate must be in [1, {MAX_NEW_TOKENS}], got {args.generate}")
        trace = run(store, Request(model=args.model_a, strategy="greedy", prompt=args.prompt, params={},
                                   max_new_tokens=args.generate, system=args.system, chat=chat, dtype=args.dtype_a),
                    progress=_progress)
        text = trace.text
    record = lockstep(store, text, args.model_a, args.model_b or args.model_a, args.dtype_a, args.dtype_b,
                      args.prompt, args.system, chat, args.top_k, progress=_progress)
    if args.html:
        lockstep_figure(record).write_html(args.html, include_plotlyjs="cdn")
    print(json.dumps(record, indent=2, ensure_ascii=False) if args.json else diff_table(record))
    return 0


def diff_table(record: dict[str, Any]) -> str:
    """The summary and every step as text."""
    s, a, b = record["summary"], record["a"], record["b"]
    lines = [f"A {a['model']} ({a['dtype']}) against B {b['model']} ({b['dtype']}), {s['tokens']} tokens "
             f"({record['mode']})",
             f"KL(A||B) mean {s['mean_kl_ab']:.4g} max {s['max_kl_ab']:.4g} nats; KL(B||A) mean {s['mean_kl_ba']:.4g} "
             f"max {s['max_kl_ba']:.4g}; total variation mean {s['mean_tv']:.4g} max {s['max_tv']:.4g}; "
             f"top-{s['top_k']} overlap {s['mean_overlap']:.3f}; argmax agrees {s['agreement']:.1%}",
             f"largest KL(A||B) at steps {', '.join(str(t) for t in s['largest'])}",
             f"{'step':>4} {'KL(A||B)':>9} {'KL(B||A)':>9} {'TV':>7} {'agree':>5}  token  (argmax A / B)"]
    for st in record["steps"]:
        lines.append(f"{st['step']:>4} {st['kl_ab']:>9.3g} {st['kl_ba']:>9.3g} {st['tv']:>7.3f} "
                     f"{'yes' if st['agree'] else 'NO':>5}  {st['text']!r}  "
                     f"({st['argmax_a']['text']!r} / {st['argmax_b']['text']!r})")
    return "\n".join(lines)


def _progress(fraction: float, message: str) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr)
