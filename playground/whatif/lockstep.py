"""Two models (or one model in two weights types) reading the same text in lockstep: where their
next-token distributions part.

Both read the context and the text in one teacher-forced pass each (the context as ``score`` builds it,
playground/whatif/score.py ``split_context``, from model A's tokenizer; model B must share it:
strategies/pairing.py). At every scored position t, with p and q the two models' distributions for
token t:

- KL(p || q) = sum p (log p - log q) and KL(q || p), in nats (0 when the models agree exactly);
- total variation = 1/2 sum |p - q|, in [0, 1];
- top-K overlap = |top-K(p) ∩ top-K(q)| / K;
- whether their argmax agrees, and each model's probability of the text's token there.

The summary holds the mean and max of each, the argmax agreement rate, and the steps of largest
KL(p || q). Every number is computed here once, in float64 on the CPU from both models' full rows of
float32 logits (in float32 a KL of 1e-5 would be a sum of terms each rounded near 1e-7 and come out a few
per cent wrong); the chart draws this record. Model A against itself gives 0 everywhere: both rows come
from one pass.
"""
from __future__ import annotations

from typing import Any

import torch

from playground.engine import in_dtype
from playground.errors import InvalidRequest
from playground.models import ModelStore, Progress
from playground.models.dtypes import check_dtype
from playground.trace import rnd
from playground.whatif.score import check_texts, split_context
from strategies.pairing import check_shared_tokenizer

TOP_K = 10  # the top-K overlap's K
LARGEST = 5  # the steps of largest divergence listed
SHOWN = 8  # each model's top tokens kept per step (the side-by-side distributions)


def _model(store: ModelStore, key: str, dtype: str, progress: Progress | None) -> Any:
    """``key`` in the weights ``dtype`` resolves to for it (auto: as a run's, playground.engine.in_dtype)."""
    check_dtype(dtype)
    return in_dtype(store.get(key, progress), dtype, progress)


@torch.inference_mode()
def lockstep(store: ModelStore, text: str, model_a: str, model_b: str, dtype_a: str = "float32",
             dtype_b: str = "float32", prompt: str = "", system: str = "", chat: bool | None = None,
             top_k: int = TOP_K, progress: Progress | None = None) -> dict[str, Any]:
    """The lockstep record of ``text`` (after ``prompt``) read by A and B; see the module docstring."""
    check_texts(text, prompt, system, "text must not be empty: the two models read it")
    if not isinstance(top_k, int) or not 1 <= top_k <= 100:
        raise InvalidRequest(f"top_k must be an integer in [1, 100], got {top_k!r}")
    a = _model(store, model_a, dtype_a, progress)
    b = _model(store, model_b, dtype_b, progress)
    if a.spec.numeric_prompt != b.spec.numeric_prompt:
        raise InvalidRequest(f"model B {b.key!r} does not share the tokenizer of {a.key!r}")
    vocab = a.vocab_size if a.spec.numeric_prompt and a.vocab_size == b.vocab_size else None
    if vocab is None:
        vocab = check_shared_tokenizer(a, b, "model B")
    context, scored, mode = split_context(a, text, prompt, system, chat)
    if len(context) + len(scored) > min(a.max_context, b.max_context):
        raise InvalidRequest(f"text is {len(scored)} tokens after a context of {len(context)}; the pair accepts "
                             f"at most {min(a.max_context, b.max_context)} in all")
    rows = []
    for lm in (a, b):
        ids = torch.tensor([context + scored], device=lm.device)
        rows.append(lm.forward(ids).logits[0, len(context) - 1:-1, :vocab].float().cpu())
    la, lb = (row.double().log_softmax(-1) for row in rows)
    pa, pb = la.exp(), lb.exp()
    kl_ab, kl_ba, tv = divergences(la, lb)
    top_a, top_b = la.topk(top_k, dim=-1).indices, lb.topk(top_k, dim=-1).indices
    overlap = (top_a[:, :, None] == top_b[:, None, :]).any(-1).float().mean(-1)
    arg_a, arg_b = la.argmax(-1), lb.argmax(-1)
    token = torch.tensor(scored)
    steps = []
    for t in range(len(scored)):
        shown = _shown(la[t], lb[t], int(token[t]))
        steps.append({
            "step": t, "id": int(token[t]), "text": a.piece(int(token[t])),
            "kl_ab": rnd(kl_ab[t]), "kl_ba": rnd(kl_ba[t]), "tv": rnd(tv[t]), "overlap": rnd(overlap[t]),
            "agree": bool(arg_a[t] == arg_b[t]),
            "argmax_a": {"id": int(arg_a[t]), "text": a.piece(int(arg_a[t]))},
            "argmax_b": {"id": int(arg_b[t]), "text": a.piece(int(arg_b[t]))},
            "p_a": rnd(pa[t, token[t]]), "p_b": rnd(pb[t, token[t]]),
            "candidates": [{"id": i, "text": a.piece(i), "p_a": rnd(pa[t, i]), "p_b": rnd(pb[t, i])}
                           for i in shown],
        })
    largest = sorted(range(len(steps)), key=lambda t: -float(kl_ab[t]))[:LARGEST]
    summary = {"tokens": len(steps), "agreement": rnd(float((arg_a == arg_b).float().mean())),
               "top_k": top_k, "largest": largest}
    for name, values in (("kl_ab", kl_ab), ("kl_ba", kl_ba), ("tv", tv), ("overlap", overlap)):
        summary[f"mean_{name}"] = rnd(float(values.mean()))
        summary[f"max_{name}"] = rnd(float(values.max()))
    return {"a": {"model": a.key, "dtype": a.weights}, "b": {"model": b.key, "dtype": b.weights},
            "prompt": prompt, "text": text, "mode": mode, "context_tokens": len(context),
            "steps": steps, "summary": summary}


def divergences(la: torch.Tensor, lb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(KL(p || q), KL(q || p), total variation), each [steps], from the log-probabilities ``la`` and ``lb``
    ([steps, vocab], float64). A KL that rounding takes below 0 is 0."""
    pa, pb = la.exp(), lb.exp()
    kl_ab = (pa * (la - lb)).sum(-1).clamp_min(0.0)
    kl_ba = (pb * (lb - la)).sum(-1).clamp_min(0.0)
    return kl_ab, kl_ba, 0.5 * (pa - pb).abs().sum(-1)


def _shown(la: torch.Tensor, lb: torch.Tensor, token: int) -> list[int]:
    """The tokens a step's side-by-side view shows: each model's SHOWN most probable, and the text's token."""
    ids: list[int] = []
    for i in [*la.topk(SHOWN).indices.tolist(), *lb.topk(SHOWN).indices.tolist(), token]:
        if i not in ids:
            ids.append(int(i))
    return ids
