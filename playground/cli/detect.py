"""``python -m playground detect``: is a text watermarked? The green-list watermark of the sampler's
``watermark`` stage (Kirchenbauer et al. 2023), or SynthID Text, its ``synthid`` stage (Dathathri et al. 2024).

    detect --model M --watermark-gamma 0.25 [--watermark-scheme lefthash] [--watermark-key K]
           [--prompt P] [--system S] [--raw] --text T [--ignore-repeated-ngrams] [--json]
    detect --model M --watermark synthid --synthid-keys K1,K2,... [--synthid-ngram-len 5] --text T [--json]

The settings must be the ones the text was written with (the run's ``--watermark-*`` or ``--synthid-*``
flags). SynthID scores the text alone (its stage never reads the prompt). Bad input exits with status 2
and one line naming the value and the allowed range.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from playground.models import DEFAULT_MODEL, OFFLINE, ModelStore
from playground.whatif.watermark import detect_synthid_text, detect_text, detection_summary, synthid_summary
from strategies.green_lists import DEFAULT_KEY, SCHEMES

WATERMARKS = ("green", "synthid")


def detect_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m playground detect",
                                description="Green list: count a text's green tokens and test them against chance "
                                            "(z-score and p-value). SynthID: its mean and weighted-mean g-value.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"offline: {', '.join(OFFLINE)}; or a hub id")
    p.add_argument("--text", required=True, help="the text to test (with a chat model: the answer to --prompt)")
    p.add_argument("--watermark", default="green", choices=WATERMARKS,
                   help="green (the watermark stage's green lists, the default) or synthid")
    p.add_argument("--prompt", default="", help="the prompt the text answered (its last token seeds the first list)")
    p.add_argument("--system", default="", help="system prompt (chat models)")
    p.add_argument("--raw", action="store_true", help="plain completion: no chat template")
    p.add_argument("--watermark-gamma", default="0.25", help="the green list's share of the vocabulary, in (0, 1)")
    p.add_argument("--watermark-scheme", default="lefthash", help=f"one of {', '.join(SCHEMES)}")
    p.add_argument("--watermark-key", default=str(DEFAULT_KEY), help="the key the text was watermarked with")
    p.add_argument("--ignore-repeated-ngrams", action="store_true",
                   help="count each distinct (previous, token) pair once")
    p.add_argument("--synthid-keys", default="", help="SynthID: the run's keys, comma-separated integers")
    p.add_argument("--synthid-ngram-len", default="5", help="SynthID: the run's n-gram length")
    p.add_argument("--synthid-context-history-size", default=None, help="SynthID: the run's history size (1024)")
    p.add_argument("--synthid-sampling-table-size", default=None, help="SynthID: the run's table size (65536)")
    p.add_argument("--synthid-sampling-table-seed", default=None, help="SynthID: the run's table seed (0)")
    p.add_argument("--device", default=None, help="cuda, mps or cpu (default: the best available)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def cmd_detect(argv: Sequence[str]) -> int:
    args = detect_parser().parse_args(argv)
    store = ModelStore(args.device)
    progress = lambda f, m: print(f"[{f:4.0%}] {m}", file=sys.stderr)  # noqa: E731
    if args.watermark == "synthid":
        result = detect_synthid_text(store, args.model, args.text, args.synthid_keys, args.synthid_ngram_len,
                                     args.synthid_context_history_size, args.synthid_sampling_table_size,
                                     args.synthid_sampling_table_seed, progress=progress)
        summary = synthid_summary
    else:
        result = detect_text(store, args.model, args.text, args.prompt, args.system, False if args.raw else None,
                             args.watermark_gamma, args.watermark_scheme, args.watermark_key,
                             args.ignore_repeated_ngrams, progress=progress)
        summary = detection_summary
    print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else summary(result))
    return 0
