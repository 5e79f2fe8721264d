"""The command line's flags: the run flags, and one flag per parameter of a strategy's Params
(each field ``top_p`` becomes ``--top-p``)."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable, Mapping, Sequence

from playground.cli.grammar_flags import add_grammar_flags
from playground.models import DEFAULT_MODEL, MAX_NEW_TOKENS, OFFLINE
from playground.models.dtypes import DEFAULT_DTYPE, DTYPES
from strategies.params import field_kind, range_text
from strategies.registry import get_strategy


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_model_flags(p: argparse.ArgumentParser, strategy: str | None = None) -> argparse.ArgumentParser:
    """The flags every model subcommand shares: the model, the prompt as it reads it, the device; with
    ``strategy`` (its default), --strategy and --dtype too."""
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"offline: {', '.join(OFFLINE)}; or a hub id")
    if strategy is not None:
        p.add_argument("--strategy", default=strategy, help="see `python -m playground list`")
    p.add_argument("--prompt", default="", help="prompt text; for toy also token numbers like '1 2'")
    p.add_argument("--system", default="", help="system prompt (chat models)")
    p.add_argument("--raw", action="store_true", help="plain completion: no chat template")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    if strategy is not None:
        p.add_argument("--dtype", default="auto", help="weights, as for run")
    return p


def parse_with_strategy(make_parser: Callable[[], argparse.ArgumentParser], argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` read by ``make_parser()`` plus the flags of the strategy it names (refused where unknown)."""
    known, _ = make_parser().parse_known_args(argv)
    get_strategy(known.strategy)
    return strategy_parser(known.strategy, make_parser()).parse_args(argv)


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
    p.add_argument("--dtype", default=DEFAULT_DTYPE,
                   help=f"weights: {', '.join(DTYPES)} (int4: the GGUF file's own blocks through the int4 "
                        "kernel, SmolLM2 and Gemma 3 on the CPU; auto: int4 on AVX2 and AVX-512 kernels, else "
                        "bfloat16 on CPUs with native bfloat16, else float32, each only where it passes its check "
                        "against float32; the dtype loaded on GPUs; float32 for toy models)")
    p.add_argument("--json", action="store_true", help="print the whole trace as JSON")
    p.add_argument("--html", metavar="FILE", help="write the per-step distribution chart as HTML")
    p.add_argument("--png", metavar="FILE", help="write the per-step distribution chart as PNG (kaleido)")
    p.add_argument("--step", type=int, default=0, help="which step the chart shows")
    p.add_argument("--lens", type=int, action="append", default=[], metavar="STEP",
                   help="read every layer at step STEP (the logit lens: each hidden state through the final norm "
                        "and the LM head): a table after the text, and the record in the JSON's lens; repeatable")
    p.add_argument("--force", action="append", default=[], metavar="STEP:TOKEN",
                   help="take TOKEN at step STEP (0 = the first new token) instead of the strategy's choice; "
                        "TOKEN is an id or text that is one token; repeatable")
    return add_grammar_flags(p)


def strategy_parser(strategy: str, base: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """``base`` (default: the run parser) plus one flag per parameter of ``strategy``."""
    p = base or base_parser()
    group = p.add_argument_group(f"{strategy} parameters")
    for f in dataclasses.fields(get_strategy(strategy).params):
        meta = f.metadata
        group.add_argument(flag(f.name), dest=f"param_{f.name}", type=str, default=None,
                           help=f"{meta.get('help', '')} Default {f.default!r}. {range_help(meta, field_kind(f))}")
    return p


def strategy_params(args: argparse.Namespace) -> dict[str, str]:
    return {k[len("param_"):]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}


def range_help(meta: Mapping[str, Any], kind: type) -> str:
    return range_text(meta).capitalize() + "." if (meta.get("choices") or kind in (int, float)) else ""
