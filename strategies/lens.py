"""The logit lens's record: what each layer of the model would have said at one step.

A forward's hidden states (the embeddings, then the output of every layer) are each read through
the model's final norm and LM head, as the model reads its last one (nostalgebraist, "interpreting
GPT: the logit lens", 2020). The rows are rough on early layers, which were never trained to be
read so (Belrose et al. 2023, "Eliciting Latent Predictions from Transformers with the Tuned Lens");
the last row is the model's own distribution.

``lens_record(logits, chosen, piece)`` turns the rows ([layers + 1, vocab] float32 logits) into
plain JSON: the columns of the heat map (the last row's ``top_columns`` most probable tokens, and the
chosen token after them when it is not among them), each row's probabilities of those columns, its own top tokens and entropy, the
chosen token's probability and rank at every row (rank = 1 + how many tokens are strictly more
probable, over the whole vocabulary), and the first row where the chosen token is the most probable.
Row 0 is the embeddings; row i the output of layer i.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from playground.trace import rnd

COLUMNS = 10  # the last row's top tokens the heat map shows
ROW_TOP = 3  # each row's own top tokens


def lens_record(logits: torch.Tensor, chosen: int, piece: Callable[[int], str], columns: int = COLUMNS,
                row_top: int = ROW_TOP) -> dict[str, Any]:
    """The record of one step's lens; ``logits`` [layers + 1, vocab] (row 0: the embeddings)."""
    logits = logits.float()
    logp = logits.log_softmax(-1)
    probs = logp.exp()
    n = min(columns, logp.shape[-1])
    ids = [int(i) for i in logits[-1].topk(n).indices]
    if chosen not in ids:
        ids.append(chosen)
    cols = torch.tensor(ids, device=logp.device)
    ranks = (logits > logits[:, chosen, None]).sum(-1) + 1  # over the logits: the same order as p's
    entropy = -torch.special.xlogy(probs, probs).sum(-1)  # a token of probability 0 adds 0
    top_p, top_i = probs.topk(min(row_top, logp.shape[-1]), dim=-1)
    rows = []
    for layer in range(logp.shape[0]):
        rows.append({
            "layer": layer,
            "probs": [rnd(p) for p in probs[layer, cols].tolist()],
            "top": [{"id": int(i), "text": piece(int(i)), "prob": rnd(p)}
                    for i, p in zip(top_i[layer].tolist(), top_p[layer].tolist())],
            "chosen_prob": rnd(probs[layer, chosen]),
            "chosen_rank": int(ranks[layer]),
            "entropy": rnd(entropy[layer]),
        })
    first = next((r["layer"] for r in rows if r["chosen_rank"] == 1), None)
    return {"chosen": {"id": chosen, "text": piece(chosen)},
            "columns": [{"id": i, "text": piece(i)} for i in ids], "top_columns": n,
            "rows": rows, "first_top_layer": first}
