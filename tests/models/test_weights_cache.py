"""Converted-weight caches: sealed after the rename, checked on load, rebuilt once when damaged."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
import time

import gguf
import pytest
import torch

from playground.models import store as models
from playground.models import weights_cache
from playground.models.weights_cache import CHECKSUMS, CacheError, load_or_build, seal_problem

PROMPT = torch.tensor([[1, 2]])


class ToyConversion:
    """Stands in for the GGUF dequantisation: writes the toy model into the cache directory."""

    def __init__(self) -> None:
        self.builds = 0
        self.messages: list[str] = []

    def convert(self, tmp):
        self.builds += 1
        model, tokenizer = models._load_pretrained(models.ASSETS / "toy", torch.device("cpu"))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return model, tokenizer

    def load(self, directory):
        return models._load_pretrained(directory, torch.device("cpu"))

    def __call__(self, target):
        return load_or_build(target, self.load, self.convert, lambda f, m: self.messages.append(m), "toy")


def logits(model) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=PROMPT).logits


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    return tmp_path / "converted" / "toy"


def truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_a_conversion_is_sealed_and_the_next_start_loads_it(cache):
    conv = ToyConversion()
    first, _ = conv(cache)
    sums = json.loads((cache / CHECKSUMS).read_text())
    assert {"model.safetensors", "config.json"} <= set(sums) and seal_problem(cache) is None
    again, _ = conv(cache)
    assert conv.builds == 1 and torch.equal(logits(first), logits(again))
    assert not list(cache.parent.glob("toy.tmp*"))


def test_a_truncated_weights_file_fails_its_check_and_is_rebuilt_with_progress(cache):
    conv = ToyConversion()
    reference, _ = conv(cache)
    truncate(cache / "model.safetensors")
    assert seal_problem(cache) == "model.safetensors does not match its checksum"
    model, _ = conv(cache)
    assert conv.builds == 2 and torch.equal(logits(model), logits(reference))
    assert any("damaged (model.safetensors does not match its checksum): converting again" in m
               for m in conv.messages)
    assert seal_problem(cache) is None and conv(cache) and conv.builds == 2


def test_an_unsealed_cache_that_fails_to_load_is_rebuilt(cache):
    conv = ToyConversion()
    conv(cache)
    (cache / CHECKSUMS).unlink()  # a cache written before seals existed
    truncate(cache / "model.safetensors", 0.9)
    conv(cache)
    assert conv.builds == 2 and any("failed to load" in m for m in conv.messages)
    assert seal_problem(cache) is None


def test_an_unsealed_sound_cache_is_loaded_and_sealed(cache):
    conv = ToyConversion()
    conv(cache)
    (cache / CHECKSUMS).unlink()
    conv(cache)
    assert conv.builds == 1 and (cache / CHECKSUMS).is_file()


def test_a_rebuild_that_fails_too_is_an_error_naming_both(cache):
    conv = ToyConversion()
    conv(cache)
    (cache / "config.json").write_text("{", encoding="utf-8")

    def broken(tmp):
        raise OSError("No space left on device")

    with pytest.raises(CacheError, match=r"converting toy failed after a damaged cache \(config.json does not match "
                                         r"its checksum\): OSError: No space left on device"):
        load_or_build(cache, conv.load, broken, lambda f, m: None, "toy")
    assert not list(cache.parent.glob("toy.tmp*"))


def test_temporaries_of_a_killed_conversion_are_removed_and_a_live_ones_kept(cache):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cache.parent.mkdir(parents=True)
    (cache.parent / f"toy.tmp{dead.pid}").mkdir()
    (cache.parent / f"toy.tmp{dead.pid}" / "model.safetensors").write_bytes(b"half")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (cache.parent / f"toy.tmp{live.pid}").mkdir()
        ToyConversion()(cache)
        assert sorted(p.name for p in cache.parent.iterdir()) == sorted(["toy", "toy.lock", f"toy.tmp{live.pid}"])
    finally:
        live.kill()
        live.wait()


def test_the_gguf_loader_goes_through_the_checked_cache(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    monkeypatch.setattr(weights_cache, "load_or_build",
                        lambda target, load, convert, progress, name: seen.append((target, name)) or ("m", "t"))
    assert models._load_gguf("smollm2-135m", torch.device("cpu"), lambda f, m: None) == ("m", "t")
    assert seen == [(tmp_path / "converted" / "smollm2-135m", "smollm2-135m")]


@pytest.mark.slow  # converts SmolLM2's GGUF file: half a minute
def test_the_first_start_converts_to_the_model_later_starts_read(tmp_path, monkeypatch):
    """A new user's first start reads the GGUF file itself (an empty cache); transformers marks that
    model quantized, and a quantized model refuses ``.float()``. The converted model must be the
    plain float model that every later start reads from the cache: same marks, same logits."""
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    quiet = lambda f, m: None  # noqa: E731
    parsed = []
    parse = gguf.gguf_reader.GGUFReader.__init__
    monkeypatch.setattr(gguf.gguf_reader.GGUFReader, "__init__",
                        lambda self, path, *a, **k: parsed.append(str(path)) or parse(self, path, *a, **k))
    first, _ = models._load_gguf("smollm2-135m", torch.device("cpu"), quiet)  # converts: nothing cached
    # config, tokenizer and weights: one parse
    assert [os.path.realpath(p) for p in parsed] == [os.path.realpath(models.gguf_path("smollm2-135m"))]
    assert (tmp_path / "converted" / "smollm2-135m" / "CHECKSUMS.json").is_file()
    later, _ = models._load_gguf("smollm2-135m", torch.device("cpu"), quiet)  # reads the cache
    prompt = torch.tensor([[1, 504, 3158, 314]])
    with torch.inference_mode():
        for model in (first, later):
            assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None
            assert "quantization_config" not in model.config.to_dict()
            copy.deepcopy(model).to(torch.bfloat16).float()  # refused by a model still marked quantized
        assert torch.equal(first(prompt).logits, later(prompt).logits)


def test_two_processes_needing_one_cache_convert_it_once(cache):
    """The second comes while the first converts: it waits, then loads the first's cache."""
    first, second = ToyConversion(), ToyConversion()
    started = threading.Event()
    slow = first.convert

    def convert_slowly(tmp):
        started.set()
        time.sleep(1.0)
        return slow(tmp)

    first.convert = convert_slowly
    results = {}
    a = threading.Thread(target=lambda: results.setdefault("a", first(cache)))
    a.start()
    started.wait(10)
    results["b"] = second(cache)  # blocks on the lock until the first has built and sealed
    a.join()
    assert (first.builds, second.builds) == (1, 0)
    assert any("loading toy from the converted-weights cache" in m for m in second.messages)
    assert torch.equal(logits(results["a"][0]), logits(results["b"][0]))
