"""CoT-decoding's branches (Wang & Zhou 2024, "Chain-of-Thought Reasoning Without Prompting",
arXiv 2402.10200, section 2): the top-k tokens of the model's first distribution, each continued greedily.

Branch j starts with the j-th most likely first token (j = 0 is plain greedy decoding) and then takes the
argmax of the model's own distribution at every step until an end of text or ``max_new_tokens``. The k
rows run as one batch after one pass over the prompt. Each step is recorded as sample many records its
samples (step_record.py; ``logprob`` is the model's own, as nothing else was drawn from), so the rule
reads the answer tokens' top-1 minus top-2 margins from the records (rules.py). The request's chain and
grammar are not used: the method is greedy decoding on the model's distribution by definition.
"""
from __future__ import annotations

import torch

from playground.engine import Request, prepare
from playground.errors import InvalidRequest
from playground.models import ModelStore, Progress
from playground.whatif.sample_many import step_records
from playground.whatif.step_record import Drawn, StepRecord, drawn_of

MAX_BRANCHES = 32  # the paper's k is 10


def check_branches(k: int, vocab: int) -> int:
    high = min(MAX_BRANCHES, vocab)
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= high:
        raise InvalidRequest(f"branches must be an integer in [0, {high}] (0: no branches), got {k}")
    return k


@torch.inference_mode()
def branches(lm, prompt_ids: list[int], k: int, max_new_tokens: int) -> list[Drawn]:
    """The k branches, most likely first token first; each branch's ``seed`` is its rank."""
    k = check_branches(k, lm.vocab_size)
    if k == 0:
        return []
    out = lm.forward(torch.tensor([prompt_ids], device=lm.device))
    logits, cache = out.logits[:, -1], out.cache
    logp = logits.float().log_softmax(-1)
    first = logp[0].topk(k).indices.tolist()
    ids: list[list[int]] = [[t] for t in first]
    steps: list[list[StepRecord]] = [[rec] for rec in step_records(logits, logp, [0] * k, first)]
    alive = [j for j in range(k) if first[j] not in lm.eos_ids]
    parents = [0] * len(alive)
    for _ in range(max_new_tokens - 1):
        if not alive:
            break
        cache.reorder_cache(torch.tensor(parents, device=lm.device))
        logits = lm.forward(torch.tensor([[ids[j][-1]] for j in alive], device=lm.device), cache).logits[:, -1]
        logp = logits.float().log_softmax(-1)
        chosen = logp.argmax(-1).tolist()
        for j, rec in zip(alive, step_records(logits, logp, list(range(len(alive))), chosen)):
            ids[j].append(rec.id)
            steps[j].append(rec)
        going = [r for r, j in enumerate(alive) if ids[j][-1] not in lm.eos_ids]
        alive, parents = [alive[r] for r in going], going
    return [drawn_of(j, ids[j], steps[j], lm.decode) for j in range(k)]


def cot_branches(store: ModelStore, req: Request, k: int, progress: Progress | None = None) -> list[Drawn]:
    """The branches for ``req``'s model and prompt (its strategy, chain and grammar are not used)."""
    _, _, ctx = prepare(store, Request(model=req.model, strategy="greedy", prompt=req.prompt, seed=req.seed,
                                       max_new_tokens=req.max_new_tokens, system=req.system, chat=req.chat,
                                       dtype=req.dtype), progress)
    return branches(ctx.lm, ctx.prompt_ids, k, ctx.max_new_tokens)
