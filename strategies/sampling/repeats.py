"""Stages that read the text so far: presence and frequency penalties, DRY, no-repeat n-gram and bias by word.

Shapes and contract as ``TransformBase`` (strategies/sampling/transforms.py) states them. Decisions
(per row unless a plain number):
- dry: ``multiplier``, ``base``, ``allowed_length``; ``penalty`` [batch, vocab] (what was subtracted
  from each logit, 0 where nothing); ``ids`` [batch, vocab] (the tokens penalised that an earlier stage
  had not cut); ``match_length``
  (the longest repeat found); ``span_start``, ``span_end``: the context positions [start, end) of the
  earlier occurrence of that repeat, and ``repeat_start``: where its copy at the end of the context
  begins (-1 when there is none);
- presence_frequency: ``presence``, ``frequency``, ``last_n``; ``counted`` [batch] (the run's tokens in the
  window); ``touched`` [batch] (distinct ids penalised); ``count`` [batch, vocab] (each token's count in the
  window); ``penalty`` [batch, vocab] (what was subtracted from each logit); ``ids`` [batch, vocab] (the
  tokens penalised that an earlier stage had not cut);
- no_repeat_ngram: ``n``; ``ids`` [batch, vocab] (the tokens banned); ``banned`` (how many);
- word_bias: ``bias`` [batch, vocab] (what was added to each logit); ``ids`` [batch, vocab] (the tokens
  biased); ``banned`` (how many got -inf).

A stage that would remove every token keeps the most probable one it received.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.sampling.transforms import NEG_INF
from strategies.stages import Decision, Outcome, TransformBase, stage
from strategies.untrusted_json import loads_untrusted

DEFAULT_BREAKERS = '"\\n", ":", "\\"", "*"'
BIAS_LIMIT = 100.0


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


def _spare_one(out: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``out`` with, in every row left without a finite logit, the argmax of ``logits`` restored."""
    empty = ~torch.isfinite(out).any(dim=-1)
    if not bool(empty.any()):
        return out
    top = logits.argmax(dim=-1, keepdim=True)
    restored = out.scatter(-1, top, logits.gather(-1, top))
    return torch.where(empty[..., None], restored, out)


FLOAT_MAX_LOG = 88.7228391  # log of float32's largest value: DRY's exponent is capped at it, as llama.cpp does


def dry_exponent_cap(base: float) -> int | None:
    """The largest exponent n - allowed_length DRY raises ``base`` to (None: no cap, base ~ 1), so
    base^exponent stays below float32's largest value: llama.cpp's int(log(FLT_MAX) / log(base))."""
    return int(FLOAT_MAX_LOG / math.log(base)) if base > 1.000001 else None


def presence_frequency_penalised(logits: torch.Tensor, count: torch.Tensor, presence: float,
                                 frequency: float) -> tuple[torch.Tensor, torch.Tensor]:
    """logits - (presence x (count > 0) + frequency x count), and that penalty; ``logits`` and ``count``
    [batch, vocab]. A finite logit stays finite (clamped to the dtype's range), -inf stays -inf."""
    penalty = (presence * (count > 0) + frequency * count).to(logits.dtype)
    big = torch.finfo(logits.dtype).max
    return torch.where(torch.isfinite(logits), (logits - penalty).clamp(-big, big), logits), penalty


@stage("presence_frequency", params={"presence": "presence_penalty", "frequency": "frequency_penalty",
                                     "last_n": "penalty_last_n"}, truncates=False,
       on={"presence_penalty": 0.5, "frequency_penalty": 0.5})
