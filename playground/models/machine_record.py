"""Measurements of this machine that a run's choices read (EAGLE auto's pass costs), made once per
machine and kept beside the converted weights, so every process on the machine makes the same choice
for the same request: one seed, one run.

A record is named by the model, its weights, what was measured and the machine (``machine_key``:
the processor's name, torch's version and kernel family, its thread count, the device). Processes
that need the same record at once measure it once: one measures under a lock while the others wait,
then read what it wrote. A record that cannot be read (damaged, or written by another layout) is
measured again; where the cache cannot be written, the measurement is kept in the process only.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import torch

from playground.models.cpu import CPUINFO, torch_capability
from playground.models.lineup import cache_root
from playground.models.weights_cache import conversion_lock

FOLDER = "measured"


def processor_name(cpuinfo: Path = CPUINFO) -> str:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return "unknown processor"
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[-1].strip()
    return "unknown processor"


def machine_key(device: torch.device) -> str:
    """What makes this machine's timings its own, as one short hash."""
    parts = [processor_name(), torch.__version__, torch_capability(), str(torch.get_num_threads()), device.type]
    if device.type == "cuda":
        parts.append(torch.cuda.get_device_name(device))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def record_path(model: str, weights: str, name: str, device: torch.device) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{model}-{weights}-{name}")
    return cache_root() / FOLDER / f"{safe}-{machine_key(device)}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(value), encoding="utf-8")
    os.replace(tmp, path)


def is_kept(path: Path) -> bool:
    """Whether ``path`` holds a record that reads back (what ``kept_or_measured`` would return unmeasured)."""
    return _read(path) is not None


def kept_or_measured(path: Path, measure: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
    """The record at ``path``, or ``measure()`` written there; (record, measured just now)."""
    found = _read(path)
    if found is not None:
        return found, False
    try:
        with conversion_lock(path):
            found = _read(path)  # another process may have measured it while this one waited
            if found is not None:
                return found, False
            value = measure()
            try:
                _write(path, value)
            except OSError:  # a cache that cannot be written: this process keeps its own measurement
                pass
            return value, True
    except OSError:  # no lock where the cache cannot be written: measured in this process alone
        return measure(), True
