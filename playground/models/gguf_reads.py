"""One parse of a GGUF file per conversion.

A first start converts a GGUF file through transformers, which parses the whole file (every metadata
field, the tokenizer's 262,144 tokens for Gemma 3) once for the config, once for the tokenizer and
once for the weights, with a new gguf-py ``GGUFReader`` each time. The parse is slow (millions of
small memmap views: 9 s for Gemma 3's file once, here; one parse instead of three took its cold load
from 55 s to 49-50 s) and always the same for one file.

``one_parse_per_file()`` makes those readers one: while any such block runs, ``gguf.GGUFReader(path)``
gives the reader already made for that path (and file size and time). The readers are dropped when
the last block ends, so no parse outlives a conversion. Outside a block, ``GGUFReader`` makes a new
reader, as gguf-py does. A reader is read, never changed, by transformers' loaders.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_readers: dict[tuple[str, int, int], Any] = {}
_blocks = 0
_original: Any = None


def _key(path: Any) -> tuple[str, int, int]:
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns


def _shared(path: Any, mode: str = "r") -> Any:
    """``GGUFReader(path, mode)``: the block's reader for a read-only path while a block runs."""
    if mode != "r" or not _blocks:
        return _original(path, mode)
    key = _key(path)
    with _lock:
        reader = _readers.get(key)
    if reader is None:
        reader = _original(path, mode)  # parsed outside the lock: two files may parse at once
        with _lock:
            if _blocks:
                reader = _readers.setdefault(key, reader)
    return reader


@contextmanager
def one_parse_per_file() -> Iterator[None]:
    global _blocks, _original
    import gguf
    with _lock:
        if _original is None:
            _original = gguf.GGUFReader
            gguf.GGUFReader = _shared  # type: ignore[misc,assignment]  # a function standing in for the class
        _blocks += 1
    try:
        yield
    finally:
        with _lock:
            _blocks -= 1
            if not _blocks:
                _readers.clear()


def held() -> int:
    """How many readers are held now."""
    with _lock:
        return len(_readers)
