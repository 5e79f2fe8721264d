"""``python -m playground models [MODEL] [--weights W] [--device D]``: the models this install has, and
for one of them what its weights do on this CPU: the check against float32, whether several tokens in
one pass give one token at a time's logits, and how many rows each matrix product takes a call here
(``playground.models.fast.rows``: chosen by probing this CPU's kernels, never assumed)."""
from __future__ import annotations

import argparse
from typing import Sequence

from playground.engine import choose_weights
from playground.models import DEFAULT_MODEL, OFFLINE, ModelStore
from playground.models.cpu import cpu_flags, has_native_bf16, onednn_tiers, torch_capability
from playground.models.dtypes import DTYPES
from playground.models.fast.check import gap_sentence


def cmd_models(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m playground models")
    ap.add_argument("model", nargs="?", help="load this model and show what its weights do on this CPU")
    ap.add_argument("--weights", default="auto", choices=DTYPES, help="the weights to check (default: auto)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    if args.model is None:
        for key, spec in OFFLINE.items():
            print(f"{key:14s} {spec.title}{'  (default)' if key == DEFAULT_MODEL else ''}")
        return 0
    flags = cpu_flags()
    print(f"CPU: torch {torch_capability()} kernels; oneDNN tiers {', '.join(onednn_tiers(flags)) or 'none read'}; "
          f"native bfloat16 {'yes' if has_native_bf16(flags) else 'no'}")
    lm, passed_over = choose_weights(ModelStore(args.device).get(args.model), args.weights)
    print(f"{lm.key}: {lm.weights}")
    for refused in passed_over:
        print(f"  passed over: {refused}")
    if lm.check is not None:
        print(f"  {lm.check.describe()} ({lm.check.seconds:.2f} s)")
    print(f"  {gap_sentence(lm.one_pass_gap)}")
    forms = lm.check.row_forms if lm.check is not None else ()
    if forms:
        print(f"  rows per product call, probed here in {sum(f.seconds for f in forms):.2f} s:")
        for form in forms:
            print(f"    {form.describe()}")
    else:
        print("  no lean forward: the products are transformers' own, whole passes")
    return 0
