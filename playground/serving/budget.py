"""What one request may spend on a shared server: seconds of decoding, and rows x tokens for beams.

One worker serves every model request in turn, so one long run makes every other
visitor wait. The engine checks the time budget between two steps (where Stop
lands too): when it is spent, the strategy is closed, the trace so far is kept
and its ``finish_reason`` is ``"time budget"``. The seconds counted are the
decoder's own clock, the one the trace's ``timing.seconds`` reports: the page
drawing and sending a token while the decoder waits never counts. Beam-like
strategies advance ``num_beams`` (x ``num_prefixes``) rows per token, so their
cost is refused up front when rows x ``max_new_tokens`` exceeds a cap; the
message names the numbers.

A Space (``$SPACE_ID`` set) gets a time budget by default; a local server
(``make run``) and the command line run unlimited unless asked
(``$PLAYGROUND_TIME_BUDGET``, ``--time-budget``).
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from playground.errors import InvalidRequest

TIME_ENV = "PLAYGROUND_TIME_BUDGET"
ROWS_ENV = "PLAYGROUND_MAX_ROW_TOKENS"
DEFAULT_SECONDS = 60.0  # a Space's: about 900 SmolLM2 tokens on a free CPU Space; a queue of a few visitors stays short
SPACE_ENV = "SPACE_ID"  # set on a Hugging Face Space
DEFAULT_ROW_TOKENS = 8192  # e.g. 16 beams x 512 tokens, or 8 prefixes x 4 beams x 256 tokens
FINISH_REASON = "time budget"


def env_number(name: str, default: float) -> float:
    """``$name`` as a number >= 0 (0 = unlimited), else ``default``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise InvalidRequest(f"${name} must be a number >= 0 (0 = unlimited), got {raw!r}")
    return value


@dataclass(frozen=True)
class Budget:
    """``seconds``: wall-clock decoding time per request; ``row_tokens``: rows x max_new_tokens for
    beam-like strategies. None means unlimited."""

    seconds: float | None = None
    row_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds > 0):
            raise InvalidRequest(f"time budget must be a number of seconds > 0, got {self.seconds}")
        if self.row_tokens is not None and self.row_tokens < 1:
            raise InvalidRequest(f"row-token cap must be an integer >= 1, got {self.row_tokens}")

    @classmethod
    def from_env(cls) -> "Budget":
        """``$PLAYGROUND_TIME_BUDGET`` seconds and ``$PLAYGROUND_MAX_ROW_TOKENS`` (0 = unlimited). Unset, the
        time budget is DEFAULT_SECONDS on a Space (a shared server) and unlimited elsewhere."""
        seconds = env_number(TIME_ENV, DEFAULT_SECONDS if os.environ.get(SPACE_ENV) else 0.0)
        rows = env_number(ROWS_ENV, DEFAULT_ROW_TOKENS)
        return cls(seconds or None, int(rows) or None)

    def check_rows(self, strategy: str, factors: Sequence[tuple[str, int]], max_new_tokens: int) -> None:
        """Refuse a beam-like request whose rows x max_new_tokens exceed ``row_tokens``; ``factors``: each
        (parameter, value) whose product is the rows a step runs (the strategy spec's ``row_factors``)."""
        if self.row_tokens is None or not factors:
            return
        total = math.prod(v for _, v in factors) * max_new_tokens
        if total > self.row_tokens:
            shown = " x ".join(f"{name} {v}" for name, v in factors)
            raise InvalidRequest(f"{strategy} with {shown} x max_new_tokens {max_new_tokens} = {total} "
                                 f"row-tokens; this server runs at most {self.row_tokens} "
                                 f"(${ROWS_ENV}): lower one of them")

    def deadline(self, clock: Callable[[], float] = time.monotonic) -> "Deadline":
        """The deadline ``seconds`` from now on ``clock`` (the engine passes the decoder's own)."""
        return Deadline(None if self.seconds is None else clock() + self.seconds, clock)


@dataclass(frozen=True)
class Deadline:
    at: float | None  # a reading of ``clock``, None = never
    clock: Callable[[], float] = time.monotonic

    def passed(self) -> bool:
        return self.at is not None and self.clock() >= self.at


def stopped_text(seconds: float | None) -> str:
    """What a run the time budget stopped says: which clock, how much, and how to lift it."""
    amount = f"{seconds:g} s" if seconds is not None else "its"
    return (f"stopped: this server's time budget of {amount} of decoding per run is used up "
            f"(${TIME_ENV}; 0 lifts it)")
