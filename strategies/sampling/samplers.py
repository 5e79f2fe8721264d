"""The full sampler chain of the sampling strategies: every stage, its knobs, two preset orders.

``SamplerParams`` extends the shared ``ChainParams`` (penalty, temperature, top-k, top-p, min-p)
with typical-p, epsilon, eta, top-nσ, XTC, DRY, dynamic temperature, mirostat v2, no-repeat n-gram,
bias by word, top-H, p-less and adaptive-p. Each has a no-op value at which it drops out of the chain.

``order`` names the stages in the order they run, or a preset:
- ``transformers``: the order ``generate`` applies its processors and warpers in (sequence bias,
  repetition penalty, no-repeat n-gram; then temperature, top-k, top-p, min-p, typical, epsilon,
  eta; top-H right after temperature, where transformers 5.x puts ``TopHLogitsWarper``), the stages
  it lacks placed beside their kin (p-less beside min-p);
- ``llama.cpp``: llama.cpp's default sampler chain
  ``penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature``, with mirostat and adaptive-p
  last (there they pick the token, so they must end the chain) and the stages it lacks beside their
  kin (top-H beside typical, p-less beside min-p).
Stages an order leaves out follow the listed ones, in the transformers order.

Three stages need more than logits: XTC draws its coin from the request's generator, and mirostat
and adaptive-p keep a state (mu; a running average) that ``feed_back`` advances with the chosen token;
so the chain is built once per run, with that generator and the model (DRY reads token text, word bias
encodes words). A forced step (strategies/forcing.py) takes nothing from them: XTC's coin is taken
back and the states stay (``hold``), so forcing a prefix is the run whose prompt holds it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.untrusted_json import loads_untrusted
from strategies.sampling.adaptive import AdaptiveP, DynamicTemperature, Mirostat
from strategies.sampling.chain import ChainParams, ChainRecord, build_chain
from strategies.params import param
from strategies.sampling.repeats import DRY, NoRepeatNGram, WordBias
from strategies.sampling.truncations import XTC, Epsilon, Eta, PLess, TopH, TopNSigma, TypicalP

PRESETS: dict[str, tuple[str, ...]] = {
    "transformers": ("word_bias", "penalty", "no_repeat_ngram", "dry", "temperature", "dynamic_temperature",
                     "top_h", "top_k", "top_p", "min_p", "p_less", "typical_p", "epsilon", "eta", "top_nsigma",
                     "xtc", "mirostat", "adaptive_p"),
    "llama.cpp": ("word_bias", "penalty", "no_repeat_ngram", "dry", "top_nsigma", "top_k", "typical_p", "top_h",
                  "top_p", "min_p", "p_less", "xtc", "epsilon", "eta", "dynamic_temperature", "temperature",
                  "mirostat", "adaptive_p"),
}
SAMPLER_STAGES = PRESETS["transformers"]
DEFAULT_BREAKERS = '"\\n", ":", "\\"", "*"'
BIAS_LIMIT = 100.0


def expand_order(order: str) -> str:
    """A preset name or a comma-separated list of stage names -> every stage, comma-separated."""
    text = order.strip()
    if text in PRESETS:
        return ",".join(PRESETS[text])
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SAMPLER_STAGES and n != "grammar"]  # grammar: where a grammar goes
    if unknown or len(set(names)) != len(names):
        raise InvalidRequest(f"order must be {' or '.join(PRESETS)}, or stage names each at most once from "
                             f"{', '.join(SAMPLER_STAGES)}; got {order!r:.200}")
    return ",".join(names + [n for n in SAMPLER_STAGES if n not in names])


def parse_breakers(text: str) -> tuple[str, ...]:
    """'"\\n", ":"' (comma-separated JSON strings) -> ('\\n', ':')."""
    try:
        items = loads_untrusted(f"[{text}]", "dry_sequence_breakers")
    except json.JSONDecodeError:
        items = None
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
        raise InvalidRequest(f"dry_sequence_breakers must be comma-separated quoted strings like "
                             f"{DEFAULT_BREAKERS}, got {text!r:.200}")
    return tuple(items)


def parse_word_bias(text: str) -> list[tuple[str, float]]:
    """'Paris, London=-2.5, ocean=+3' -> [(word, bias)]; a word alone is banned (-inf)."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        word, eq, value = item.rpartition("=") if "=" in item else (item, "", "-inf")
        word = word.strip()
        try:
            bias = float(value)
        except ValueError:
            bias = math.nan
        if not word or not (bias == -math.inf or -BIAS_LIMIT <= bias <= BIAS_LIMIT):
            raise InvalidRequest(f"word_bias entries must be word or word=bias with bias in "
                                 f"[-{BIAS_LIMIT:g}, {BIAS_LIMIT:g}] or -inf, got {item!r}")
        out.append((word, bias))
    return out


