"""The full sampler chain of the sampling strategies: every stage, its knobs, two preset orders.

``SamplerParams`` extends the shared ``ChainParams`` (penalty, temperature, top-k, top-p, min-p)
with presence and frequency penalties, typical-p, epsilon, eta, top-nσ, XTC, DRY, dynamic temperature,
mirostat v2, no-repeat n-gram, bias by word, top-H, p-less, adaptive-p, the green-list watermark and SynthID Text. Each has a no-op value at which
it drops out of the chain.

``order`` names the stages in the order they run, or a preset:
- ``transformers``: the order ``generate`` applies its processors and warpers in (sequence bias,
  repetition penalty, no-repeat n-gram; then temperature, top-k, top-p, min-p, typical, epsilon,
  eta; top-H right after temperature, where transformers 5.x puts ``TopHLogitsWarper``), the stages
  it lacks placed beside their kin (p-less beside min-p; presence and frequency right after the repetition
  penalty, where vLLM applies them); the watermark after every stage that
  reshapes or cuts, where ``generate`` appends its ``WatermarkLogitsProcessor`` ("after all logits
  processing"), and before mirostat and adaptive-p, which pick the token; SynthID right after it, where
  ``generate`` appends its ``SynthIDTextWatermarkLogitsProcessor`` (the same slot, and the paper's: the
  tournament draws from the distribution that would be sampled, after top-k and temperature, so that
  averaged over keys the token's distribution is exactly that one);
- ``llama.cpp``: llama.cpp's default sampler chain
  ``penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature`` (its ``penalties`` is the repetition
  penalty, then presence and frequency, one stage there, two here), with mirostat and adaptive-p
  last (there they pick the token, so they must end the chain) and the stages it lacks beside their
  kin (top-H beside typical, p-less beside min-p). llama.cpp has no watermark: it goes after temperature,
  last before the stages that pick, as in the transformers order, so that delta raises the green odds
  of the very distribution drawn from by e^delta (the paper's analysis) rather than being divided by
  the temperature or cut by a truncation after it; SynthID follows it for the same reason.
With temperature 0 (greedy), each watermark that is on moves just before temperature
(``watermarks_before_greedy``): temperature 0 keeps the argmax of what it receives, and the watermark
must be able to change that argmax, as in transformers' greedy search.
Stages an order leaves out follow the listed ones, in the transformers order.

Each stage is registered on its class (strategies/stages.py): the parameters below it reads, whether
it truncates; a stage is on when one of its parameters is away from its no-op value. Three stages need
more than logits: XTC draws its coin from the request's generator, and mirostat and adaptive-p keep a
state (mu; a running average) that ``accept`` advances with the chosen token; so the chain is built once
per run, with that generator and the model (DRY reads token text, word bias encodes words). A forced
step (strategies/forcing.py) takes nothing from them: XTC's coin is taken back and the states stay, so
forcing a prefix is the run whose prompt holds it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.g_values import (
    DEFAULT_HISTORY_SIZE,
    DEFAULT_NGRAM_LEN,
    DEFAULT_TABLE_SEED,
    DEFAULT_TABLE_SIZE,
    MAX_TABLE_SIZE,
)
from strategies.green_lists import DEFAULT_KEY, SCHEMES
from strategies.loops import LoopStopParams
from strategies.params import param
from strategies.phases import PhaseParams
from strategies.sampling import adaptive, synthid, truncations, watermark  # noqa: F401  (their stages register themselves)
from strategies.sampling.chain import STAGE_NAMES, ChainParams, build_chain
from strategies.sampling.repeats import DEFAULT_BREAKERS, parse_breakers, parse_word_bias
from strategies.stages import STAGES, TransformBase, declare, stages_on
from strategies.watch import WatchParams

PRESETS: dict[str, tuple[str, ...]] = {
    "transformers": ("word_bias", "penalty", "presence_frequency", "no_repeat_ngram", "dry", "temperature",
                     "dynamic_temperature", "top_h", "top_k", "top_p", "min_p", "p_less", "typical_p", "epsilon",
                     "eta", "top_nsigma", "xtc", "watermark", "synthid", "mirostat", "adaptive_p"),
    "llama.cpp": ("word_bias", "penalty", "presence_frequency", "no_repeat_ngram", "dry", "top_nsigma", "top_k",
                  "typical_p", "top_h", "top_p", "min_p", "p_less", "xtc", "epsilon", "eta", "dynamic_temperature",
                  "temperature", "watermark", "synthid", "mirostat", "adaptive_p"),
}
SAMPLER_STAGES = PRESETS["transformers"]
# the knobs that watch a run rather than shape its distribution: they belong to no stage of the chain
WATCHING_FIELDS = frozenset(f.name for cls in (LoopStopParams, WatchParams) for f in dataclasses.fields(cls))
MAX_SYNTHID_KEYS = 64  # tournament layers; the paper uses 30
MAX_NGRAM_LEN = 32


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


@dataclass(frozen=True)
class SamplerParams(PhaseParams, LoopStopParams, WatchParams, ChainParams):
    """Every stage of the sampling chain (see the module docstring for the order), and the knobs that
    watch the run: loops (strategies/loops.py; one may end the run) and a watch-list (strategies/watch.py)."""

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
                                       "containing one ends a repeat.", brief="DRY: the strings that break a repeat, quoted and comma-separated.")
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
    presence_penalty: float = param(0.0, "Presence penalty (OpenAI, vLLM, llama.cpp): subtract this from the logit "
                                    "of every token the run has generated (within penalty_last_n); the prompt is "
                                    "not counted. Negative favours repeats. 0 = off.", low=-2.0, high=2.0, noop=0.0,
                                    step=0.05, brief="Presence penalty: subtract this from every token the run has generated.")
    frequency_penalty: float = param(0.0, "Frequency penalty: subtract this × the times a token was generated "
                                     "(within penalty_last_n). 0 = off.", low=-2.0, high=2.0, noop=0.0, step=0.05)
    penalty_last_n: int = param(-1, "Presence and frequency penalties count the run's last n tokens: -1 = all "
                                "(vLLM, the OpenAI API), 64 = llama.cpp's default, 0 = none. The repetition "
                                "penalty reads the whole text.", low=-1, high=1_000_000, step=1, ui_max=512, brief="How many of the run's last tokens the penalties count (-1: all; 0: none).")
    top_h: float = param(0.0, "Top-H: keep the top tokens while their cumulative entropy stays at most h × the "
                         "entropy (over the top 100, as transformers computes it). 0 = off.", low=0.0, high=1.0,
                         noop=0.0, step=0.01, brief="Top-H: keep top tokens while their entropy stays at most h × the whole entropy.")
    p_less: bool = param(False, "p-less: keep the tokens with p ≥ Σp², the chance two draws agree; no parameter, "
                         "the top token always passes. Off = off.", noop=False)
    adaptive_p_target: float = param(-1.0, "Adaptive-p: favour tokens near this probability, steering the average "
                                     "of the chosen tokens' probabilities to it; runs last. Negative = off.",
                                     low=-1.0, high=1.0, noop=-1.0, step=0.01, brief="Adaptive-p: steer the chosen tokens' average probability to this target.")
    adaptive_p_decay: float = param(0.9, "Adaptive-p: decay of the running average (history about 1/(1 − decay) "
                                    "tokens). A forced token does not move it.", low=0.0, high=0.99, step=0.01)
    watermark_delta: float = param(0.0, "Watermark (Kirchenbauer et al. 2023): add delta to the logits of a green "
                                   "list drawn from the key and the previous token; a detector that knows the key "
                                   "counts the green tokens. 0 = off.", low=0.0, high=100.0, noop=0.0, step=0.1,
                                   ui_max=10.0, brief="Watermark (Kirchenbauer et al. 2023): add delta to the green list's logits.")
    watermark_gamma: float = param(0.25, "Watermark: the green list's share of the vocabulary.", low=0.0, high=1.0,
                                   low_open=True, high_open=True, step=0.05)
    watermark_scheme: str = param("lefthash", "Watermark: lefthash (the previous token seeds the green list) or "
                                  "selfhash (each of the 40 top candidates seeds its own), as transformers names them.",
                                  choices=SCHEMES, brief="Watermark: which token seeds the green list, lefthash or selfhash.")
    watermark_key: int = param(DEFAULT_KEY, "Watermark: the secret key that seeds the green lists (transformers' "
                               "default key).", low=0, high=2**31 - 1, step=1)
    synthid_keys: str = param("", "SynthID Text (Dathathri et al. 2024): integer keys, comma-separated, one per "
                              "tournament layer; tokens whose g-values (bits hashed from a key, the last "
                              "ngram_len − 1 tokens and the token) are 1 win more often, while over keys the "
                              "distribution stays the model's. Empty = off.", noop="")
    synthid_ngram_len: int = param(DEFAULT_NGRAM_LEN, "SynthID: the n-gram that seeds a token's g-values: the token "
                                   "and the ngram_len − 1 before it (5, as the paper and transformers).", low=2,
                                   high=MAX_NGRAM_LEN, step=1, ui_max=10, brief="SynthID: the n-gram (this token and those before it) that seeds the g-values.")
    synthid_context_history_size: int = param(DEFAULT_HISTORY_SIZE, "SynthID: how many recent contexts are "
                                              "remembered; a step whose context is one of them is not "
                                              "watermarked (transformers' default 1024).", low=1, high=2**20,
                                              step=1, ui_max=4096)
    synthid_sampling_table_size: int = param(DEFAULT_TABLE_SIZE, "SynthID: size of the table of random bits the "
                                             "hashes index (transformers' default 2^16).", low=2,
                                             high=MAX_TABLE_SIZE, step=1)
    synthid_sampling_table_seed: int = param(DEFAULT_TABLE_SEED, "SynthID: seed of that table (transformers' "
                                             "default 0).", low=0, high=2**31 - 1, step=1)
    order: str = param("transformers", "Order of the stages: transformers, llama.cpp, or stage names "
                       "comma-separated (stages left out follow in the transformers order).", brief="The stages' order: transformers, llama.cpp, or stage names comma-separated.")

    def validate(self) -> None:
        object.__setattr__(self, "order", expand_order(self.order))
        parse_breakers(self.dry_sequence_breakers)
        parse_word_bias(self.word_bias)
        # each switch at one off value, the no-op its stage is read off by (strategies/stages.py)
        object.__setattr__(self, "word_bias", self.word_bias.strip())
        if self.adaptive_p_target < 0:
            object.__setattr__(self, "adaptive_p_target", -1.0)
        object.__setattr__(self, "synthid_keys", checked_keys(self.synthid_keys))
        on = {"watermark": self.watermark_delta != 0, "synthid": self.synthid_keys != ""}
        object.__setattr__(self, "order", watermarks_before_greedy(self.order, self.temperature, on))
        if self.dynatemp_min > self.dynatemp_max:
            raise InvalidRequest(f"dynatemp_min must be at most dynatemp_max ({self.dynatemp_max:g}), "
                                 f"got {self.dynatemp_min:g}")


declare(SamplerParams)


def watermarks_before_greedy(order: str, temperature: float, on: dict[str, bool]) -> str:
    """``order`` with each watermark that is ``on`` moved just before temperature when temperature is 0
    (greedy): temperature 0 keeps only the argmax of what it receives, so a watermark after it could change
    nothing, while transformers' greedy search takes the argmax after its watermark."""
    names = order.split(",")
    if temperature != 0:
        return order
    for name in ("watermark", "synthid"):
        if on[name] and names.index(name) > names.index("temperature"):
            names.remove(name)
            names.insert(names.index("temperature"), name)
    return ",".join(names)


