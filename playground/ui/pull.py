"""A decoder's steps pulled on a thread of their own, so the page's handler reads Stop while a step runs.

The handler still takes one step at a time and draws between two steps (the strategy's trace is never
read while it changes): only the waiting moves. Every step of every run runs on one thread kept for the
process: torch's grad mode is per thread, and the CPU kernels' thread team (OpenMP) runs at full speed
only for the first thread that uses it; a fresh thread per run decoded at half speed on two cores. A step
that Stop interrupts is left to finish on that thread and is not shown; ``close`` waits for it, then
closes the decoder.
"""
from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, Generic, Iterator, TypeVar, cast

T = TypeVar("T")
N = TypeVar("N")
_END = object()
POLL_SECONDS = 0.5  # how often a wait for the next step reads Stop when nothing wakes it
GRACE_SECONDS = 0.2  # a step in flight that ends this soon after Stop is kept: its token was decoded
STEPS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decoder")  # the one thread every step runs on


class Pull(Generic[T]):
    def __init__(self, source: Iterator[T]) -> None:
        self._source = source
        self._in_flight: Future | None = None
        self._worker: int | None = None  # the thread the steps run on
        self._closed = False
        self.interrupted = False  # Stop came while a step was running; that step is not shown

    def steps(self, stop: Callable[[], bool], wake: threading.Event | None = None,
              poll_seconds: float = POLL_SECONDS, grace_seconds: float = GRACE_SECONDS,
              news: Callable[[], N | None] | None = None) -> Iterator[T | N]:
        """The source's items, one step at a time; ends with the source, or once ``stop()`` is true while
        a step runs that does not end within ``grace_seconds`` (``interrupted``; a step that does is the
        last item). Each step runs in the caller's context (its contextvars). The wait
        sleeps until the step ends or ``wake`` is set (Stop sets it), reading ``stop()`` at least every
        ``poll_seconds``: a waiting thread that woke often would take the interpreter's lock from the
        step, and on a busy machine each hand-back waits for the scheduler. ``news``: read after each
        wake while a step runs (the step's own reports set ``wake``: a model loading, a baseline being
        measured); what it returns, where not None, is yielded between the steps' items."""
        wake = wake or threading.Event()
        while True:
            future = STEPS.submit(contextvars.copy_context().run, self._next)
            future.add_done_callback(lambda _: wake.set())
            self._in_flight = future
            while not future.done():
                if stop():
                    if wait([future], timeout=grace_seconds).done:
                        break  # the step in flight ends within the grace: it is the run's last, shown
                    self.interrupted = True
                    return
                wake.wait(poll_seconds)
                wake.clear()  # the loop reads the step and Stop again, so a wake cleared here is not lost
                heard = news() if news is not None and not future.done() else None
                if heard is not None:
                    yield heard
            item = future.result()
            self._in_flight = None
            if item is _END:
                return
            yield cast(T, item)

    def _next(self) -> object:
        self._worker = threading.get_ident()
        return next(self._source, _END)

    def close(self) -> None:
        """Wait for an interrupted step, then close the source (the engine ends the strategy between two
        steps and releases the models). Once; a second call does nothing. It may run in a finaliser on any
        thread, so it hands nothing to the steps' thread: the source is closed where this runs, once no
        step is running."""
        if self._closed:
            return
        self._closed = True
        if self._in_flight is not None and threading.get_ident() != self._worker:
            self._in_flight.exception()  # its result or error is not wanted: the run has ended
        close = getattr(self._source, "close", None)
        if close is not None:
            close()
