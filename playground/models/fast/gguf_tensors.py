"""The tensor table of a GGUF file, and the metadata values under one prefix, read without parsing the rest.

gguf-py's ``GGUFReader`` builds an object for every metadata value; Gemma 3's file carries a
262,144-entry vocabulary there, which takes 10-20 s on a small CPU. Finding the weights needs only
the tensor infos after the metadata, so here the metadata is skipped (strings by their lengths,
arrays by count) and the tensors' bytes are a memory map. The layout is the GGUF specification's
(ggml's ``docs/gguf.md``): header, metadata key-value pairs, tensor infos, then the data aligned
to ``general.alignment`` (32 by default).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

_STRING, _ARRAY = 8, 9
# metadata value types -> their struct format, and so their size in bytes (8: string, 9: array are read otherwise)
_FORMAT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_SCALAR = {kind: struct.calcsize("<" + fmt) for kind, fmt in _FORMAT.items()}
# ggml type ids -> (name, weights per block, bytes per block), for the types this project reads or skips
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
              7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
              14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2)}


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    kind: str  # the ggml type's name: "Q4_1", "Q8_0", ...
    shape: tuple[int, ...]  # as the file lists it: the row length first
    data: np.ndarray  # uint8 [rows, bytes per row], a view of the memory map


class _Cursor:
    def __init__(self, buffer: np.ndarray):
        self.buffer, self.at = buffer, 0

    def take(self, fmt: str) -> tuple:
        # numpy's stubs declare ndarray's buffer protocol (__buffer__) only for Python >= 3.12
        values = struct.unpack_from("<" + fmt, self.buffer, self.at)  # type: ignore[arg-type]
        self.at += struct.calcsize("<" + fmt)
        return values

    def string(self) -> str:
        (n,) = self.take("Q")
        text = bytes(self.buffer[self.at:self.at + n]).decode("utf-8", "replace")
        self.at += n
        return text

    def value(self, kind: int) -> Any:
        if kind in _FORMAT:
            return self.take(_FORMAT[kind])[0]
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element, count = self.take("IQ")
            return [self.value(element) for _ in range(count)]
        raise ValueError(f"unknown GGUF metadata type {kind}")

    def skip_value(self, kind: int) -> None:
        if kind in _SCALAR:
            self.at += _SCALAR[kind]
        elif kind == _STRING:
            (n,) = self.take("Q")
            self.at += n
        elif kind == _ARRAY:
            element, count = self.take("IQ")
            if element in _SCALAR:
                self.at += _SCALAR[element] * count
            else:
                for _ in range(count):
                    self.skip_value(element)
        else:
            raise ValueError(f"unknown GGUF metadata type {kind}")


def _opened(path: str) -> tuple[np.ndarray, _Cursor, int, int]:
    """The file's memory map, a cursor at its first metadata pair, its tensor count and pair count."""
    buffer = np.memmap(path, dtype=np.uint8, mode="r")
    cur = _Cursor(buffer)
    magic = bytes(buffer[:4])
    cur.at = 4
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    version, n_tensors, n_kv = cur.take("IQQ")
    if version < 2:
        raise ValueError(f"GGUF version {version} is not supported")
    return buffer, cur, n_tensors, n_kv


def metadata(path: str, prefix: str) -> dict[str, Any]:
    """The metadata values whose keys start with ``prefix`` (every other value skipped, not parsed)."""
    _, cur, _, n_kv = _opened(path)
    found = {}
    for _ in range(n_kv):
        key = cur.string()
        (kind,) = cur.take("I")
        if key.startswith(prefix):
            found[key] = cur.value(kind)
        else:
            cur.skip_value(kind)
    return found


@lru_cache(maxsize=8)
def tensor_table(path: str) -> dict[str, GGUFTensor]:
    """Every tensor of the GGUF file at ``path`` by name (a type outside GGML_TYPES is skipped)."""
    buffer, cur, n_tensors, n_kv = _opened(path)
    alignment = 32
    for _ in range(n_kv):
        key = cur.string()
        (kind,) = cur.take("I")
        if key == "general.alignment" and kind == 4:
            (alignment,) = cur.take("I")
        else:
            cur.skip_value(kind)
    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        (dims,) = cur.take("I")
        shape = cur.take("Q" * dims)
        kind, offset = cur.take("IQ")
        infos.append((name, kind, shape, offset))
    start = -(-cur.at // alignment) * alignment
    table = {}
    for name, kind, shape, offset in infos:
        if kind not in GGML_TYPES:
            continue
        type_name, per_block, block_bytes = GGML_TYPES[kind]
        row_bytes = shape[0] // per_block * block_bytes
        rows = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        data = buffer[start + offset:start + offset + rows * row_bytes].reshape(rows, row_bytes)
        table[name] = GGUFTensor(name, type_name, tuple(int(s) for s in shape), data)
    return table
