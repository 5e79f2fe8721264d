"""What a decoder is handed: the model seam, the prompt, the budget, the seed."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from playground.seam import LanguageModel
from playground.trace import READING_REASON, Trace


class OutOfTime(Exception):
    """Thrown into a strategy at its yield when the request's time budget cut the run there (the engine's
    ``timed``; the trace's finish_reason already says so). A strategy with work to do after its text,
    off the decoder's clock (speculative decoding's plain-decoding reference), catches it, does that work
    and yields its last trace; any other lets it through, which ends it as closing it would."""


class Stopwatch:
    """The decoder's own time: wall-clock time less the spans in which a consumer held the stream.

    The engine pauses it when a strategy yields a trace and resumes it when the consumer asks for
    the next one, so drawing charts between two tokens never counts as decoding time.
    """

    def __init__(self) -> None:
        self._held = 0.0
        self._paused_at: float | None = None

    def now(self) -> float:
        t = time.perf_counter()
        held = self._held + (t - self._paused_at if self._paused_at is not None else 0.0)
        return t - held

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.perf_counter()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._held += time.perf_counter() - self._paused_at
            self._paused_at = None

    @contextmanager
    def held(self) -> Iterator[None]:
        """A one-off span inside a run that is not decoding (measuring the machine's pass costs, as
        loading is not): it counts neither in the run's timing nor against its time budget."""
        if self._paused_at is not None:  # already held
            yield
            return
        self.pause()
        try:
            yield
        finally:
            self.resume()


@dataclass
class DecodeContext:
    lm: LanguageModel  # playground.models.LM
    prompt: str
    prompt_ids: list[int]
    seed: int
    max_new_tokens: int
    top_n: int = 20  # candidates recorded per step (plus the chosen one)
    load_model: Callable[[str], LanguageModel] | None = None  # key -> LM, for drafts and amateurs
    extra: dict[str, Any] = field(default_factory=dict)
    clock: Stopwatch = field(default_factory=Stopwatch)  # read ``clock.now()``, never time.perf_counter()
    forced: dict[int, int] = field(default_factory=dict)  # step -> token id to take there (strategies.forcing)
    grammar: Any = None  # a CompiledGrammar the text must follow (strategies.sampling.grammar), or None
    progress: Callable[[float, str], None] | None = None  # (fraction, message): hears one-off set-up steps
    announce: bool = False  # the consumer takes announcements (``announcement``) between the tokens' traces
    lens: frozenset[int] = frozenset()  # steps whose every layer a token-by-token decoder reads (strategies/lens.py)

    def generator(self, offset: int = 0) -> torch.Generator:
        """A fresh generator seeded from the request (offset separates independent streams)."""
        g = torch.Generator(device=self.lm.device)
        g.manual_seed(self.seed + offset)
        return g

    def report(self, fraction: float, message: str) -> None:
        """Tell ``progress`` (the page's progress line, the CLI's stderr) how far a one-off set-up step is."""
        if self.progress is not None:
            self.progress(fraction, message)

    def announcement(self, trace: Trace, setup: str) -> Trace | None:
        """What a strategy yields just before a one-off set-up step that takes seconds (measuring this
        machine), where the consumer takes announcements (``announce``; else None, nothing to yield):
        ``trace``'s heading with no tokens, finish_reason ``READING_REASON`` and ``extra["setup"]`` =
        ``setup``, which the page's status line shows while the step runs."""
        if not self.announce:
            return None
        out = self.new_trace(trace.strategy, dict(trace.params), list(trace.chain))
        out.finish_reason = READING_REASON
        out.extra["setup"] = setup
        return out

    def new_trace(self, strategy: str, params: dict[str, Any], chain: list[str] | None = None) -> Trace:
        return Trace(model=self.lm.key, strategy=strategy, params=params, seed=self.seed,
                     prompt=self.prompt, prompt_ids=list(self.prompt_ids), chain=chain or [])
