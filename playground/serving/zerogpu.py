"""What one run asks of ZeroGPU: the GPU seconds it declares, and replays of runs already made.

On a ZeroGPU Space the decoding runs under ``spaces.GPU(duration=...)``, on a slice of an
NVIDIA RTX Pro 6000 Blackwell that every ZeroGPU Space shares (half a card, 48 GB, by default,
the size used here; ``xlarge``, a whole card, charges the quota twice as fast). The declared
duration is checked against the visitor's remaining daily quota (``DAILY_QUOTA_SECONDS``: 2
minutes unauthenticated, 5 with a free account, 40 with PRO; the hub's ZeroGPU page, 2026) before
the run starts, and a shorter one gets a better place in the queue; the time used is what is
charged. So each run declares what it needs:

    clamp(FLOOR_SECONDS, rows x max_new_tokens x token_seconds, the time budget)

rounded up to a whole second. ``rows`` is the product of the factors the strategy declares
(its spec's ``row_factors``: ``num_prefixes`` x ``num_beams`` for sample_beam), 1 otherwise; ``token_seconds`` is
``$PLAYGROUND_GPU_TOKEN_SECONDS``. The time budget is the cap because the engine stops
decoding there anyway (``budget``); with no budget the cap is ``UNCAPPED_SECONDS``.

``Replays`` keeps the finished traces of runs made on the GPU, keyed by everything
that decides them (model, strategy, params, seed, ...): decoding is deterministic for
one seed, so a second identical request (an example clicked again) replays the first
run's trace without asking for the GPU. This is the lazy example cache of a ZeroGPU
Space; elsewhere nothing is replayed.
"""
from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from typing import Any, Sequence

from playground.serving.budget import env_number

TOKEN_SECONDS_ENV = "PLAYGROUND_GPU_TOKEN_SECONDS"
# SmolLM2-135M in float32 on one CPU thread here: 14.8 tokens/s through the engine (greedy and
# sampling alike), about 0.067 s a token with every step recorded. A GPU slice decodes faster, so
# until it is measured there this is an upper bound: a run never declares too little.
DEFAULT_TOKEN_SECONDS = 0.07
FLOOR_SECONDS = 10  # the GPU worker's start and the first step's kernels, for even a 1-token run
UNCAPPED_SECONDS = 120  # no time budget ($PLAYGROUND_TIME_BUDGET=0): the old fixed declaration
REPLAYS = 64  # finished runs kept for replay
REPLAYED_REASONS = ("eos", "length")  # a run cut short (Stop, the time budget) is not replayed
# ZeroGPU's daily GPU quota per visitor, by account (the hub's ZeroGPU page, 2026).
DAILY_QUOTA_SECONDS = {"unauthenticated": 120, "free": 300, "PRO": 2400}


def token_seconds() -> float:
    """``$PLAYGROUND_GPU_TOKEN_SECONDS`` (seconds per row per new token), else the default."""
    return env_number(TOKEN_SECONDS_ENV, DEFAULT_TOKEN_SECONDS) or DEFAULT_TOKEN_SECONDS


def rows(factors: Sequence[tuple[str, int]]) -> int:
    """Rows one step runs through the model: the product of the strategy's row factors (1 for none)."""
    return math.prod(value for _, value in factors)


def gpu_seconds(rows: int, max_new_tokens: int, per_token: float, budget_seconds: float | None,
                floor: int = FLOOR_SECONDS) -> int:
    """The duration a run declares: rows x tokens x cost, at least ``floor``, at most the budget."""
    cap = math.ceil(budget_seconds) if budget_seconds else UNCAPPED_SECONDS
    need = math.ceil(round(rows * max_new_tokens * per_token, 6))
    return max(floor, min(need, max(cap, floor)))


def day_of_quota(account: str, per_token: float = DEFAULT_TOKEN_SECONDS, max_new_tokens: int = 512,
                 budget_seconds: float | None = 60) -> tuple[int, int]:
    """What one visitor's daily quota buys at ``per_token`` seconds a token: (tokens, whole one-row runs of
    ``max_new_tokens``, each charged its declared duration)."""
    quota = DAILY_QUOTA_SECONDS[account]
    return int(quota / per_token), quota // gpu_seconds(1, max_new_tokens, per_token, budget_seconds)


def describe(seconds: int, rows: int, max_new_tokens: int) -> str:
    """The estimate as the page's status says it."""
    shape = f"{rows} rows x {max_new_tokens} tokens" if rows > 1 else f"{max_new_tokens} tokens"
    return f"ZeroGPU: up to {seconds} s of GPU for {shape}"


def replay_key(fields: dict[str, Any]) -> str:
    """One string for everything that decides a run (a request's fields)."""
    return json.dumps(fields, sort_keys=True, default=str)


class Replays:
    """Finished runs by their key, the least recently used dropped past ``size``; thread-safe."""

    def __init__(self, size: int = REPLAYS) -> None:
        self.size = size
        self._runs: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        with self._lock:
            run = self._runs.get(key)
            if run is not None:
                self._runs.move_to_end(key)
            return run

    def keep(self, key: str, run: Any, finish_reason: str) -> None:
        """Keep ``run`` if it ended by itself (end of sequence or max new tokens)."""
        if finish_reason not in REPLAYED_REASONS:
            return
        with self._lock:
            self._runs[key] = run
            self._runs.move_to_end(key)
            while len(self._runs) > self.size:
                self._runs.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)
