"""A cap on the size of a hub model, read from the hub's metadata before anything is downloaded.

One call naming a 70B model would otherwise fill a Space's disk and memory. The
size is the sum of the repo's weight files (safetensors when it has them, else
PyTorch ``.bin``, else every file), as the hub lists them. The metadata call is a
seam (``Metadata``): tests pass a table, the server asks ``huggingface_hub``.

Defaults: 4 GB of weight files on a CPU machine (a free CPU Space has 16 GB of
memory, and half-precision files double in float32), 16 GB with a GPU (a
ZeroGPU slice). ``$PLAYGROUND_MAX_MODEL_GB`` overrides both.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from playground.errors import InvalidRequest

CAP_ENV = "PLAYGROUND_MAX_MODEL_GB"
CPU_CAP_GB = 4.0
GPU_CAP_GB = 16.0
GB = 1e9

Metadata = Callable[[str], dict[str, int]]  # hub id -> {file name: size in bytes}


class ModelTooLarge(InvalidRequest):
    """The hub model's weight files are larger than this server's cap."""


def hub_file_sizes(hub_id: str) -> dict[str, int]:
    """The repo's files and their sizes, from the hub's model metadata (no download)."""
    from huggingface_hub import HfApi

    info = HfApi().model_info(hub_id, files_metadata=True, timeout=10)
    return {s.rfilename: int(s.size or 0) for s in (info.siblings or [])}


def weights_bytes(files: dict[str, int]) -> int:
    """Bytes of the weight files ``from_pretrained`` would fetch: safetensors, else .bin, else all files."""
    for suffix in (".safetensors", ".bin"):
        sizes = [n for name, n in files.items() if name.endswith(suffix) and "/" not in name]
        if sizes:
            return sum(sizes)
    return sum(files.values())


def cap_from_env(gpu: bool) -> float:
    """The cap in bytes: ``$PLAYGROUND_MAX_MODEL_GB`` or the default for a CPU or a GPU machine."""
    raw = os.environ.get(CAP_ENV, "").strip()
    if not raw:
        return (GPU_CAP_GB if gpu else CPU_CAP_GB) * GB
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InvalidRequest(f"${CAP_ENV} must be a number of gigabytes > 0, got {raw!r}")
    return value * GB


@dataclass(frozen=True)
class SizeCap:
    """Refuses hub models whose weight files exceed ``max_bytes``."""

    max_bytes: float
    metadata: Metadata = hub_file_sizes

    def check(self, hub_id: str) -> int:
        """The model's weight bytes; ModelTooLarge above the cap, InvalidRequest when the size is unknown."""
        try:
            files = self.metadata(hub_id)
        except Exception as err:  # the hub client raises many kinds (HTTP, missing repo, gated)
            raise InvalidRequest(f"model {hub_id!r}: its size could not be read from the hub "
                                 f"({type(err).__name__}: {err})") from None
        size = weights_bytes(files)
        if size <= 0:
            raise InvalidRequest(f"model {hub_id!r}: the hub lists no weight files for it")
        if size > self.max_bytes:
            raise ModelTooLarge(f"model {hub_id!r} has {size / GB:.2f} GB of weights; this server loads hub models "
                                f"of at most {self.max_bytes / GB:.2f} GB (${CAP_ENV})")
        return size
