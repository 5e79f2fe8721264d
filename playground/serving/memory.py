"""A long-running server's resident memory kept flat (glibc; elsewhere these do nothing).

Under load the server's RSS grows without any leak for two reasons. glibc gives each thread that
allocates its own malloc arena (up to 8 per core), and Gradio runs handlers on a pool of worker
threads, so the freed memory of large short-lived buffers (KV caches, logits, trace JSON) ends up
scattered over many arenas, each keeping its own free pages. And free memory inside an arena goes
back to the system only when it sits at the arena's top. ``limit_arenas`` (once, at start, before
the worker threads exist) caps the arenas at two (``mallopt(M_ARENA_MAX)``); ``trim`` (after each
request, at most once per ``TRIM_EVERY`` seconds) returns free pages to the system
(``malloc_trim``). bench/bench_load.py measures the effect (RSS after warm-up, over the load, at the
end).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
import time

M_ARENA_MAX = -8  # glibc's mallopt parameter number
ARENAS = 2
TRIM_EVERY = 1.0  # seconds

_lock = threading.Lock()
_last_trim = 0.0


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's malloc arenas; True where that took effect."""
    libc = _libc()
    return bool(libc and libc.mallopt(M_ARENA_MAX, arenas) == 1)


def trim(force: bool = False) -> bool:
    """Return free heap pages to the system (rate-limited unless ``force``); True where it ran."""
    global _last_trim
    now = time.monotonic()
    with _lock:
        if not force and now - _last_trim < TRIM_EVERY:
            return False
        _last_trim = now
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
