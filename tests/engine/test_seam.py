"""The model seam (playground/seam.py): mypy checks ``LM`` against the Protocols statically (make lint);
here a loaded model answers every member of them at run time, with the types they state."""
from __future__ import annotations

import torch

from playground.seam import LanguageModel, ModelOutput


def members(protocol: type) -> list[str]:
    return sorted(n for n in vars(protocol) if not n.startswith("_"))


def test_a_loaded_model_has_every_member_of_the_seam(toy):
    names = members(LanguageModel)
    assert {"key", "device", "piece", "forward", "eos_ids", "vocab_size"} <= set(names)
    assert [n for n in names if not hasattr(toy, n)] == []
    assert isinstance(toy.piece(1), str) and isinstance(toy.eos_ids, frozenset)
    assert isinstance(toy.device, torch.device)


def test_a_forward_returns_what_model_output_states(toy):
    out = toy.forward(torch.tensor([[1, 2, 3]], device=toy.device))
    assert [n for n in members(ModelOutput) if not hasattr(out, n)] == []
    assert out.logits.shape == (1, 3, toy.vocab_size) and out.logits.dtype == torch.float32
