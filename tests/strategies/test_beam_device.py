"""The Gumbel paths of the beam family on a device without float64 (Apple's MPS refuses it).

No such device is needed: a fake accelerator stands in. The fake model's outputs are tensors of a
subclass that says it lives on ``cpu:1``; a torch function mode refuses any float64 result on that
device, and any float64 tensor created there, as MPS does. Moving a tensor to the CPU leaves the
fake device behind. The fake model and its outputs are otherwise ordinary CPU tensors.
"""
from __future__ import annotations

import pytest
import torch
from beam_fakes import FakeLM, final
from torch.overrides import TorchFunctionMode

from playground.models import Forward
from strategies.beam.sample_beam import SampleBeamParams, sample_beam
from strategies.beam.stochastic_beam import StochasticBeamParams, stochastic_beam

DEVICE = torch.device("cpu", 1)


class OnDevice(torch.Tensor):
    """A tensor on the fake accelerator."""

    @property
    def device(self) -> torch.device:  # what code that follows a tensor's device sees
        return DEVICE


def _on_device(device) -> bool:
    return device is not None and torch.device(device) == DEVICE


def _leaves(out):
    if isinstance(out, (tuple, list)):
        for o in out:
            yield from _leaves(o)
    elif isinstance(out, torch.Tensor):
        yield out


class NoFloat64OnDevice(TorchFunctionMode):
    """Raises where MPS would: a float64 tensor made on, or computed on, the fake device."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        to_host = func in (torch.Tensor.cpu,) or (
            func is torch.Tensor.to and any(a == "cpu" or (isinstance(a, torch.device) and a.type == "cpu"
                                                           and a != DEVICE) for a in (*args[1:], kwargs.get("device"))))
        if _on_device(kwargs.get("device")) and kwargs.get("dtype") == torch.float64:
            raise TypeError(f"{func.__name__}: float64 is not supported on the device")
        out = func(*args, **kwargs)
        if to_host:
            return out.as_subclass(torch.Tensor)
        if _on_device(kwargs.get("device")):
            out = out.as_subclass(OnDevice)
        for t in _leaves(out):
            if type(t) is OnDevice and t.dtype == torch.float64:
                raise TypeError(f"{getattr(func, '__name__', func)}: float64 is not supported on the device")
        return out


class DeviceLM(FakeLM):
    """FakeLM whose logits live on the fake accelerator."""

    def forward(self, ids, cache=None, hidden=False, last=False) -> Forward:
        out = super().forward(ids.as_subclass(torch.Tensor), cache, hidden, last)
        return Forward(out.logits.as_subclass(OnDevice), out.cache)


def device_lm() -> DeviceLM:
    return DeviceLM(vocab_size=24, seed=3, eos_logit=None, device=DEVICE)


def test_the_fake_device_refuses_float64_as_mps_does():
    logits = device_lm().forward(torch.tensor([[1]])).logits
    with NoFloat64OnDevice():
        assert logits.device == DEVICE
        logits.float().log_softmax(-1)  # float32 is fine
        assert logits.cpu().double().dtype == torch.float64  # on the CPU too
        with pytest.raises(TypeError, match="float64"):
            logits.double()
        with pytest.raises(TypeError, match="float64"):
            torch.zeros(3, dtype=torch.float64, device=logits.device)
        with pytest.raises(TypeError, match="float64"):
            torch.rand(3, dtype=torch.float64, device=DEVICE, generator=torch.Generator(device=DEVICE))


@pytest.mark.parametrize("fn,params", [
    (stochastic_beam, StochasticBeamParams(num_beams=4)),
    (stochastic_beam, StochasticBeamParams(num_beams=3, temperature=1.7)),
    (sample_beam, SampleBeamParams(num_beams=2, prefix_tokens=2, num_prefixes=3, temperature=1.5, top_k=10)),
], ids=["stochastic", "stochastic-T1.7", "sample_beam"])
def test_gumbel_paths_run_without_float64_on_the_device(fn, params):
    with NoFloat64OnDevice():
        on_device = final(fn, device_lm(), params, [5], 6, seed=4)
    on_cpu = final(fn, FakeLM(vocab_size=24, seed=3, eos_logit=None), params, [5], 6, seed=4)
    assert on_device.to_dict(timing=False) == on_cpu.to_dict(timing=False)  # the same draws either way
