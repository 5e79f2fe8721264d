"""How many rows one matrix product may take on this CPU and still give every row the bits of a
one-row product: measured here, per product, never assumed.

A pass over a prompt or a draft multiplies n rows at once; a decode step multiplies one. oneDNN
picks its blocking by the number of rows, the matrix's shape, the kernel tier (AVX2, AVX-512,
AVX-512 with native bfloat16, AMX) and the number of threads, and some blockings sum a row's
products in another order, so the same row rounds differently beside other rows. Measured on one
AMD EPYC (Zen 4) with this module's probe: on its native bfloat16 kernels (``AVX512_CORE_BF16``)
every bfloat16 product whose inner size is at most 1024 kept each row exact up to 64 rows, and the
down products (576 x 1536, 640 x 2048) differed from two rows on; capped at ``AVX512_CORE``
(AVX-512 without bfloat16) every shape differed from two rows on; capped at AVX2 none did. So no
constant is right everywhere, and the form is chosen where the program runs.

Whether a row rounds otherwise depends on its values as well as on the blocking: with Gaussian
rows the 576 x 1536 product looked exact up to 8, 16 or 46 rows depending on the seed. The probe's
rows and matrix are built to expose any change of summation order instead: entries of +-1 with
one in fifty +-4096, so sums pass 2**24, where float32 absorbs a +-1 in one order and not in
another (on the shapes above, every seed of five found the first differing count, 2).

``form(weight)`` probes a product the first time its kind (dense dtype, or int4 planes over the
file's own blocks), shape, device and thread count is met in the process: each probe row is
multiplied alone, then the first m rows together for each m of ``SIZES`` in turn, until a row
differs from its one-row product, or until the probe has spent ``PROBE_SECONDS`` (a large head:
each product reads the whole matrix). The counts that proved exact are the product's ``sizes``;
``split`` cuts a pass's rows into calls of those sizes only, so every row gets a step's numbers.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

SIZES = (2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)  # the row counts a probe tries, in turn
MAX_ROWS = SIZES[-1]
PROBE_SECONDS = 1.0  # per product: past it, the counts proved so far are the ones used
SPIKE, SPIKE_RATE = 4096.0, 0.02  # probe entries: +-1, and +-SPIKE at this rate
TILE = 1024  # a probe matrix's distinct rows


@dataclass(frozen=True)
class RowForm:
    """The chosen form of one product on this CPU: how many rows a call takes, and why no more."""

    product: str  # "bfloat16 576x1536" (dense [out x in]) or "int4 x2 576x1536" (planes)
    threads: int  # torch's intra-op threads the probe ran with
    sizes: tuple[int, ...]  # the row counts proved exact, ascending (1 always: a step's own product)
    stop: str  # "differs at 2 rows", "exact to 64 rows" or "probe time spent at 12 rows"
    seconds: float  # the probe's own time

    @property
    def rows(self) -> int:
        """The most rows a call takes (1: one row at a time)."""
        return self.sizes[-1]

    def split(self, n: int) -> list[int]:
        """``n`` rows as calls of proved sizes, largest first."""
        calls = []
        while n > 0:
            size = max(s for s in self.sizes if s <= n)
            calls.append(size)
            n -= size
        return calls

    def record(self) -> dict[str, Any]:
        return {"product": self.product, "threads": self.threads, "rows": self.rows, "stop": self.stop}

    def describe(self) -> str:
        return f"{self.product}: {self.rows} row{'s' if self.rows > 1 else ''} a call ({self.stop}; probe {self.seconds:.3f} s)"


_FORMS: dict[tuple[Any, ...], RowForm] = {}
_LOCK = threading.Lock()


def _key(weight: Any) -> tuple[Any, ...]:
    threads = torch.get_num_threads()
    if isinstance(weight, torch.Tensor):
        return ("dense", str(weight.dtype).removeprefix("torch."), tuple(weight.shape), weight.device.type, threads)
    return ("int4", len(weight.packed), (weight.out_features, weight.in_features), bool(weight.float_out), "cpu",
            threads)


def _name(key: tuple[Any, ...]) -> str:
    out, inp = key[2]
    if key[0] == "dense":
        return f"{key[1]} {out}x{inp}" + ("" if key[3] == "cpu" else f" on {key[3]}")
    return f"int4 x{key[1]} {out}x{inp}" + (" (float out)" if key[3] else "")


def product(x: torch.Tensor, weight: Any) -> torch.Tensor:
    return F.linear(x, weight) if isinstance(weight, torch.Tensor) else weight(x)


def flat_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` [..., in] as [rows, in] with rows ``in`` apart in memory (a copy only where they are not)."""
    flat = x.reshape(-1, x.shape[-1])
    if flat.stride(-1) != 1 or (flat.shape[0] > 1 and flat.stride(0) != flat.shape[1]):
        flat = flat.contiguous()
    return flat


