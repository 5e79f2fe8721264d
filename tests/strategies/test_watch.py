"""The watch-list: what each step records for the watched tokens, against the recorded candidates and a full
sort of the very logits the run used (toy and SmolLM2); a watch-list changes no token; bad lists are refused."""
from __future__ import annotations

import pytest
import torch

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.trace import rnd
from strategies.sampling.chain import apply_chain
from strategies.sampling.samplers import SamplerParams, build_sampler_chain
from strategies.watch import MAX_WATCHED, parse_watch, ranks, watched_token


def sorted_rank(probs: torch.Tensor, p: float) -> int:
    """1 + how many tokens are more probable than ``p``, read off a full descending sort."""
    ordered = probs.sort(descending=True).values
    return int(torch.searchsorted(-ordered, torch.tensor(-p, dtype=ordered.dtype), right=False)) + 1


def logits_seen(lm, monkeypatch) -> list[torch.Tensor]:
    """The last-position logits of every forward ``lm`` makes, in order: a run's steps read the last ones, one
    each (the prompt's pass, then one a token but the last), after any check of the weights."""
    seen: list[torch.Tensor] = []
    forward = lm.forward

    def recording(*args, **kwargs):
        out = forward(*args, **kwargs)
        seen.append(out.logits[0, -1].clone())
        return out

    monkeypatch.setattr(lm, "forward", recording)
    return seen


def test_ranks_count_strictly_more_probable_tokens_down_to_subnormal_probabilities():
    tiny = torch.finfo(torch.float32).tiny  # the smallest normal; under it, subnormal numbers
    probs = torch.tensor([0.5, 0.25, 0.25, tiny / 2**22, tiny / 2**21, 0.0, tiny / 2**21])
    picked, rank = ranks(probs, torch.tensor([1, 2, 3, 4, 5, 0]))
    assert rank == [2, 2, 6, 4, 7, 1]  # tied tokens share a rank; 2^-147 > 2^-148 > 0, subnormal as they are
    assert all(type(r) is int for r in rank)  # the trace's JSON says 2, not 2.0
    assert picked == probs[[1, 2, 3, 4, 5, 0]].tolist()


CASES = [("toy", "1 2", "the, a, 12, once", {"temperature": 1.3, "top_k": 2}, 3),
         ("smollm2-135m", "Write one sentence about the ocean.", "the, ocean, Paris, ., 42, waves, zebra, The",
          {"temperature": 0.8, "top_p": 0.9}, 20)]


@pytest.mark.parametrize("model, prompt, watch, params, top_n", CASES)
def test_watched_tokens_match_the_candidates_and_a_full_sort(store, monkeypatch, model, prompt, watch, params, top_n):
    lm = store.get(model)
    seen = logits_seen(lm, monkeypatch)
    trace = run(store, Request(model, "sampling", prompt, {**params, "watch": watch}, seed=5, max_new_tokens=10,
                               top_n=top_n))
    monkeypatch.undo()
    ids = [w["id"] for w in trace.extra["watch"]]
    assert ids == list(dict.fromkeys(watched_token(lm, e) for e in parse_watch(watch)))
    assert [w["text"] for w in trace.extra["watch"]] == [lm.piece(i) for i in ids]
    chain = build_sampler_chain(SamplerParams(**params))
    context = list(trace.prompt_ids)
    outside = 0
    for step, logits in zip(trace.steps, seen[-len(trace.steps):]):
        raw = logits.float().log_softmax(-1).exp()
        final = apply_chain(chain, logits[None], torch.tensor([context]))[0].float().log_softmax(-1).exp()
        candidates = {c.id: c for c in step.candidates}
        assert len(step.extra["watch"]) == len(ids)
        for token_id, w in zip(ids, step.extra["watch"]):
            assert w["raw_prob"] == rnd(raw[token_id]) and w["prob"] == rnd(final[token_id])
            assert w["raw_rank"] == sorted_rank(raw, float(raw[token_id]))
            assert w["rank"] == sorted_rank(final, float(final[token_id]))
            if token_id in candidates:
                assert (w["raw_prob"], w["prob"]) == (rnd(candidates[token_id].raw_prob),
                                                      rnd(candidates[token_id].prob))
            else:
                outside += 1
        context.append(step.chosen)
    assert outside > 0  # some watched token was outside the recorded candidates and still got its numbers


@pytest.mark.parametrize("strategy", ["greedy", "sampling", "gumbel"])
def test_a_watch_list_changes_nothing_else(store, toy, strategy):
    params = {} if strategy == "greedy" else {"temperature": 1.5}
    plain = run(store, Request("toy", strategy, "1 2", params, seed=11, max_new_tokens=12)).to_dict(timing=False)
    watched = run(store, Request("toy", strategy, "1 2", {**params, "watch": "the,a"}, seed=11,
                                 max_new_tokens=12)).to_dict(timing=False)
    assert watched.pop("watch") == [{"id": 9, "text": " the"}, {"id": 3, "text": " a"}]
    assert watched["params"].pop("watch") == "the, a" and plain["params"].pop("watch") == ""
    for step in watched["steps"]:
        step.pop("watch")
    assert watched == plain


def test_bad_watch_lists_are_refused(store, toy):
    with pytest.raises(InvalidRequest, match=rf"watch must list at most {MAX_WATCHED} tokens or words, got 9"):
        SamplerParams(watch=",".join("abcdefghi"))
    assert SamplerParams(watch=" a , ,the,").watch == "a, the"
    with pytest.raises(InvalidRequest, match=r"watch: 'zzqx' has no token in toy's vocabulary"):
        run(store, Request("toy", "greedy", "1 2", {"watch": "a, zzqx"}, max_new_tokens=2))
    with pytest.raises(InvalidRequest, match=r"watch: token ids must be in \[0, 15\], got 99"):
        run(store, Request("toy", "sampling", "1 2", {"watch": "99"}, max_new_tokens=2))
