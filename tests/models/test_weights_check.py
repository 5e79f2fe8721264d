"""A fast path checks itself against float32 where it runs (``playground.models.fast.check``): the
check passes here and is recorded in the trace and the page's status; a deliberately wrong int4
packing, a kernel that raises and a kernel that is missing are each refused by name, and ``auto``
falls back to the next weights. Injected faults use a store of their own, since a model's checked
copies are kept for the process."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from playground.cli import models as models_cli
from playground.engine import Request, in_dtype, run
from playground.errors import InvalidRequest
from playground.models import ModelStore, WeightsRefused
from playground.models.dtypes import INT4_FAST_CAPABILITIES, cpu_capability, cpu_has_native_bf16
from playground.models.fast import check as weights_check
from playground.models.fast import int4 as gguf_int4
from playground.models.fast import rows
from playground.ui.handlers import status_html

needs_kernel = pytest.mark.skipif(not gguf_int4.kernel_available(), reason="this torch has no CPU int4 kernel")


@pytest.mark.parametrize("weights", ["bfloat16", pytest.param("int4", marks=needs_kernel)])
def test_the_fast_paths_pass_here_and_are_recorded(store, smollm, weights, monkeypatch, capsys):
    copy = smollm.with_weights(weights)
    check = copy.check
    assert check.weights == weights and check.capability == torch.backends.cpu.get_cpu_capability()
    assert check.passed and check.max_tv <= weights_check.MAX_TV and check.mean_tv <= weights_check.MEAN_TV
    assert 0 < check.max_tv  # bfloat16 rounding moves the distributions a little, never not at all
    assert smollm.with_weights(weights).check is check  # once per process
    trace = run(store, Request("smollm2-135m", "greedy", "The sky is", max_new_tokens=2, dtype=weights)).to_dict()
    assert trace["weights_check"] == {**check.record(), "one_pass_gap": check.one_pass_gap}
    assert "seconds" not in trace["weights_check"]
    assert trace["timing"]["weights_check_seconds"] == round(check.seconds, 3)
    status = status_html(trace, final=True)
    assert f"total variation {check.max_tv:.3f} at most" in status and check.capability in status
    # the rows each product takes a call here: every distinct product of the lean forward, probed once
    products = {rows.form(w).product for layer in copy.fast.layers for w in (layer.qkv, layer.out, layer.gate_up,
                                                                              layer.down)} | {rows.form(copy.fast.head).product}
    assert {f["product"] for f in trace["weights_check"]["row_forms"]} == products
    assert all(1 <= f["rows"] <= rows.MAX_ROWS for f in trace["weights_check"]["row_forms"])
    assert trace["timing"]["row_probe_seconds"] == round(check.probe_seconds, 3) > 0
    assert "Rows per matrix product call" in weights_check.describe_record(trace["weights_check"])
    monkeypatch.setattr(models_cli, "ModelStore", lambda device: store)
    assert models_cli.cmd_models(["smollm2-135m", "--weights", weights]) == 0
    printed = capsys.readouterr().out
    assert all(f.describe().split(" (")[0] in printed for f in check.row_forms), printed


def test_float32_is_the_reference(store):
    trace = run(store, Request("smollm2-135m", "greedy", "The sky is", max_new_tokens=2, dtype="float32")).to_dict()
    gap = store.get("smollm2-135m").one_pass_gap  # measured on its probe: transformers' rounding, not 0 here
    assert trace["weights_check"] == {"weights": "float32", "reference": "float32", "passed": True,
                                      "one_pass_gap": gap}
    assert "weights_check_seconds" not in trace["timing"]
    assert "the reference the fast paths are checked against" in status_html(trace, final=True)


def test_the_check_sees_a_wrong_distribution():
    probe = weights_check.Probe([1, 2], [3] * weights_check.STEPS, torch.full((2 + weights_check.STEPS, 4), 0.25), 0.0, 0.0)

    class Peaked:  # a "model" whose every distribution is one token: total variation 0.75 from uniform
        weights = "int4"

        def new_cache(self):
            return None

        def forward(self, ids, cache):
            return type("F", (), {"logits": torch.tensor([0.0, 0, 0, 50]).expand(1, ids.shape[1], 4)})()

    check = weights_check.check_weights(probe, Peaked())
    assert not check.passed and abs(check.max_tv - 0.75) < 1e-6 and abs(check.mean_tv - 0.75) < 1e-6
    assert "differs from float32 by total variation 0.75 at most" in check.describe()


RIGHT_PACK = gguf_int4.pack


def wrong_pack(q: np.ndarray) -> torch.Tensor:
    """Each pair of nibbles swapped: the layout of some other kernel, as it were."""
    packed = RIGHT_PACK(q)
    return (packed >> 4) | (packed << 4)


@needs_kernel
def test_a_wrong_packing_is_refused_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(gguf_int4, "pack", wrong_pack)
    store = ModelStore("cpu")
    with pytest.raises(WeightsRefused, match=r"int4 on this CPU \(\w+ kernels\) differs from float32 by total "
                                             r"variation (0\.[5-9]\d|1\.00) at most.*outside the allowed 0\.1.*"
                                             r"use float32"):
        run(store, Request("smollm2-135m", "greedy", "The sky is", max_new_tokens=2, dtype="int4"))
    with pytest.raises(WeightsRefused):  # refused again from the cached check, without a new one
        store.get("smollm2-135m").with_weights("int4")
    trace = run(store, Request("smollm2-135m", "greedy", "The sky is", max_new_tokens=2, dtype="auto")).to_dict()
    expected = "bfloat16" if cpu_has_native_bf16() else "float32"
    assert trace["dtype"] == expected
    if cpu_capability() in INT4_FAST_CAPABILITIES:  # auto tried int4 first, and says why it passed it over
        assert trace["weights_check"]["passed_over"][0].startswith("int4 on this CPU")
        assert "Passed over: int4 on this CPU" in status_html(trace, final=True)


@needs_kernel
def test_a_kernel_that_raises_is_refused(monkeypatch):
    def broken(self, x):
        raise RuntimeError("could not find a kernel for _weight_int4pack_mm_for_cpu on this CPU")

    monkeypatch.setattr(gguf_int4.Int4Linear, "__call__", broken)
    store = ModelStore("cpu")
    with pytest.raises(WeightsRefused, match=r"int4 on this CPU \(\w+ kernels\) failed its check against float32: "
                                             r"RuntimeError: could not find a kernel"):
        store.get("smollm2-135m").with_weights("int4")
    assert in_dtype(store.get("smollm2-135m"), "auto").weights == ("bfloat16" if cpu_has_native_bf16() else "float32")


def test_a_missing_kernel_is_never_tried(monkeypatch):
    monkeypatch.setattr(gguf_int4, "kernel_available", lambda: False)
    store = ModelStore("cpu")
    lm = store.get("smollm2-135m")
    with pytest.raises(InvalidRequest, match="int4 weights are not available for smollm2-135m: they run on the CPU "
                                             "through torch's int4 kernel"):
        lm.with_weights("int4")
    assert in_dtype(lm, "auto").weights == ("bfloat16" if cpu_has_native_bf16() else "float32")
