"""Rows of a batch are their runs alone, through the strategies, on the lean weights (bfloat16, int4):
every candidate a beam search scored in its k-row batch has the log-probability a one-row pass over
its own path gives, and sample many's batched rows write what each seed writes as a run of its own."""
from __future__ import annotations

import pytest
import torch

from playground.engine import Request, run
from playground.trace import rnd
from playground.whatif.sample_many import sample_many

MODEL = "smollm2-135m"


@pytest.mark.parametrize("weights", ["bfloat16", "int4"])
def test_every_beam_candidate_scores_as_its_path_alone(store, weights):
    trace = run(store, Request(MODEL, "beam", "The three primary colours are", {"num_beams": 4},
                               max_new_tokens=8, dtype=weights)).to_dict()
    lm = store.get(MODEL).with_weights(weights)
    nodes = {n["id"]: n for n in trace["beam"]["nodes"]}

    def path(node_id):
        ids = []
        while node_id is not None:
            ids.append(nodes[node_id]["token_id"])
            node_id = nodes[node_id]["parent"]
        return ids[::-1]

    by_parent: dict = {}
    for n in nodes.values():
        by_parent.setdefault(n["parent"], []).append(n)
    assert len(by_parent) > 8  # several steps of several beams each: rows of batches of 4
    with torch.inference_mode():
        for parent, children in by_parent.items():
            ids = trace["prompt_ids"] + ([] if parent is None else path(parent))
            alone = lm.forward(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
            for child in children:
                assert rnd(float(alone[child["token_id"]])) == child["logprob"], (parent, child)


@pytest.mark.parametrize("weights", ["bfloat16", "int4"])
def test_sample_many_rows_write_what_their_seeds_write_alone(store, weights):
    req = Request(MODEL, "sampling", "Once upon a time", {"temperature": 1.3, "top_k": 40}, seed=500,
                  max_new_tokens=6, dtype=weights)
    batched = sample_many(store, req, 12, batched=True)
    assert batched["batched"]
    rows = {seed: o["ids"] for o in batched["outcomes"] for seed in o["seeds"]}
    assert len({tuple(ids) for ids in rows.values()}) > 3  # the seeds went different ways
    for seed, ids in rows.items():
        alone = run(store, Request(MODEL, "sampling", req.prompt, req.params, seed=seed, max_new_tokens=6,
                                   dtype=weights))
        assert alone.token_ids == ids, seed
