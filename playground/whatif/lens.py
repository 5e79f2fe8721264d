"""The logit lens at one step of a finished run: what every layer would have chosen there.

One forward pass over the step's context (the run's prompt ids and its tokens before the step), in
the run's model and weights, asking for the hidden states; every state at the last position is read
through the final norm and the LM head (``LM.layer_logits``), and ``strategies.lens`` makes the
record. The pass's logits are the step's: a lean forward's one pass equals its steps bit for bit;
transformers' float32 forward over the whole context sums in another order than the run's cached
steps, about 1e-5 relative on a probability (tests/whatif/test_lens.py holds the last row to the recorded
raw distribution). For beam, speculative and contrastive runs the context is the final text's tokens,
read by the run's model (the target, the expert).
"""
from __future__ import annotations

from typing import Any

import torch

from playground.errors import InvalidRequest
from playground.models import ModelStore, Progress
from playground.whatif.branches import index_in
from strategies.lens import COLUMNS, lens_record


@torch.inference_mode()
def lens(store: ModelStore, trace: dict[str, Any], step: Any, columns: int = COLUMNS,
         progress: Progress | None = None) -> dict[str, Any]:
    """The lens record (``strategies.lens``) of ``trace``'s step ``step``, with the step, its position in
    the text, and the model and weights that read it."""
    tokens = trace.get("tokens") or []
    if not tokens:
        raise InvalidRequest("generate a run first: the logit lens reads one of its steps")
    k = index_in(step, len(tokens), "step")
    lm = store.get(trace["model"], progress)
    if trace.get("dtype") and trace["dtype"] != lm.weights:
        lm = lm.with_weights(trace["dtype"], progress)
    context = [int(i) for i in trace["prompt_ids"]] + [int(t["id"]) for t in tokens[:k]]
    if not context:
        raise InvalidRequest("the logit lens needs a context: the step has no token before it")
    try:
        lm.decoder_parts()
    except InvalidRequest:
        raise InvalidRequest(f"the logit lens needs the final norm of a llama, Gemma or GPT-2 style model; "
                             f"{lm.key} has none") from None
    out = lm.forward(torch.tensor([context], device=lm.device), hidden=True)
    if out.hidden_states is None:
        raise InvalidRequest(f"{lm.key} gave no hidden states: the logit lens cannot read its layers")
    record = lens_record(lm.layer_logits(out.hidden_states, last=out.logits[0, -1]), int(tokens[k]["id"]), lm.piece,
                         columns, spend=True)
    return {"step": k, "position": len(context), "model": lm.key, "dtype": lm.weights, **record}