@dataclass(frozen=True)
class SamplerParams(ChainParams):
    """Every stage of the sampling chain (see the module docstring for the order)."""

    typical_p: float = param(1.0, "Locally typical: keep the tokens whose surprise is closest to the entropy, "
                             "up to this mass; it can cut the most probable token (when its surprise is far "
                             "from the entropy), as transformers does. 1 = off.", low=0.0, high=1.0,
                             low_open=True, noop=1.0, step=0.01)
    epsilon_cutoff: float = param(0.0, "Epsilon: drop tokens with probability below this. 0 = off.",
                                  low=0.0, high=1.0, high_open=True, noop=0.0, step=0.0005, ui_max=0.05)
    eta_cutoff: float = param(0.0, "Eta: drop tokens below min(eta, √eta·exp(−entropy)). 0 = off.",
                              low=0.0, high=1.0, high_open=True, noop=0.0, step=0.0005, ui_max=0.05)
    top_nsigma: float = param(0.0, "Top-nσ: keep logits ≥ max − n·σ of the logits; the same set at any "
                              "temperature. 0 = off.", low=0.0, high=100.0, noop=0.0, step=0.1, ui_max=5.0)
    xtc_probability: float = param(0.0, "XTC: chance per step of removing the top tokens. 0 = off.",
                                   low=0.0, high=1.0, noop=0.0, step=0.05)
    xtc_threshold: float = param(0.1, "XTC: tokens at or above this probability are removed, except the "
                                 "least probable of them; it acts only when two or more pass, so above 0.5 "
                                 "it does nothing.", low=0.0, high=1.0, step=0.01)
    dry_multiplier: float = param(0.0, "DRY: penalty multiplier for a token that extends a repeat. 0 = off.",
                                  low=0.0, high=100.0, noop=0.0, step=0.05, ui_max=5.0)
    dry_base: float = param(1.75, "DRY: penalty = multiplier × base^(repeat length − allowed length).",
                            low=1.0, high=100.0, step=0.05, ui_max=4.0)
    dry_allowed_length: int = param(2, "DRY: repeats up to this many tokens go unpenalised.", low=1, high=1000,
                                    step=1, ui_max=20)
    dry_sequence_breakers: str = param(DEFAULT_BREAKERS, "DRY: quoted strings, comma-separated; a token "
                                       "containing one ends a repeat.")
    dynatemp_min: float = param(1.0, "Dynamic temperature: T at zero entropy (min = max = 1: off).",
                                low=0.0, high=100.0, low_open=True, noop=1.0, step=0.05, ui_max=3.0)
    dynatemp_max: float = param(1.0, "Dynamic temperature: T at maximal entropy (min = max = 1: off).",
                                low=0.0, high=100.0, low_open=True, noop=1.0, step=0.05, ui_max=3.0)
    dynatemp_exponent: float = param(1.0, "Dynamic temperature: T = min + (max − min) × (H / log N)^exponent.",
                                     low=0.0, high=100.0, low_open=True, step=0.05, ui_max=4.0)
    mirostat_tau: float = param(0.0, "Mirostat v2: target surprise in bits (5 is common). 0 = off.",
                                low=0.0, high=100.0, noop=0.0, step=0.1, ui_max=10.0)
    mirostat_eta: float = param(0.1, "Mirostat v2: learning rate of mu. A forced token does not move mu (a "
                                "prompt holding it would not).", low=0.0, high=1.0, low_open=True, step=0.01)
    no_repeat_ngram_size: int = param(0, "Ban any token that would repeat an n-gram of this size. 0 = off.",
                                      low=0, high=100, noop=0, step=1, ui_max=10)
    word_bias: str = param("", "Bias by word: 'word=bias' comma-separated; a word alone (or =-inf) is banned. "
                           "Empty = off.", noop="")
    top_h: float = param(0.0, "Top-H: keep the top tokens while their cumulative entropy stays at most h × the "
                         "entropy (over the top 100, as transformers computes it). 0 = off.", low=0.0, high=1.0,
                         noop=0.0, step=0.01)
    p_less: bool = param(False, "p-less: keep the tokens with p ≥ Σp², the chance two draws agree; no parameter, "
                         "the top token always passes. Off = off.", noop=False)
    adaptive_p_target: float = param(-1.0, "Adaptive-p: favour tokens near this probability, steering the average "
                                     "of the chosen tokens' probabilities to it; runs last. Negative = off.",
                                     low=-1.0, high=1.0, noop=-1.0, step=0.01)
    adaptive_p_decay: float = param(0.9, "Adaptive-p: decay of the running average (history about 1/(1 − decay) "
                                    "tokens). A forced token does not move it.", low=0.0, high=0.99, step=0.01)
    order: str = param("transformers", "Order of the stages: transformers, llama.cpp, or stage names "
                       "comma-separated (stages left out follow in the transformers order).")

    def validate(self) -> None:
        object.__setattr__(self, "order", expand_order(self.order))
        parse_breakers(self.dry_sequence_breakers)
        parse_word_bias(self.word_bias)
        if self.dynatemp_min > self.dynatemp_max:
            raise InvalidRequest(f"dynatemp_min must be at most dynatemp_max ({self.dynatemp_max:g}), "
                                 f"got {self.dynatemp_min:g}")


