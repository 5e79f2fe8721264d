"""Was this text watermarked? The green-list detector (strategies/watermark_detect.py) on a text
written after a prompt, tokenized by the model that would have written it; or SynthID Text's scores
(strategies/synthid_detect.py) on the text alone, as its stage never reads the prompt.

The context is the one ``score`` uses (playground/whatif/score.py ``split_context``): the prompt as a
run encodes it (the chat template's assistant header for a chat model), or with no prompt the start
token the tokenizer adds (or else the text's first token). Its last token seeds the first scored
token's green list under lefthash. The text is tokenized afresh: a generated text whose tokens are not
the ones its tokenizer would choose for it loses a little of its signal at those places.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from playground.errors import InvalidRequest
from playground.models import ModelStore, Progress
from playground.whatif.score import check_texts, split_context, text_ids
from strategies.params import check_value, field_kind
from strategies.sampling.samplers import SamplerParams
from strategies.sampling.synthid import parse_keys
from strategies.synthid_detect import detect as detect_synthid
from strategies.watermark_detect import detect

SETTINGS = ("watermark_gamma", "watermark_scheme", "watermark_key")


def checked_settings(gamma: Any, scheme: Any, key: Any) -> tuple[float, str, int]:
    """gamma, scheme and key checked against the sampler's own parameters (their ranges and messages)."""
    fields = {f.name: f for f in dataclasses.fields(SamplerParams)}
    out = [check_value(name, value, fields[name].metadata, field_kind(fields[name]))
           for name, value in zip(SETTINGS, (gamma, scheme, key))]
    return float(out[0]), str(out[1]), int(out[2])


def detect_text(store: ModelStore, model: str, text: str, prompt: str = "", system: str = "",
                chat: bool | None = None, gamma: float = 0.25, scheme: str = "lefthash", key: Any = None,
                ignore_repeated_ngrams: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """The detection as JSON: ``z``, ``p_value``, ``green``, ``scored``, ``green_fraction`` and ``marks``
    (one per token of the text: id, text, green, counted), with the settings and the context's mode."""
    check_texts(text, prompt, system)
    gamma, scheme, key = checked_settings(gamma, scheme, SamplerParams().watermark_key if key is None else key)
    lm = store.get(model, progress)
    context, scored, mode = split_context(lm, text, prompt, system, chat)
    found = detect(context + scored, lm.vocab_size, gamma, key, scheme, context=len(context),
                   ignore_repeated_ngrams=ignore_repeated_ngrams)
    out = found.to_dict()
    out["marks"] = [{**m, "text": lm.piece(m["id"])} for m in out["marks"][len(context):]]
    return {"model": lm.key, "scheme": scheme, "key": key, "vocab_size": lm.vocab_size, "mode": mode,
            "context_tokens": len(context), "ignore_repeated_ngrams": ignore_repeated_ngrams, **out}


def detection_summary(result: dict[str, Any]) -> str:
    """A few lines for a person: the verdict at z 4, the counts, the text with its green tokens marked."""
    verdict = "watermarked" if result["z"] > 4 else "no watermark found"
    marked = "".join(f"[{m['text']}]" if m["green"] else m["text"] for m in result["marks"])
    return "\n".join([
        f"{verdict}: z = {result['z']:.2f}, p = {result['p_value']:.3g} "
        f"({result['green']} green of {result['scored']} scored, {result['green_fraction']:.0%}; "
        f"{result['gamma']:g} expected without a watermark)",
        f"{result['scheme']}, key {result['key']}, {result['model']} ({result['vocab_size']:,} tokens)",
        f"green tokens in [brackets]: {marked}"])


SYNTHID_SETTINGS = ("synthid_keys", "synthid_ngram_len", "synthid_context_history_size", "synthid_sampling_table_size",
                    "synthid_sampling_table_seed")


def detect_synthid_text(store: ModelStore, model: str, text: str, keys: Any, ngram_len: Any = 5,
                        history_size: Any = None, table_size: Any = None, table_seed: Any = None,
                        progress: Progress | None = None) -> dict[str, Any]:
    """SynthID's scores as JSON: ``mean``, ``weighted_mean``, ``scored``, ``depth`` and ``marks`` (one per token
    of the text: id, text, g_values, counted, and the running mean and weighted_mean), with the settings.
    The settings are checked against the sampler's own parameters (their ranges and messages)."""
    defaults = SamplerParams()
    values = [keys, ngram_len, *(getattr(defaults, name) if v is None else v
                                 for name, v in zip(SYNTHID_SETTINGS[2:], (history_size, table_size, table_seed)))]
    settings = SamplerParams(**dict(zip(SYNTHID_SETTINGS, values)))  # each value, and the keys' format and count
    if not settings.synthid_keys:
        raise InvalidRequest("synthid_keys must name the keys the text was watermarked with, got none")
    check_texts(text, "", "")
    lm = store.get(model, progress)
    ids = text_ids(lm, text)
    found = detect_synthid(ids, parse_keys(settings.synthid_keys), settings.synthid_ngram_len,
                           settings.synthid_sampling_table_size, settings.synthid_sampling_table_seed,
                           settings.synthid_context_history_size, lm.eos_ids)
    out = found.to_dict()
    out["marks"] = [{**m, "text": lm.piece(m["id"])} for m in out["marks"]]
    return {"model": lm.key, "watermark": "synthid", "keys": settings.synthid_keys,
            "context_history_size": settings.synthid_context_history_size,
            "sampling_table_size": settings.synthid_sampling_table_size,
            "sampling_table_seed": settings.synthid_sampling_table_seed, "vocab_size": lm.vocab_size, **out}


def synthid_summary(result: dict[str, Any]) -> str:
    """A few lines for a person: the two scores against the 0.5 of a text without the watermark, and the
    text with each counted token's share of g = 1 bits."""
    marked = "".join(f"{m['text']}[{sum(m['g_values']) / len(m['g_values']):.1f}]" if m["counted"] else m["text"]
                     for m in result["marks"])
    return "\n".join([
        f"SynthID: mean g-value {result['mean']:.3f}, weighted mean {result['weighted_mean']:.3f} over "
        f"{result['scored']} tokens and {result['depth']} layers (about 0.5 without the watermark; higher is "
        f"watermarked)",
        f"keys {result['keys']}, ngram_len {result['ngram_len']}, {result['model']} ({result['vocab_size']:,} tokens)",
        f"each counted token's mean g-value in [brackets]: {marked}"])