def checked_keys(text: str) -> str:
    """SynthID's keys, comma-separated integers in [0, 2^63 - 1], at most MAX_SYNTHID_KEYS, written back
    without spaces; empty (off) stays empty."""
    parts = [k.strip() for k in text.split(",")]
    if parts == [""]:
        return ""
    try:
        keys = [int(k) for k in parts]
    except ValueError:
        keys = []
    if not keys or any(not 0 <= k < 2**63 for k in keys):
        raise InvalidRequest(f"synthid_keys must be integers in [0, 2^63 - 1], comma-separated, got {text!r:.200}")
    if len(keys) > MAX_SYNTHID_KEYS:
        raise InvalidRequest(f"synthid_keys must hold 1 to {MAX_SYNTHID_KEYS} keys (one per tournament layer), "
                             f"got {len(keys)}")
    return ",".join(str(k) for k in keys)


def extra_stages_on(p: SamplerParams) -> list[str]:
    """The stages beyond the plain five (penalty, temperature, top-k, top-p, min-p) that ``p`` turns on."""
    return [n for n in stages_on(p, SAMPLER_STAGES) if n not in STAGE_NAMES]


def plain_order(params: Any) -> str:
    """The order of the five plain stages as ``params`` puts them."""
    names = [n for n in params.order.split(",") if n in STAGE_NAMES]
    return ",".join(names + [n for n in STAGE_NAMES if n not in names])


def plain_reference(p: SamplerParams) -> list[TransformBase] | None:
    """The chain whose distribution a run of ``p`` draws each token from, for sample many's exact reference:
    the plain five stages in ``p``'s order; None when ``p`` turns any other stage on (sample many's batched
    rows and its enumeration cover the plain five only)."""
    if extra_stages_on(p):
        return None
    return build_chain(ChainParams(**{f.name: getattr(p, f.name) for f in dataclasses.fields(ChainParams)
                                      if f.name != "order"}, order=plain_order(p)))


def build_sampler_chain(p: SamplerParams, generator: torch.Generator | None = None,
                        lm: LanguageModel | None = None) -> list[TransformBase]:
    """The stages of ``p`` in its order, no-ops left out; fresh objects, so state lives with one run.
    ``generator`` feeds XTC's coin; ``lm`` (``piece``, ``tokenizer``, ``key``) serves DRY and word bias, its ``eos_ids``
    SynthID's running score."""
    return [STAGES[name].build(p, generator, lm) for name in stages_on(p, p.order.split(","))]