def word_sequences(lm: LanguageModel, entries: list[tuple[str, float]]) -> tuple[tuple[tuple[int, ...], float], ...]:
    """Each (word, bias) as token-id sequences: the word as written and with a leading space (how it
    is written after another word); spellings with an unknown token are left out."""
    out: dict[tuple[int, ...], float] = {}
    unk = getattr(lm.tokenizer, "unk_token_id", None)
    for word, bias in entries:
        found = False
        for text in (word, " " + word):
            ids = tuple(int(i) for i in lm.tokenizer(text, add_special_tokens=False)["input_ids"])
            if ids and unk not in ids:
                out[ids] = bias
                found = True
        if not found:
            raise InvalidRequest(f"word_bias: {word!r} cannot be written with {lm.key}'s vocabulary")
    return tuple(out.items())


def _needs(stage: str, what: str, value: Any) -> Any:
    if value is None:
        raise InvalidRequest(f"{stage} needs the request's {what}")
    return value


# The stages beyond the plain five: (is it on for these params?, build it from params, generator, model).
EXTRA_STAGES: dict[str, tuple[Callable[[Any], bool], Callable[[Any, Any, Any], Any]]] = {
    "typical_p": (lambda p: p.typical_p < 1.0, lambda p, g, lm: TypicalP(p.typical_p)),
    "epsilon": (lambda p: p.epsilon_cutoff > 0, lambda p, g, lm: Epsilon(p.epsilon_cutoff)),
    "eta": (lambda p: p.eta_cutoff > 0, lambda p, g, lm: Eta(p.eta_cutoff)),
    "top_nsigma": (lambda p: p.top_nsigma > 0, lambda p, g, lm: TopNSigma(p.top_nsigma)),
    "xtc": (lambda p: p.xtc_probability > 0,
            lambda p, g, lm: XTC(p.xtc_probability, p.xtc_threshold, _needs("xtc", "generator", g))),
    "dry": (lambda p: p.dry_multiplier > 0,
            lambda p, g, lm: DRY(p.dry_multiplier, p.dry_base, p.dry_allowed_length,
                                 parse_breakers(p.dry_sequence_breakers), _needs("dry", "model", lm).piece)),
    "dynamic_temperature": (lambda p: (p.dynatemp_min, p.dynatemp_max) != (1.0, 1.0),
                            lambda p, g, lm: DynamicTemperature(p.dynatemp_min, p.dynatemp_max,
                                                                p.dynatemp_exponent)),
    "mirostat": (lambda p: p.mirostat_tau > 0, lambda p, g, lm: Mirostat(p.mirostat_tau, p.mirostat_eta, g)),
    "top_h": (lambda p: p.top_h > 0, lambda p, g, lm: TopH(p.top_h)),
    "p_less": (lambda p: bool(p.p_less), lambda p, g, lm: PLess()),
    "adaptive_p": (lambda p: p.adaptive_p_target >= 0,
                   lambda p, g, lm: AdaptiveP(p.adaptive_p_target, p.adaptive_p_decay, g)),
    "no_repeat_ngram": (lambda p: p.no_repeat_ngram_size > 0,
                        lambda p, g, lm: NoRepeatNGram(p.no_repeat_ngram_size)),
    "word_bias": (lambda p: bool(p.word_bias.strip()),
                  lambda p, g, lm: WordBias(word_sequences(_needs("word_bias", "model", lm),
                                                          parse_word_bias(p.word_bias)))),
}


