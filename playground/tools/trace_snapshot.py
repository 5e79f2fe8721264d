"""Every strategy's trace on fixed requests, written as JSON less timing, to hold a refactor to "behaviour
unchanged": snapshot before, snapshot after, compare.

    python -m playground.tools.trace_snapshot --out /tmp/before.json
    python -m playground.tools.trace_snapshot --out /tmp/after.json --compare /tmp/before.json

The requests cover every strategy, every sampler stage (each on, alone and all together, in both
preset orders), forced tokens and a grammar, on toy and (unless ``--models toy``) SmolLM2 in float32.
Timing is dropped (``timing``, ``elapsed``: it differs run to run), and so is every key named in
``--ignore`` (a field a change adds on purpose). Exits 1 when a compared trace differs, naming it and the
first differing path.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from playground.engine import Request, run
from playground.models import ModelStore
from strategies.sampling.samplers import SAMPLER_STAGES
from strategies.stages import on_values

TIMING_KEYS = ("timing", "elapsed", "elapsed_s", "seconds")

# every stage that reads parameters, switched on by the values its registration declares (``@stage(on=...)``)
STAGES_ON: dict[str, dict[str, Any]] = on_values(SAMPLER_STAGES)
EVERY_LEAVES_OUT = ("mirostat", "adaptive_p", "synthid")  # each on alone only, never in the all-together requests
TOY_ONLY = ("word_bias",)  # toy's vocabulary spells no English word


def requests(model: str) -> list[tuple[str, Request]]:
    """The fixed requests for ``model``, each with a name."""
    prompt = "1 2" if model.startswith("toy") else "Write a short poem about the sea."
    tokens = 12
    out: list[tuple[str, Request]] = []

    def add(name: str, strategy: str, params: dict[str, Any] | None = None, **kw: Any) -> None:
        out.append((f"{model}/{name}", Request(model, strategy, prompt, dict(params or {}), seed=7,
                                               max_new_tokens=tokens, **kw)))

    add("greedy", "greedy")
    for stage, params in STAGES_ON.items():
        if model.startswith("toy") and stage in TOY_ONLY:
            continue
        add(f"sampling/{stage}", "sampling", params)
    every = {k: v for s, p in STAGES_ON.items() for k, v in p.items()
             if s not in EVERY_LEAVES_OUT and not (model.startswith("toy") and s in TOY_ONLY)}
    add("sampling/every", "sampling", every)
    add("sampling/every-llama.cpp", "sampling", {**every, "order": "llama.cpp"})
    add("gumbel/top_p", "gumbel", {"top_p": 0.9, "temperature": 1.2})
    add("sampling/forced", "sampling", {"top_k": 8}, forced={2: 1 if model.startswith("toy") else " the"})
    add("sampling/grammar", "sampling", {"temperature": 1.0},
        grammar={"kind": "choices", "text": "1 2 3, 4 5" if model.startswith("toy") else "yes, no, maybe"})
    add("beam", "beam", {"num_beams": 3})
    add("beam/pruned", "beam", {"num_beams": 4, "relative_threshold": 0.2, "finishing": "keep_slot"})
    add("stochastic_beam", "stochastic_beam", {"num_beams": 3})
    add("sample_beam", "sample_beam", {"num_beams": 2, "prefix_tokens": 2, "num_prefixes": 2})
    add("contrastive", "contrastive", {"amateur": "window", "amateur_window": 2}
        if model.startswith("toy") else {})
    add("contrastive/multinomial", "contrastive", {"selector": "multinomial", "amateur": "window",
                                                   "amateur_window": 2})
    drafts = ["toy-small", "prompt_lookup"] if model.startswith("toy") else ["early_exit", "prompt_lookup", "eagle"]
    for draft in drafts:
        add(f"speculative/{draft}/greedy", "speculative", {"draft": draft, "temperature": 0,
                                                           "measure_baseline": False})
        add(f"speculative/{draft}/sampled", "speculative", {"draft": draft, "temperature": 1.0, "top_k": 20,
                                                            "measure_baseline": False})
    add("speculative/topk", "speculative", {"draft": drafts[0], "verify": "topk", "measure_baseline": False})
    return out


def strip(value: Any, ignore: tuple[str, ...]) -> Any:
    """``value`` with every key in TIMING_KEYS or ``ignore`` removed, at any depth."""
    if isinstance(value, dict):
        return {k: strip(v, ignore) for k, v in value.items() if k not in TIMING_KEYS and k not in ignore}
    if isinstance(value, list):
        return [strip(v, ignore) for v in value]
    return value


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The first path where ``a`` and ``b`` differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k} (only {'after' if k in b else 'before'})"
            found = first_difference(a[k], b[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} vs {len(b)})"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r:.80} vs {b!r:.80}"


def snapshot(models: list[str], ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    store = ModelStore()
    return {name: strip(run(store, req).to_dict(), ignore) for model in models for name, req in requests(model)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="write the snapshot here")
    ap.add_argument("--compare", help="a snapshot to compare with")
    ap.add_argument("--models", default="toy,smollm2-135m")
    ap.add_argument("--ignore", default="", help="keys to leave out, comma-separated")
    args = ap.parse_args(argv)
    ignore = tuple(k for k in args.ignore.split(",") if k)
    snap = snapshot([m for m in args.models.split(",") if m], ignore)
    with open(args.out, "w") as f:
        json.dump(snap, f, sort_keys=True)
    print(f"{len(snap)} traces written to {args.out}")
    if not args.compare:
        return 0
    with open(args.compare) as f:
        before = strip(json.load(f), ignore)
    differing = 0
    for name in sorted(set(before) | set(snap)):
        where = first_difference(before.get(name), snap.get(name))
        if where:
            differing += 1
            print(f"  {name}: differs at {where}")
    print(f"differing traces: {differing} of {len(set(before) | set(snap))}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
