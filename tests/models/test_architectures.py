"""The architectures table (playground.models.architectures) is the one place an architecture's facts
live: each row's offline model, lean forward and parity test are there, and lineup, lm and int4 read it."""
from __future__ import annotations

from pathlib import Path

from playground.models import lineup, lm
from playground.models.architectures import ARCHITECTURES, BY_MODEL
from playground.models.fast import int4

ROOT = Path(__file__).resolve().parents[2]


def test_every_row_names_an_offline_gguf_model_and_a_parity_test_that_runs_its_lean_forward():
    for arch in ARCHITECTURES:
        assert lineup.OFFLINE[arch.model].source == "gguf", arch.name
        test = ROOT / arch.parity_test
        assert test.is_file(), arch.parity_test
        module = arch.lean.__module__.rsplit(".", 1)[-1]  # llama, gemma
        assert module in test.read_text(encoding="utf-8"), (arch.parity_test, module)


def test_lineup_lm_and_int4_read_the_table():
    assert lineup.GGUF_PACKAGES == {a.model: a.gguf_package for a in ARCHITECTURES}
    assert {spec.key for spec in lineup.OFFLINE.values() if spec.source == "gguf"} == set(BY_MODEL)
    assert lm.LEAN_FORWARDS == tuple(a.lean for a in ARCHITECTURES)
    assert int4.LAYER_NAMES == {n for a in ARCHITECTURES for n in a.int4_layer_names.values()}