@dataclass(frozen=True)
class PresenceFrequency(TransformBase):
    """Presence and frequency penalties, as the OpenAI API, vLLM and llama.cpp define them: additive,
    over the tokens the run has generated,

        logit[t] -= presence x (count[t] > 0) + frequency x count[t],

    ``count[t]`` the times token t occurs among the run's last ``last_n`` tokens (-1: all of them; 0: none,
    so nothing changes). A negative value favours repeats. The prompt is not counted, as vLLM counts
    only the output for these two (its repetition penalty reads prompt and output; the playground's
    ``penalty`` stage reads the whole context, as transformers'). Tokens forced into the run count:
    the text holds them, so forcing a run's own first tokens gives that run back.

    How the engines differ, as their sources read:
    - vLLM (``apply_penalties`` in vllm/model_executor/layers/utils.py): the counts are taken over
      every output token so far, no window; the order in its sampler is repetition, frequency,
      presence, after the logit bias and before temperature.
    - llama.cpp (``llama_sampler_penalties`` in src/llama-sampling.cpp): one stage holds the repeat,
      frequency and presence penalties, applied to a token in that order, and all three count the
      same window: the last ``penalty_last_n`` tokens the sampler was told of (a ring buffer filled by
      ``accept``). Its default is 64; 0 disables the stage; -1 means the context size (resolved by
      its ``--repeat-last-n`` help; the stage's constructor itself clamps a negative to 0).
      llama-server tells the sampler every prompt token before the first draw, so there the window
      holds the prompt's tail too until generated tokens push it out; here it holds the run's tokens
      only. In llama.cpp's default sampler order the penalties stage comes first.
    So ``last_n`` -1 gives vLLM's and the OpenAI API's rule, and ``last_n`` 64 gives llama.cpp's once the
    run has 64 tokens of its own.

    The stage keeps the run's tokens (``accept`` adds each chosen one); ``decide`` only reads them.
    A finite logit stays finite (clamped to the dtype's range); a token cut before stays cut.
    """

    presence: float
    frequency: float = 0.0
    last_n: int = -1
    generated: list = field(default_factory=list, compare=False)  # the run's tokens, one [batch] tensor each

    def counts(self, batch: int, vocab: int, device: torch.device) -> torch.Tensor:
        """[batch, vocab] long: each token's count among the run's last ``last_n`` tokens."""
        window = self.generated if self.last_n < 0 else self.generated[len(self.generated) - self.last_n:]
        out = torch.zeros(batch, vocab, dtype=torch.long, device=device)
        if not window or self.last_n == 0:
            return out
        ids = torch.stack([w.to(device) for w in window], dim=1)
        return out.scatter_add(1, ids, torch.ones_like(ids))

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        batch, vocab = logits.shape
        count = self.counts(batch, vocab, logits.device)
        out, penalty = presence_frequency_penalised(logits, count, self.presence, self.frequency)
        hit = (count > 0) & torch.isfinite(logits)
        return out, {"presence": self.presence, "frequency": self.frequency, "last_n": self.last_n,
                     "counted": count.sum(-1), "touched": (count > 0).sum(-1), "count": count,
                     "penalty": torch.where(hit, penalty, torch.zeros_like(penalty)), "ids": hit}

    def accept(self, outcome: Outcome) -> Decision:
        self.generated.append(outcome.chosen.detach().reshape(-1).long())
        return {}


@stage("dry", params={"multiplier": "dry_multiplier", "base": "dry_base", "allowed_length": "dry_allowed_length",
                     "breakers": "dry_sequence_breakers"}, truncates=False, on={"dry_multiplier": 0.8})
@dataclass
class DRY(TransformBase):
    """DRY, "don't repeat yourself" (p-e-w's sampler, as text-generation-webui and llama.cpp document
    it): a token that would extend a repeat of length n >= ``allowed_length`` (the end of the context
    already appeared earlier, followed by that token) has ``multiplier x base^(n - allowed_length)``
    subtracted from its logit.

    Sequence breakers, as llama.cpp treats them: the repeating suffix starts after the last breaker in
    the context, whether a single token's text holds it (newline, colon, quote, asterisk by default)
    or it is written across several tokens ("###" as "##" then "#"); and a token whose own text holds
    a breaker is never penalised (it would end the repeat).

    Edges: the exponent is capped at ``dry_exponent_cap(base)`` (llama.cpp's clamp, so a repeat of any
    length stays finite), and the penalty at the largest value of the logits' dtype, so a penalised
    token keeps a finite logit: DRY pushes down, it never cuts.

    ``piece(id)`` gives a token's text; pieces and whether a token breaks are cached per id.
    """

    multiplier: float
    base: float
    allowed_length: int
    breakers: tuple[str, ...]
    piece: Callable[[int], str]
    _pieces: dict[int, str] = field(default_factory=dict, repr=False)
    _breaks: dict[int, bool] = field(default_factory=dict, repr=False)

    @classmethod
    def from_settings(cls, settings: dict[str, Any], generator: torch.Generator | None = None,
                      lm: LanguageModel | None = None) -> "DRY":
        """The breakers come as the request writes them (quoted, comma-separated); ``lm.piece`` spells tokens."""
        if lm is None:
            raise InvalidRequest("dry needs the request's model")
        return cls(**{**settings, "breakers": parse_breakers(settings["breakers"])}, piece=lm.piece)

    def _text(self, token_id: int) -> str:
        text = self._pieces.get(token_id)
        if text is None:
            text = self._pieces[token_id] = self.piece(token_id)
        return text

    def _is_breaker(self, token_id: int) -> bool:
        hit = self._breaks.get(token_id)
        if hit is None:
            text = self._text(token_id)
            hit = self._breaks[token_id] = any(b in text for b in self.breakers)
        return hit

    def _breaker_end(self, ids: list[int], k: int, width: int) -> int | None:
        """The last token of a breaker that starts in token ``k``'s text and runs on into the tokens
        after it (None when none does); ``width`` is the longest breaker's length in characters."""
        head = self._text(ids[k])
        text, ends = head, [len(head)]
        while len(text) - len(head) < width - 1 and k + len(ends) < len(ids):
            text += self._text(ids[k + len(ends)])
            ends.append(len(text))
        last = None
        for b in self.breakers:
            start = text.find(b)
            while 0 <= start < len(head):
                stop = start + len(b)
                if stop <= len(text):
                    token = k + next(j for j, e in enumerate(ends) if e >= stop)
                    last = token if last is None else max(last, token)
                start = text.find(b, start + 1)
        return last

    def _tail(self, ids: list[int]) -> int:
        """How many tokens at the end of ``ids`` follow the last sequence breaker (all, when none)."""
        width = max(len(b) for b in self.breakers) if self.breakers else 0
        for k in range(len(ids) - 1, -1, -1):
            if self._is_breaker(ids[k]):
                return len(ids) - 1 - k
            end = self._breaker_end(ids, k, width) if width > 1 else None
            if end is not None:
                return len(ids) - 1 - end
        return len(ids)

    def _row(self, ids: list[int]) -> tuple[dict[int, int], tuple[int, int, int, int]]:
        """token -> the longest repeat it would extend; and (length, span start, span end, repeat
        start) of the longest repeat overall."""
        end = len(ids)
        tail = self._tail(ids)  # the suffix that can repeat stops at the last breaker
        lengths: dict[int, int] = {}
        best = (0, -1, -1, -1)
        for j in range(1, end):  # ids[j] followed an earlier copy ending at j - 1
            n = 0
            while n < min(j, tail) and ids[j - 1 - n] == ids[end - 1 - n]:
                n += 1
            if n and n > lengths.get(ids[j], 0):
                lengths[ids[j]] = n
            if n > best[0]:
                best = (n, j - n, j, end - n)
        return lengths, best

    def _penalty(self, n: int, limit: float) -> float:
        exponent = n - self.allowed_length
        cap = dry_exponent_cap(self.base)
        if cap is not None:
            exponent = min(exponent, cap)
        return min(self.multiplier * self.base ** exponent, limit)

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        penalty = torch.zeros_like(logits)
        limit = float(torch.finfo(logits.dtype).max)
        spans = []
        for r, row in enumerate(context.tolist()):
            lengths, best = self._row(row)
            for token, n in lengths.items():
                if n >= self.allowed_length and not self._is_breaker(token):
                    penalty[r, token] = self._penalty(n, limit)
            spans.append(best)
        span = torch.tensor(spans, dtype=torch.long, device=logits.device).view(-1, 4)
        hit = (penalty > 0) & torch.isfinite(logits)  # a token cut before stays cut
        decision = {"multiplier": self.multiplier, "base": self.base, "allowed_length": self.allowed_length,
                    "penalty": penalty, "ids": hit, "match_length": span[:, 0],
                    "span_start": span[:, 1], "span_end": span[:, 2], "repeat_start": span[:, 3]}
        out = torch.where(hit, (logits - penalty).clamp(min=-limit), logits)
        return out, decision


