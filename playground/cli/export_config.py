"""``python -m playground export-config --engine ENGINE``: a run's settings as an engine's config.

    export-config --engine llama-server --strategy sampling --temperature 0.7 --min-p 0.05   (run's flags)
    export-config --engine all --trace run.json                                              (a trace JSON)

ENGINE is one of llama-server, llama-cli, vllm, vllm-json, transformers, ollama, openai, or all. The config goes
to stdout; what the engine cannot express goes to stderr as ``cannot express:`` lines (with ``all``, each
config is followed by its own lines, as comments or a JSON list). ``--preset`` and ``--import`` work as on run;
``--facts`` prints the engines' facts (defaults, stages, orders, differences) with their sources.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from playground.cli.engine_flags import add_engine_flags, params_for, say, start_of, strategy_of
from playground.cli.flags import base_parser, strategy_params, strategy_parser
from playground.cli.grammar_flags import grammar_of_args
from playground.engines.facts import facts_text
from playground.engines.formats import FORMATS, export, export_all, with_gaps
from playground.engines.settings import RunSettings, settings_for, settings_of_trace
from playground.errors import InvalidRequest

ENGINE_CHOICES = (*FORMATS, "all")


def export_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground export-config", add_help=False)
    p.add_argument("--engine", default="all", help=f"one of {', '.join(ENGINE_CHOICES)} (default all)")
    p.add_argument("--trace", default=None, metavar="FILE", help="a trace JSON (run --json) instead of run flags")
    p.add_argument("--facts", action="store_true", help="print the engines' facts with their sources, and stop")
    return p


def run_parser() -> argparse.ArgumentParser:
    """The run's flags, with the prompt optional (an engine config holds none)."""
    p = add_engine_flags(base_parser())
    for action in p._actions:
        if action.dest == "prompt":
            action.required = False
    return p


def settings_of_flags(argv: Sequence[str]) -> RunSettings:
    known, _ = run_parser().parse_known_args(argv)
    start = start_of(known)
    strategy = strategy_of(argv, known, start)
    args = strategy_parser(strategy, run_parser()).parse_args(argv)
    params = params_for(strategy, start, strategy_params(args))
    say(start.notes)
    seed = start.run_value(argv, "--seed", args.seed, start.seed)
    limit = start.run_value(argv, "--max-new-tokens", args.max_new_tokens, start.max_new_tokens)
    return settings_for(strategy, params, seed, limit, grammar=grammar_of_args(args) or start.grammar)


def read_trace(path: str) -> RunSettings:
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidRequest(f"--trace: cannot read {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"--trace {path}: the JSON does not parse: {e.msg} at line {e.lineno}") from None
    return settings_of_trace(data)


def cmd_export_config(argv: Sequence[str]) -> int:
    if "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0
    known, rest = export_parser().parse_known_args(argv)
    if known.facts:
        print(facts_text(), end="")
        return 0
    if known.engine not in ENGINE_CHOICES:
        raise InvalidRequest(f"--engine must be one of {', '.join(ENGINE_CHOICES)}, got {known.engine!r}")
    settings = read_trace(known.trace) if known.trace else settings_of_flags(rest)
    if known.engine == "all":
        for e in export_all(settings).values():
            print(f"# ---- {e.title} ({e.version})")
            print(with_gaps(e), end="")
        return 0
    e = export(known.engine, settings)
    print(e.text, end="")
    for line in e.cannot_express:
        print(f"cannot express: {line}", file=sys.stderr)
    return 0
