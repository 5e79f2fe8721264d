"""transformers: a ``GenerationConfig`` (Python) from a run, and a GenerationConfig snippet or a
``generation_config.json`` read back. Every sampler field is written, because generate() fills a field left
None from the model's generation_config.json and then from its own defaults (top_k 50); facts.py's
"transformers" row holds the sources.
"""
from __future__ import annotations

import json
from typing import Any

from playground.engines.facts import ENGINES, STAGE_WORDS
from playground.engines.gaps import answer_gap, budget, budget_words, common_gaps, grammar_gap, shown
from playground.engines.pycall import call_kwargs, first_int_arg, python_call
from playground.engines.settings import RunSettings, sampler_params
from playground.errors import InvalidRequest

FACTS = ENGINES["transformers"]
WARPERS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
           "typical_p": "typical_p", "epsilon_cutoff": "epsilon_cutoff", "eta_cutoff": "eta_cutoff", "top_h": "top_h"}
PROCESSORS = {"repetition_penalty": "repetition_penalty", "no_repeat_ngram_size": "no_repeat_ngram_size"}
# generation_config.json keys that are not sampler settings (token ids, bookkeeping)
QUIET = {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "transformers_version",
         "_from_model_config", "cache_implementation", "use_cache", "num_beams", "num_return_sequences",
         "output_scores", "return_dict_in_generate", "output_attentions", "output_hidden_states"}
# generate()'s own values for the fields a config and the model leave unset (facts.py: GenerationConfig's defaults)
GLOBAL = {k: v for k, v in FACTS.own_defaults.items() if k != "max_length"}


def kwargs(s: RunSettings) -> dict[str, Any]:
    """GenerationConfig's keyword arguments for ``s``: sampling (do_sample) unless temperature is 0."""
    p = s.params
    out: dict[str, Any] = {"do_sample": s.samples}
    if s.samples:
        out |= {"temperature": p.temperature, "top_k": p.top_k, "top_p": p.top_p, "min_p": p.min_p,
                "typical_p": p.typical_p, "epsilon_cutoff": p.epsilon_cutoff, "eta_cutoff": p.eta_cutoff}
        if "top_h" in s.on():
            out["top_h"] = p.top_h
    out |= {"repetition_penalty": p.repetition_penalty, "no_repeat_ngram_size": p.no_repeat_ngram_size}
    if s.max_new_tokens is not None:
        out["max_new_tokens"] = s.max_new_tokens
    if s.stop:
        out["stop_strings"] = list(s.stop)
    return out


def text(s: RunSettings) -> str:
    seed = "" if s.seed is None or not s.samples else (
        f"torch.manual_seed({s.seed})  # transformers samples from torch's global generator\n")
    head = "import torch\n" if seed else ""
    tail = ", tokenizer=tokenizer" if s.stop else ""
    return (f"{head}from transformers import GenerationConfig\n\ngeneration_config = "
            f"{python_call('GenerationConfig', kwargs(s))}\n{seed}"
            f"# output = model.generate(**inputs, generation_config=generation_config{tail})\n")


def gaps(s: RunSettings) -> list[str]:
    on, out = s.on(), common_gaps(FACTS, s, skip=("word_bias", "watermark", "synthid"))
    for name, what in (("word_bias", "sequence_bias (token ids)"), ("watermark", "a WatermarkingConfig"),
                       ("synthid", "a SynthIDTextWatermarkingConfig")):
        if name in on:
            out.append(f"transformers takes the run's {STAGE_WORDS[name]} as {what}, which this export does not "
                       "write: set it by hand")
    if not s.samples:
        cut = [n for n in on if n in FACTS.stages and n not in ("penalty", "no_repeat_ngram", "temperature")]
        if cut:
            out.append(f"at temperature 0 transformers decodes greedily and skips {', '.join(cut)}, which acted "
                       "before the argmax here")
    return out + grammar_gap("transformers", s, (), " (generate() has no grammar constraint)") + phase_gaps(s)


def phase_gaps(s: RunSettings) -> list[str]:
    """generate() has no thinking budget and one GenerationConfig a call."""
    out = []
    if budget(s) is not None:
        close = s.params.phase_marker or "</think>"
        out.append(f"transformers' generate() has no thinking budget: the run's {budget_words(s)} left out (a "
                   f"custom LogitsProcessor passed as logits_processor= that forces {close!r} after "
                   f"{budget(s)} thinking tokens would do it)")
    return out + answer_gap(FACTS, s)


def fields(s: RunSettings) -> dict[str, Any]:
    return kwargs(s)


def from_config(config: dict[str, Any], seed: int | None = None) -> tuple[RunSettings, list[str]]:
    """A GenerationConfig's fields (a generation_config.json, or a snippet's keyword arguments) -> the run
    generate() makes of them, and what could not be carried. do_sample false (the default) is greedy."""
    if not isinstance(config, dict):
        raise InvalidRequest(f"a generation config must be a JSON object, got {type(config).__name__}")
    left: list[str] = []
    merged = GLOBAL | {k: v for k, v in config.items() if v is not None}
    values: dict[str, Any] = {"order": "transformers"}
    for key in (*WARPERS, *PROCESSORS):
        if key in merged:
            values[{**WARPERS, **PROCESSORS}[key]] = merged[key]
    if not merged["do_sample"]:
        acting = [f"{k} {shown(merged[k])}" for k in WARPERS if k in config and merged[k] != GLOBAL.get(k)]
        if acting:
            left.append(f"do_sample is false, so generate() decodes greedily and {', '.join(acting)} do not act")
        values |= {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0,
                   "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "top_h": 0.0}
    for key, value in config.items():
        if key not in QUIET and key not in GLOBAL and key not in WARPERS and key not in (
                "max_new_tokens", "stop_strings", "min_p"):
            left.append(f"{key} {json.dumps(value)[:60]}: not a setting the playground has")
    stop = config.get("stop_strings") or ()
    settings = RunSettings(sampler_params(values), "sampling", seed, config.get("max_new_tokens"),
                           (stop,) if isinstance(stop, str) else tuple(stop))
    return settings, left


def read_python(snippet: str) -> tuple[RunSettings, list[str]]:
    args = call_kwargs(snippet, "GenerationConfig")
    if args is None:
        raise InvalidRequest("no GenerationConfig(...) call found in the Python snippet")
    return from_config(args, first_int_arg(snippet, "manual_seed"))


def read_json(config: dict[str, Any]) -> tuple[RunSettings, list[str]]:
    return from_config(config)