@stage("no_repeat_ngram", params={"n": "no_repeat_ngram_size"}, truncates=True, on={"no_repeat_ngram_size": 2})
@dataclass(frozen=True)
class NoRepeatNGram(TransformBase):
    """Ban every token that would complete an n-gram already in the context (prompt included): the
    last n - 1 tokens are looked up among the context's earlier windows of n - 1, and each token that
    followed one is banned (Paulus et al. 2017 block repeated trigrams this way)."""

    n: int

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        banned = torch.zeros_like(logits, dtype=torch.bool)
        for r, ids in enumerate(context.tolist()):
            if len(ids) < self.n:
                continue
            prefix = ids[len(ids) - self.n + 1:]
            for i in range(len(ids) - self.n + 1):
                if ids[i:i + self.n - 1] == prefix:
                    banned[r, ids[i + self.n - 1]] = True
        out = _spare_one(logits.masked_fill(banned, NEG_INF), logits)
        banned = ~torch.isfinite(out) & torch.isfinite(logits)
        return out, {"n": self.n, "ids": banned, "banned": banned.sum(-1)}


@stage("word_bias", params={"sequences": "word_bias"}, truncates=True, on={"word_bias": "the=-2, a"})
@dataclass(frozen=True)
class WordBias(TransformBase):
    """Add a bias to the logit of the token that would complete a word. ``sequences`` pairs the
    token ids of a word (one way of writing it) with its bias; the bias goes to the last id when the
    context ends with the ids before it (a one-token word: always). Bias -inf bans the word.
    Biases of several entries on one token add up."""

    sequences: tuple[tuple[tuple[int, ...], float], ...]

    @classmethod
    def from_settings(cls, settings: dict[str, Any], generator: torch.Generator | None = None,
                      lm: LanguageModel | None = None) -> "WordBias":
        """The request writes words ('word=bias, ...'); ``lm``'s tokenizer spells them as token ids."""
        if lm is None:
            raise InvalidRequest("word_bias needs the request's model")
        return cls(word_sequences(lm, parse_word_bias(settings["sequences"])))

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        bias = torch.zeros_like(logits)
        touched = torch.zeros_like(logits, dtype=torch.bool)
        for r, ids in enumerate(context.tolist()):
            for seq, value in self.sequences:
                head = list(seq[:-1])
                if len(head) <= len(ids) and (not head or ids[len(ids) - len(head):] == head):
                    bias[r, seq[-1]] += value
                    touched[r, seq[-1]] = True
        out = _spare_one(logits + bias, logits)
        banned = ~torch.isfinite(out) & torch.isfinite(logits)
        return out, {"bias": bias, "ids": touched, "banned": banned.sum(-1)}
