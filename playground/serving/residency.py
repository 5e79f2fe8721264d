"""Which loaded models stay in memory: a budget in bytes (and optionally a count), least recently used out.

Bookkeeping only, no torch: the model store records each model's bytes, who is
using it and when it was last used, and asks which ones to unload. A model a
request is using is never chosen, nor a pinned one (the default models); when
they alone exceed the budget the new model is refused with both numbers.

Budget: ``$PLAYGROUND_MEMORY_GB`` (default: half of this machine's memory, or of
the GPU's on a GPU) and ``$PLAYGROUND_MAX_MODELS`` (default: no count limit).
"""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Hashable, TypeVar

from playground.errors import InvalidRequest
from playground.serving.budget import env_number

MEMORY_ENV = "PLAYGROUND_MEMORY_GB"
COUNT_ENV = "PLAYGROUND_MAX_MODELS"
GB = 1e9

K = TypeVar("K", bound=Hashable)  # a model's key (the store's: its name)


class OverBudget(InvalidRequest):
    """The models in use (and the pinned ones) leave no room for another under the memory budget."""


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the smaller of physical memory and the cgroup limit."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for limit in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            raw = limit.read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < 1 << 60:
            sizes.append(int(raw))
    return min(sizes) if sizes else None


@dataclass(frozen=True)
class MemoryBudget:
    max_bytes: float | None = None  # None: no byte limit
    max_models: int | None = None  # None: no count limit

    @classmethod
    def from_env(cls, device_memory: int | None) -> "MemoryBudget":
        """``device_memory``: bytes of the accelerator (None on the CPU, where the machine's memory counts)."""
        memory = device_memory or machine_memory()
        default = memory / 2 / GB if memory else 0.0
        gb = env_number(MEMORY_ENV, default)
        count = env_number(COUNT_ENV, 0.0)
        if count != int(count):
            raise InvalidRequest(f"${COUNT_ENV} must be an integer >= 0 (0 = no limit), got {count}")
        return cls(gb * GB or None, int(count) or None)

    def describe(self) -> str:
        parts = [size_text(self.max_bytes) if self.max_bytes else "", f"{self.max_models} models"
                 if self.max_models else ""]
        return " and ".join(p for p in parts if p) or "unlimited"


def size_text(nbytes: float) -> str:
    return f"{nbytes / GB:.2f} GB" if nbytes >= 0.01 * GB else f"{nbytes / 1e6:.3f} MB"


@dataclass
class Entry:
    nbytes: int
    users: int = 0
    pinned: bool = False


@dataclass
class Residency(Generic[K]):
    """Loaded keys in least-recently-used order, with their bytes and users. Not thread-safe by itself:
    the model store calls it under its lock."""

    budget: MemoryBudget
    entries: OrderedDict[K, Entry] = field(default_factory=OrderedDict)

    def total(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def add(self, key: K, nbytes: int, pinned: bool) -> None:
        self.entries[key] = Entry(nbytes, 0, pinned)

    def use(self, key: K) -> None:
        self.entries[key].users += 1
        self.touch(key)

    def release(self, key: K) -> None:
        entry = self.entries.get(key)
        if entry is not None and entry.users > 0:
            entry.users -= 1

    def touch(self, key: K) -> None:
        self.entries.move_to_end(key)

    def victims(self, incoming: int = 0, incoming_count: int = 0) -> list[K]:
        """Least recently used keys to unload (unused, unpinned) so that ``incoming`` more bytes and
        ``incoming_count`` more models fit; raises OverBudget when unloading all of them is not enough."""
        b = self.budget
        total, count = self.total() + incoming, len(self.entries) + incoming_count
        out = []
        for key, entry in self.entries.items():
            if not self._over(total, count):
                break
            if entry.users == 0 and not entry.pinned:
                out.append(key)
                total, count = total - entry.nbytes, count - 1
        if self._over(total, count):
            held = [str(k) for k, e in self.entries.items() if k not in out]
            needs = f"; the new one needs {size_text(incoming)}" if incoming else ""
            raise OverBudget(f"no room for another model: the memory budget is {b.describe()}, and "
                             f"{size_text(total - incoming)} are held by models in use or kept loaded "
                             f"({', '.join(held) or 'none'}){needs} (${MEMORY_ENV}, ${COUNT_ENV})")
        return out

    def _over(self, total: int, count: int) -> bool:
        b = self.budget
        return (b.max_bytes is not None and total > b.max_bytes) or (b.max_models is not None and
                                                                       count > b.max_models)