def call_rows(flat: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of ``flat_rows``' [rows, in] as the [1, n, in] tensor one call takes, with the
    strides a fresh tensor of that shape has: oneDNN reads the strides of size-1 dimensions too, and
    on some tiers (AVX512_CORE) a row viewed out of a longer pass, [1, 1, in] with the pass's batch
    stride, rounds otherwise than the same row as a step's own tensor."""
    n, width = stop - start, flat.shape[1]
    return flat[start:stop].as_strided((1, n, width), (n * width, width, 1))


def spiky(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """float32 entries of +-1, and +-``SPIKE`` at ``SPIKE_RATE``: sums that depend on their order."""
    signs = torch.randint(0, 2, shape, generator=gen).float() * 2 - 1
    return signs * torch.where(torch.rand(shape, generator=gen) < SPIKE_RATE, SPIKE, 1.0)


@torch.inference_mode()
def probe(weight: Any, seconds: float = PROBE_SECONDS, seed: int = 0) -> RowForm:
    """Measure ``weight``'s exact row counts now (``form`` caches them; this does not). A dense
    weight is probed through a spiky matrix of its shape, dtype and device (the blocking depends on
    those, not on the values); a 4-bit one through its own planes."""
    start = time.perf_counter()
    key = _key(weight)
    gen = torch.Generator().manual_seed(seed)
    if isinstance(weight, torch.Tensor):
        (out, inp), dtype, device = weight.shape, weight.dtype, weight.device
        tile = spiky((min(out, TILE), inp), gen).to(dtype=dtype, device=device)  # a large head: its rows repeat
        weight = tile.repeat(-(-out // tile.shape[0]), 1)[:out].contiguous()
    else:
        inp, dtype, device = weight.in_features, torch.bfloat16, torch.device("cpu")
    x = spiky((MAX_ROWS, inp), gen).to(dtype=dtype, device=device)
    singles = [product(call_rows(x, 0, 1), weight)]  # each call as ``linear`` makes it
    sizes, stop = [1], f"exact to {MAX_ROWS} rows"
    for m in SIZES:
        singles += [product(call_rows(x, i, i + 1), weight) for i in range(len(singles), m)]
        if not torch.equal(product(call_rows(x, 0, m), weight), torch.cat(singles, 1)):
            stop = f"differs at {m} rows"
            break
        sizes.append(m)
        if m < MAX_ROWS and time.perf_counter() - start > seconds:
            stop = f"probe time spent at {m} rows"
            break
    return RowForm(_name(key), key[-1], tuple(sizes), stop, time.perf_counter() - start)


def form(weight: Any) -> RowForm:
    """``weight``'s form in this process (probed on first use of its kind, shape and thread count)."""
    key = _key(weight)
    found = _FORMS.get(key)
    if found is None:
        with _LOCK:
            found = _FORMS.get(key)
            if found is None:
                found = _FORMS[key] = probe(weight)
    return found


def row_calls(weight: Any, n: int) -> list[int]:
    """The sizes of the calls ``n`` rows through ``weight`` take on this CPU."""
    return form(weight).split(n)


def forms_of(fast: Any) -> list[RowForm]:
    """The forms of a lean forward's products (each layer's matrices and the head), one per kind and
    shape, probing those not yet met. The logit lens's head is probed when the lens first reads."""
    weights = [getattr(layer, name) for layer in fast.layers for name in ("qkv", "out", "gate_up", "down")]
    weights.append(fast.head)
    seen: dict[tuple[Any, ...], RowForm] = {}
    for weight in weights:
        key = _key(weight)
        if key not in seen:
            seen[key] = form(weight)
    return list(seen.values())