def extra_stages_on(p: SamplerParams) -> list[str]:
    """The stages beyond the plain five (penalty, temperature, top-k, top-p, min-p) that ``p`` turns on."""
    return [name for name, (on, _) in EXTRA_STAGES.items() if on(p)]


def build_sampler_chain(p: SamplerParams, generator: torch.Generator | None = None, lm: LanguageModel | None = None) -> list:
    """The stages of ``p`` in its order, no-ops left out; fresh objects, so state lives with one run.
    ``generator`` feeds XTC's coin; ``lm`` (``piece``, ``tokenizer``, ``key``) serves DRY and word bias."""
    shared = {t.name: t for t in build_chain(ChainParams(
        temperature=p.temperature, top_k=p.top_k, top_p=p.top_p, min_p=p.min_p,
        repetition_penalty=p.repetition_penalty))}
    on = set(extra_stages_on(p))
    chain = [shared.get(name) or (EXTRA_STAGES[name][1](p, generator, lm) if name in on else None)
             for name in p.order.split(",")]
    return [t for t in chain if t is not None]


def forced_step(chain: list) -> bool:
    """Whether the token about to be fed back was forced rather than drawn. A free step's selector
    (multinomial, Gumbel) always draws from the request's generator, and ``forcing.choose`` puts the
    generator back at a forced step; so after a forced step the generator is exactly where the chain
    left it: the state the last stage holding it saw (``seen``). Stages without a generator: never."""
    watchers = [t for t in chain if getattr(t, "seen", None) is not None]
    return bool(watchers) and torch.equal(watchers[-1].generator.get_state(), watchers[-1].seen)


def feed_back(chain: list, record: ChainRecord, chosen: torch.Tensor) -> None:
    """Tell the stateful stages which tokens were chosen ([batch] ids); each adds what it learned to
    the decision it recorded in ``record``, and advances its state for the next step. A forced token
    teaches nothing: the stages that define ``hold`` record the step and keep their state (XTC takes
    its coin back), as if the token had been in the prompt."""
    forced = forced_step(chain)
    for i, t in enumerate(chain):
        if forced and hasattr(t, "hold"):
            t.hold(record.logits[i + 1], chosen, record.decisions[i])
        elif hasattr(t, "feed_back"):
            t.feed_back(record.logits[i + 1], chosen, record.decisions[i])
