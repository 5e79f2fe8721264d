"""The same-text sweep (playground.tools.same_text): greedy draft-and-verify against plain greedy."""
from __future__ import annotations

import dataclasses
import io

import pytest

from playground.tools import same_text


def test_parted_at_is_the_first_differing_position():
    assert same_text.parted_at([1, 2, 3], [1, 2, 4]) == 2
    assert same_text.parted_at([1, 2], [1, 2, 3]) == 2
    assert same_text.parted_at([5], [6]) == 0


def test_the_toy_sweep_finds_every_draft_writing_greedys_text(capsys):
    assert same_text.main(["--model", "toy", "--weights", "float32", "--prompts", "3", "--tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "toy float32: differing texts 0 of 9 (early_exit 0, prompt_lookup 0, toy-small 0)" in out


def test_a_text_that_parts_is_counted_and_printed(store, monkeypatch):
    real = same_text.run

    def run(store_, req, *a, **k):
        trace = real(store_, req, *a, **k)
        if req.strategy == "speculative" and req.params["draft"] == "prompt_lookup":
            trace.tokens[3] = dataclasses.replace(trace.tokens[3], id=trace.tokens[3].id + 1)
        return trace

    monkeypatch.setattr(same_text, "run", run)
    out = io.StringIO()
    got = same_text.sweep(store, "toy", "float32", ["1 2"], 6, ["early_exit", "prompt_lookup"], out)
    assert got == {"early_exit": 0, "prompt_lookup": 1}
    assert "float32 prompt_lookup '1 2': parts from greedy at token 3" in out.getvalue()


def test_an_unknown_draft_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        same_text.main(["--model", "toy", "--drafts", "nonsense"])
    assert "unknown draft 'nonsense'" in capsys.readouterr().err
