"""``--preset NAME`` and ``--import FILE`` on ``run`` and ``export-config``: start from a value preset
(playground/engines/presets.py) or from an engine's config (playground/engines/importing.py); the flags
given beside them win. What a preset set, and what an import could not carry, go to stderr.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

from playground.engines.importing import import_file
from playground.engines.presets import PRESETS, preset
from playground.engines.settings import changed_values, phase_values
from strategies.registry import get_strategy


def add_engine_flags(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    group = parser.add_argument_group("presets and imports (flags given beside them win)")
    group.add_argument("--preset", default=None, metavar="NAME",
                       help=f"start from a value preset: {', '.join(PRESETS)} (model card: the model's published "
                            "recommendation; the engines' names: what a client that sets nothing gets there)")
    group.add_argument("--import", dest="import_file", default=None, metavar="FILE",
                       help="start from an engine's config: a llama-server/llama-cli command line, a "
                            "generation_config.json, an Ollama Modelfile, a vLLM SamplingParams snippet, a vLLM or "
                            "OpenAI request body, a trace JSON or a .gguf's general.sampling.* keys")
    return parser


def given(argv: Sequence[str], name: str) -> bool:
    """Whether the flag ``name`` appears in ``argv`` (as ``--x v`` or ``--x=v``)."""
    return any(a == name or a.startswith(name + "=") for a in argv)


@dataclass
class Start:
    """Where a run starts before its own flags: a strategy, chain values, and the run values an import sets."""

    strategy: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    max_new_tokens: int | None = None
    grammar: dict[str, str] | None = None
    imported: bool = False
    notes: list[str] = field(default_factory=list)

    def run_value(self, argv: Sequence[str], flag: str, from_flags: Any, imported: Any) -> Any:
        """A run value (seed, token limit): the flag when given or nothing was imported, else the import's."""
        return from_flags if given(argv, flag) or not self.imported else imported


def start_of(args: argparse.Namespace) -> Start:
    """The preset, then the import over it (either may be absent)."""
    out = Start()
    if args.preset:
        chosen = preset(args.preset, args.model)
        out.strategy, out.values = chosen.strategy, dict(chosen.values)
        out.notes.append(f"[preset] {chosen.sentence} (source: {chosen.source})")
    if args.import_file:
        imported = import_file(args.import_file)
        s = imported.settings
        out.strategy, out.values = "sampling", changed_values(s.params) | phase_values(s.params)
        out.seed, out.max_new_tokens, out.grammar, out.imported = s.seed, s.max_new_tokens, s.grammar, True
        out.notes.append(f"[import] read {args.import_file} as a {imported.kind}")
        left = list(imported.not_carried)
        if s.seed is None:
            out.notes.append("[import] the config sets no seed (the engine would draw one); this run takes --seed "
                             "(default 0)")
        if s.stop:
            left.append(f"stop strings {list(s.stop)!r}: the playground stops at the model's end of text only")
        out.notes += [f"[import] not carried: {line}" for line in left]
    return out


def strategy_of(argv: Sequence[str], args: argparse.Namespace, start: Start) -> str:
    """--strategy when given, else the preset's or import's, else the run parser's default."""
    return args.strategy if given(argv, "--strategy") or start.strategy is None else start.strategy


def params_for(strategy: str, start: Start, flags: dict[str, str]) -> dict[str, Any]:
    """The start's values that ``strategy``'s Params take, then the flags given; a note for those it drops."""
    names = {f.name for f in dataclasses.fields(get_strategy(strategy).params)}
    dropped = sorted(k for k in start.values if k not in names)
    if dropped and start.values:
        start.notes.append(f"[preset] {strategy} takes none of {', '.join(dropped)}: left out")
    return {**{k: v for k, v in start.values.items() if k in names}, **flags}


def say(notes: list[str]) -> None:
    for line in notes:
        print(line, file=sys.stderr)
