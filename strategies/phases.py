"""Thinking, then answering: a run in two phases, each with its own chain, and a budget for the first.

A model that reasons writes its thinking, closes it with a marker (``</think>`` for Qwen3 and most
others) and then writes its answer. Their cards publish two sampler rows (Qwen3: thinking T 0.6,
top-p 0.95, top-k 20; answer T 0.7, top-p 0.8), and engines let a client cap the thinking:
llama.cpp's ``--reasoning-budget N`` (-1 unrestricted, 0 no thinking) with
``--reasoning-budget-message``, vLLM's ``thinking_token_budget``.

Here:

- **phase_marker** names the close (empty: the tokenizer's own ``</think>`` where it has one as a single
  token; a model without one has no phases unless a marker is named). The tokens up to and including
  the one whose text completes the marker are the thinking phase; the rest are the answer. A model
  that never writes the marker stays in its thinking to the end.
- **answer_params** (a JSON object) overrides the run's parameters for the answer phase: the answer's
  chain is the run's chain with those values (any stage, and the order). Every step records its
  ``phase``, and its stages record the settings they ran with, so the chain view shows the chain
  that ran at that step.
- **thinking_budget** N (-1 off): once N tokens of thinking are written and the marker has not come,
  the decoder forces ``budget_message`` (if any) and then the marker, one token a step. Each forced
  step records ``forced: "budget"`` and the model's own log-probability and rank of that token (1 = its
  top pick), which say how unnatural the cut was. A budget counts committed tokens only: under
  speculative decoding an accepted draft token counts, a rejected one does not.

The trace's ``extra["phases"]`` holds the marker, its ids, the budget, the answer's parameters and
chain, the step the answer began at (``answer_from``, null if it never did) and, for a cut, ``cut``:
the step it came at and the model's probability of the marker's first token there.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.params import Params, param
from strategies.stages import STAGES
from strategies.untrusted_json import loads_untrusted

THINK_CLOSE = "</think>"
MAX_BUDGET = 4096
MAX_MARKER_CHARS = 64
MAX_MESSAGE_CHARS = 400
THINKING, ANSWER = "thinking", "answer"
PHASE_FIELDS = ("phase_marker", "answer_params", "thinking_budget", "budget_message")


@dataclass(frozen=True)
class PhaseParams(Params):
    """The knobs of a run in two phases (see the module docstring)."""

    phase_marker: str = param("", "Phases: the text that closes the thinking (e.g. </think>); tokens up to and "
                              "including it are the thinking phase, the rest the answer. Empty = the model's own "
                              "</think> where its tokenizer has one, else no phases.", noop="")
    answer_params: str = param("", "Phases: the answer's settings as a JSON object of parameters that differ "
                               "from the thinking's (e.g. {\"temperature\": 0.7, \"top_p\": 0.8}). "
                               "Empty = the same chain in both phases.", noop="", brief="Phases: the answer's own settings, as JSON of the parameters that differ.")
    thinking_budget: int = param(-1, "Phases: after this many thinking tokens the decoder forces the marker "
                                 "(llama.cpp's --reasoning-budget, vLLM's thinking_token_budget). -1 = off; "
                                 "0 = no thinking.", low=-1, high=MAX_BUDGET, noop=-1, step=1, ui_max=256, brief="Phases: after this many thinking tokens the marker is forced.")
    budget_message: str = param("", "Phases: text forced before the marker when the budget cuts the thinking "
                                "(llama.cpp's --reasoning-budget-message). Empty = the marker alone.", noop="", brief="Phases: the text forced before the marker when the budget cuts the thinking.")

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.phase_marker) > MAX_MARKER_CHARS:
            raise InvalidRequest(f"phase_marker must be at most {MAX_MARKER_CHARS} characters, "
                                 f"got {len(self.phase_marker)}")
        if len(self.budget_message) > MAX_MESSAGE_CHARS:
            raise InvalidRequest(f"budget_message must be at most {MAX_MESSAGE_CHARS} characters, "
                                 f"got {len(self.budget_message)}")
        overrides = answer_overrides(self)
        object.__setattr__(self, "answer_params", json.dumps(overrides, sort_keys=True) if overrides else "")
        if overrides:
            answer_of(self)  # the answer's values are checked here, with the answer named

    def phased(self) -> bool:
        """Whether the run asks for anything of the phases beyond recording them."""
        return bool(self.answer_params) or self.thinking_budget >= 0


def answer_overrides(p: PhaseParams) -> dict[str, Any]:
    """The answer's parameters that differ from the run's, as given (checked against the Params class)."""
    if not p.answer_params.strip():
        return {}
    try:
        values = loads_untrusted(p.answer_params, "answer_params", max_chars=4000)
    except json.JSONDecodeError as err:
        raise InvalidRequest(f"answer_params must be a JSON object of parameters, got {p.answer_params!r:.200} "
                             f"({err.msg})") from None
    if not isinstance(values, dict):
        raise InvalidRequest(f"answer_params must be a JSON object of parameters, got {p.answer_params!r:.200}")
    names = chain_fields(p)
    unknown = sorted(set(values) - names)
    if unknown and not names:
        raise InvalidRequest(f"answer_params: this strategy has no sampler chain to change in the answer, "
                             f"got {unknown[0]!r}")
    if unknown:
        raise InvalidRequest(f"answer_params: {unknown[0]!r} is not a parameter of the chain; allowed: "
                             f"{', '.join(sorted(names))}")
    return values


def chain_fields(p: PhaseParams) -> set[str]:
    """The parameters of ``p`` that make its chain (every stage's, and the order): what answer_params may set."""
    staged = {name for spec in STAGES.values() for name in spec.params.values()} | {"order"}
    return {f for f in p.to_dict() if f in staged}


def answer_of(p: PhaseParams) -> PhaseParams:
    """The answer phase's Params: the run's with answer_params applied (its own phase fields cleared)."""
    values = {**p.to_dict(), **answer_overrides(p), **{name: PhaseParams.__dataclass_fields__[name].default
                                                      for name in PHASE_FIELDS}}
    try:
        return cast(PhaseParams, type(p).from_dict(values))
    except InvalidRequest as err:
        raise InvalidRequest(f"answer_params: {err}") from None


def single_token(lm: LanguageModel, text: str) -> int | None:
    """The id of ``text`` when the tokenizer holds it whole as one token, else None."""
    tok = lm.tokenizer
    token_id = tok.convert_tokens_to_ids(text)
    if isinstance(token_id, int) and token_id != tok.unk_token_id and 0 <= token_id < lm.vocab_size:
        return token_id
    return None


def text_ids(lm: LanguageModel, text: str, what: str) -> tuple[int, ...]:
    """``text`` as the model's tokens: one token where the tokenizer holds it whole, else its encoding."""
    one = single_token(lm, text)
    if one is not None:
        return (one,)
    ids = [int(i) for i in lm.tokenizer(text, add_special_tokens=False)["input_ids"]]
    unk = lm.tokenizer.unk_token_id
    if not ids or (unk is not None and unk in ids):
        raise InvalidRequest(f"{what} must be text {lm.key} can write, got {text!r}")
    return tuple(ids)


@dataclass
class Plan:
    """A run's phases, resolved against its model: the marker, its ids, the budget's forced ids."""

    marker: str
    marker_ids: tuple[int, ...]
    budget: int  # -1: none
    forced_ids: tuple[int, ...]  # the budget message's ids, then the marker's
    answer: PhaseParams | None  # None: the answer runs the thinking's chain
    overrides: dict[str, Any] = field(default_factory=dict)  # the answer's values that differ from the run's

    def record(self, answer_chain: list[str] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"marker": self.marker, "marker_ids": list(self.marker_ids), "budget": self.budget,
                               "forced_ids": list(self.forced_ids), "answer_from": None, "cut": None}
        if self.answer is not None:
            out["answer_params"] = self.overrides
            out["answer_chain"] = answer_chain or []
        return out


def plan(lm: LanguageModel, p: Any) -> Plan | None:
    """The phases ``p`` asks for on ``lm`` (None: no phases: the Params have no phase knobs, or no marker is
    named and the tokenizer has no ``</think>``)."""
    if not isinstance(p, PhaseParams):
        return None
    marker = p.phase_marker
    if not marker:
        if single_token(lm, THINK_CLOSE) is None:
            if p.phased():
                asked = (f"thinking_budget {p.thinking_budget}" if p.thinking_budget >= 0 else "answer_params")
                raise InvalidRequest(f"{asked} needs a phase marker: {lm.key} has no thinking close ({THINK_CLOSE}) "
                                     f"in its vocabulary; name the text that ends its thinking in phase_marker "
                                     f"(e.g. 'Answer:')")
            return None
        marker = THINK_CLOSE
    marker_ids = text_ids(lm, marker, "phase_marker")
    message = text_ids(lm, p.budget_message, "budget_message") if p.budget_message else ()
    answer = answer_of(p) if p.answer_params else None
    return Plan(marker, marker_ids, p.thinking_budget, message + marker_ids, answer, answer_overrides(p))


@dataclass
class Clock:
    """Where one sequence is: its phase, how many thinking tokens it has written, what the budget forces next.

    ``next_forced()`` before a step: the token the budget forces there, or None. ``add(id, piece)`` after
    it: the committed token (forced or not); returns the phase the token belonged to."""

    plan: Plan
    phase: str = THINKING
    thinking: int = 0
    queue: list[int] = field(default_factory=list)
    tail: str = ""  # the end of the text so far, as long as the marker (to find it across tokens)
    cut_at: int | None = None  # the step the budget's first forced token came at
    steps: int = 0

    def next_forced(self) -> int | None:
        if self.phase != THINKING:
            return None
        if not self.queue and self.cut_at is None and 0 <= self.plan.budget <= self.thinking:
            self.queue = list(self.plan.forced_ids)
            self.cut_at = self.steps
        return self.queue[0] if self.queue else None

    def add(self, token_id: int, piece: str) -> str:
        phase = self.phase
        if self.queue and token_id == self.queue[0]:
            self.queue.pop(0)
        self.steps += 1
        if phase == THINKING:
            self.thinking += 1
            text = self.tail + piece
            if self.plan.marker in text and not self.queue:
                self.phase = ANSWER
            self.tail = text[-len(self.plan.marker):]
        return phase

    def copy(self) -> "Clock":
        return Clock(self.plan, self.phase, self.thinking, list(self.queue), self.tail, self.cut_at, self.steps)


def model_view(raw_logits: torch.Tensor, token_id: int) -> dict[str, Any]:
    """The model's own log-probability and rank (1 = its top pick) of a forced token, from the raw logits."""
    logp = raw_logits.float().log_softmax(-1)
    value = float(logp[token_id])
    rank = 1 + int((logp > logp[token_id]).sum())
    return {"model_logprob": value if math.isfinite(value) else None, "model_rank": rank}


def note_step(trace_phases: dict[str, Any], step_extra: dict[str, Any], clock: Clock, phase: str, index: int,
              forced: bool, raw_logits: torch.Tensor, token_id: int) -> None:
    """Write one step's phase (and, for a budget's forced token, the model's view of it) into the records."""
    note_view(trace_phases, step_extra, clock, phase, index, model_view(raw_logits, token_id) if forced else None)


def note_view(trace_phases: dict[str, Any], step_extra: dict[str, Any], clock: Clock, phase: str, index: int,
              view: dict[str, Any] | None) -> None:
    """Write one step's phase into the records; ``view``: a forced token's ``model_view`` (None: not forced)."""
    step_extra["phase"] = phase
    if view is not None:
        step_extra.update({"forced": "budget", **view})
        if index == clock.cut_at:
            p = 0.0 if view["model_logprob"] is None else math.exp(view["model_logprob"])
            trace_phases["cut"] = {"step": index, "thinking_tokens": clock.thinking - 1, "first_forced_p": p,
                                   "marker_p": p if len(clock.plan.forced_ids) == len(clock.plan.marker_ids)
                                   else None}
    if phase == THINKING and clock.phase == ANSWER and trace_phases.get("answer_from") is None:
        trace_phases["answer_from"] = index + 1
