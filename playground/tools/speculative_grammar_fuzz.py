"""Speculative decoding under a grammar over many seeds: every draft that takes a grammar, against
four grammars on toy (and four on SmolLM2 with ``--smollm2-seeds``), with plain sampling beside them
as the reference. Each run is checked against a fresh matcher fed its tokens:

- it does not raise;
- its text stays in the grammar (the tokens before a final end of text are all accepted);
- its finish reason is the one the sampling loop gives that text: ``grammar complete`` when the
  grammar allows nothing more, ``eos`` after an end of text the grammar allowed, ``grammar: no token
  allowed`` where nothing can continue a text that is not whole, ``length`` at the budget.

    python -m playground.tools.speculative_grammar_fuzz [--seeds 500] [--smollm2-seeds 0] [--threads 1]

EAGLE's tree draft is not among the drafts: it refuses a grammar by name.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import llguidance.torch as llt
import torch

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.models import ModelStore
from strategies.sampling.grammar import DEAD_END_REASON, GRAMMAR_REASON, GrammarSpec, allowed_mask, compile_grammar

TOY_PROMPT = "once upon a time there lived"
TOY_DRAFTS = ("toy-small", "early_exit", "prompt_lookup")
TOY_GRAMMARS = {
    "choices": {"kind": "choices", "text": json.dumps([" a time", " the hill rose", " a",
                                                      " once upon a time there lived",
                                                      " a time there lived happily ever"])},
    "regex": {"kind": "regex", "text": "( a| the)( hill| time)( rose| there)( lived| high)?"},
    # toy's words spell no JSON: every run ends at its first step with no token allowed
    "json": {"kind": "json", "text": json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}})},
    "lark": {"kind": "lark", "text": 'start: item+\nitem: " once" | " upon" " a" " time" | " happily" " ever"'},
}
SMOL_PROMPT = "Is the sky blue? Answer, then give an email address and a JSON object."
SMOL_DRAFTS = ("early_exit", "prompt_lookup")
SMOL_GRAMMARS = {
    "choices": {"kind": "choices", "text": "yes, definitely | yes | no"},
    "regex": {"kind": "regex", "text": r"[a-z]{1,8}@[a-z]{1,8}\.(com|org)"},
    "json": {"kind": "json", "text": json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}},
                                                  "required": ["ok"], "additionalProperties": False})},
    "lark": {"kind": "lark", "text": 'start: "The answer is " ANSWER "."\nANSWER: "yes" | "no"'},
}


@dataclass
class Cell:
    """One draft under one grammar: how its runs ended."""

    runs: int = 0
    errors: Counter = field(default_factory=Counter)  # first line of the message -> runs
    wrong: Counter = field(default_factory=Counter)  # "recorded -> expected" -> runs
    reasons: Counter = field(default_factory=Counter)


def expected_reason(compiled: Any, token_ids: list[int], eos_ids: frozenset[int], max_new_tokens: int) -> str:
    """The finish reason the sampling loop gives ``token_ids`` under the grammar (from a fresh matcher),
    or what is wrong with them ("left the grammar", an end of text too early or too late)."""
    matcher = compiled.matcher()
    ended = bool(token_ids) and token_ids[-1] in eos_ids
    for token in token_ids[:-1] if ended else token_ids:
        if not matcher.consume_token(int(token)):
            return "left the grammar"
    if ended:
        if matcher.is_stopped():
            return "an end of text after the grammar had ended the text"
        return "eos" if matcher.is_accepting() else "an end of text before the text was whole"
    if matcher.is_stopped():
        return GRAMMAR_REASON
    mask = allowed_mask([matcher.deep_copy()], compiled.tokenizer.vocab_size, llt)[0]
    allowed = set(mask.nonzero().flatten().tolist())
    if not matcher.is_accepting() and allowed <= set(eos_ids):
        return DEAD_END_REASON
    return "length" if len(token_ids) == max_new_tokens else "stopped early"


def run_cell(store: ModelStore, model: str, prompt: str, strategy: str, params: dict[str, Any],
             grammar: dict[str, str], seeds: range, max_new_tokens: int) -> Cell:
    lm = store.get(model)
    spec = GrammarSpec.from_dict(grammar)
    assert spec is not None, f"a fuzz cell runs under a grammar, got {grammar!r}"
    compiled = compile_grammar(spec, lm)
    cell = Cell()
    for seed in seeds:
        cell.runs += 1
        try:
            trace = run(store, Request(model, strategy, prompt, params, seed=seed, max_new_tokens=max_new_tokens,
                                       grammar=grammar))
        except InvalidRequest as e:
            cell.errors[str(e).splitlines()[0][:120]] += 1
            continue
        want = expected_reason(compiled, trace.token_ids, lm.eos_ids, max_new_tokens)
        cell.reasons[trace.finish_reason] += 1
        if trace.finish_reason != want:
            cell.wrong[f"{trace.finish_reason} -> {want}"] += 1
    return cell


def fuzz(store: ModelStore, model: str, prompt: str, drafts: tuple[str, ...], grammars: dict[str, dict[str, str]],
         seeds: range, max_new_tokens: int, temperature: float = 3.0, gamma: int = 3
         ) -> dict[tuple[str, str], Cell]:
    """(draft or "sampling", grammar name) -> Cell, for every draft and grammar over ``seeds``."""
    out = {}
    for name, grammar in grammars.items():
        out[("sampling", name)] = run_cell(store, model, prompt, "sampling", {"temperature": temperature},
                                           grammar, seeds, max_new_tokens)
        for draft in drafts:
            params = {"draft": draft, "gamma": gamma, "temperature": temperature, "measure_baseline": False}
            out[(draft, name)] = run_cell(store, model, prompt, "speculative", params, grammar, seeds,
                                          max_new_tokens)
    return out


def report(model: str, cells: dict[tuple[str, str], Cell]) -> list[str]:
    lines = [f"{model}: draft x grammar: runs, errors, wrong finish reasons; reasons"]
    for (draft, grammar), c in cells.items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(c.reasons.items()))
        lines.append(f"  {draft:>13} x {grammar:<7} runs {c.runs:4}  errors {sum(c.errors.values()):3}  "
                     f"wrong {sum(c.wrong.values()):3}   {reasons}")
        lines += [f"      error x{n}: {msg}" for msg, n in c.errors.most_common(3)]
        lines += [f"      wrong x{n}: {what}" for what, n in c.wrong.most_common(3)]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=500, help="seeds per draft and grammar on toy")
    parser.add_argument("--smollm2-seeds", type=int, default=0, help="seeds per draft and grammar on SmolLM2")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (toy's passes are too small for more)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    store, bad, started = ModelStore("cpu"), 0, time.perf_counter()
    runs = [("toy", TOY_PROMPT, TOY_DRAFTS, TOY_GRAMMARS, args.seeds, 16),
            ("smollm2-135m", SMOL_PROMPT, SMOL_DRAFTS, SMOL_GRAMMARS, args.smollm2_seeds, 24)]
    for model, prompt, drafts, grammars, seeds, tokens in runs:
        if not seeds:
            continue
        cells = fuzz(store, model, prompt, drafts, grammars, range(seeds), tokens)
        print("\n".join(report(model, cells)), flush=True)
        bad += sum(sum(c.errors.values()) + sum(c.wrong.values()) for c in cells.values())
    print(f"errors and wrong finish reasons in all: {bad} ({time.perf_counter() - started:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
