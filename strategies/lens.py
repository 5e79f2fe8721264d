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

import math
from typing import Any, Callable

import torch

from playground.trace import rnd

COLUMNS = 10  # the last row's top tokens the heat map shows
ROW_TOP = 3  # each row's own top tokens
_FLOOR = math.log(torch.finfo(torch.float32).tiny) + 1e-3  # the log of a probability just above the smallest normal
_SMALLEST = float(torch.tensor(_FLOOR).exp())  # e^_FLOOR in float32: a probability at or under it is 0
BLOCK = 1024  # top_of_rows's block of a row


def top_of_rows(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``k`` largest values, largest first, and their indices: ``x.topk(k, -1)`` read
    through blocks of ``BLOCK`` columns. A row's k largest values lie in the k blocks of largest
    maxima (k blocks hold a value at least the k-th largest maximum, so the k-th largest value is
    at least it), so one pass takes every block's maximum and the selection runs over k blocks: on
    Gemma 3's 19 rows x 262,144 a fifth of a whole-row selection's time. Ties at the k-th value may
    take another of the tied tokens than ``topk`` does (whose choice among ties is unspecified too)."""
    rows, width = x.shape
    blocks = width // BLOCK
    if blocks <= 4 * k:  # few blocks: the plain selection
        return x.topk(k, dim=-1)
    body = x[:, :blocks * BLOCK].view(rows, blocks, BLOCK)
    best = body.amax(-1).topk(k, dim=-1).indices  # [rows, k] the blocks of the k largest maxima
    values = body.gather(1, best[..., None].expand(rows, k, BLOCK)).reshape(rows, k * BLOCK)
    index = (best[..., None] * BLOCK + torch.arange(BLOCK, device=x.device)).reshape(rows, k * BLOCK)
    if width > blocks * BLOCK:  # the columns after the last whole block are all candidates
        tail = torch.arange(blocks * BLOCK, width, device=x.device).expand(rows, -1)
        values, index = torch.cat([values, x[:, blocks * BLOCK:]], 1), torch.cat([index, tail], 1)
    top, at = values.topk(k, dim=-1)
    return top, index.gather(1, at)


@torch.inference_mode()  # rows made in inference mode are written in place (``spend``)
def lens_record(logits: torch.Tensor, chosen: int, piece: Callable[[int], str], columns: int = COLUMNS,
                row_top: int = ROW_TOP, spend: bool = False) -> dict[str, Any]:
    """The record of one step's lens; ``logits`` [layers + 1, vocab] (row 0: the embeddings).

    With ``spend`` the rows' float32 tensor is overwritten (the caller's own, made for this record).
    A lens reads every layer over the whole vocabulary (19 rows x 262,144 on Gemma 3), where a fresh
    buffer of that size costs more than the arithmetic on it: the record takes one, or none but the
    rows' own with ``spend``."""
    x = logits.float()
    if x is logits and not spend:
        x = x.clone()
    n = min(columns, x.shape[-1])
    _, top = top_of_rows(x, max(n, min(row_top, x.shape[-1])))  # each row's top tokens, the order of p's
    top_i = top[:, :row_top]
    ids = [int(i) for i in top[-1, :n]]
    if chosen not in ids:
        ids.append(chosen)
    cols = torch.tensor(ids, device=x.device)
    work = torch.empty_like(x)
    # rank = 1 + how many tokens are strictly more probable: how many logits are strictly greater
    ranks = torch.sub(x, x[:, chosen, None], out=work).gt_(0).sum(-1) + 1
    logp = torch._log_softmax(x, -1, False, out=work)  # the decoder's own softmax: exp of log_softmax
    # a probability under float32's smallest normal number is 0: its exponential would be subnormal,
    # which a CPU computes tens of times slower (Gemma 3's 19 rows: 38 ms, against 1.5 ms so)
    probs = torch.clamp(logp, min=_FLOOR, out=x).exp_()
    torch.threshold(probs, _SMALLEST, 0.0, out=probs)
    entropy = -torch.mul(probs, logp, out=work).sum(-1)  # logits are finite: a token of probability 0 adds 0
    top_p = probs.gather(-1, top_i)
    col_p = probs[:, cols]
    rows = []
    for layer in range(logits.shape[0]):
        rows.append({
            "layer": layer,
            "probs": [rnd(p) for p in col_p[layer].tolist()],
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

