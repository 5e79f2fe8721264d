"""``python -m playground run|list|models|sample|score|detect|diff|sweep|answers|export-config``: the engine from the command line.

Strategy flags come from the chosen strategy's Params (``playground.cli.flags``). Bad input exits
with status 2 and one line naming the value and the allowed range.
"""
from __future__ import annotations

import sys
from typing import Sequence

from playground.cli import whatif
from playground.cli.answers import cmd_answers
from playground.cli.detect import cmd_detect
from playground.cli.diff import cmd_diff
from playground.cli.export_config import cmd_export_config
from playground.cli.models import cmd_models
from playground.cli.run import cmd_list, cmd_run
from playground.cli.sweep import cmd_sweep
from playground.errors import InvalidRequest


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m playground {run,list,models,sample,score,detect,diff,sweep,answers,export-config} [options]   (run --help for the options)")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    try:
        if command == "list":
            return cmd_list()
        if command == "models":
            return cmd_models(rest)
        if command == "run":
            return cmd_run(rest)
        if command == "detect":
            return cmd_detect(rest)
        if command == "diff":
            return cmd_diff(rest)
        if command == "export-config":
            return cmd_export_config(rest)
        if command in ("sweep", "answers"):
            return cmd_sweep(rest) if command == "sweep" else cmd_answers(rest)
        if command in whatif.COMMANDS:
            return whatif.COMMANDS[command](rest)
        print(f"error: command must be run, list, models, sample, score, detect, diff, sweep, answers or export-config, got {command!r}", file=sys.stderr)
        return 2
    except InvalidRequest as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
