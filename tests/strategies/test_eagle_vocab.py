"""The EAGLE head's reduced draft vocabulary (FR-Spec): the stored map from draft index to target id
is read back with the weights and is not the identity; drafts outside it never appear; greedy EAGLE
still equals greedy decoding; tree sampling is still lossless (the chi-square of tests/strategies/test_eagle.py
with its control); ``eagle_vocab`` picks a prefix of the map or the whole vocabulary."""
from __future__ import annotations

import copy
import json

import pytest
import torch
from test_speculative_strategy_lossless import CHAIN, LENGTH, P_VALUE, PROMPT, chi_square, exact

from playground.engine import Request, run
from playground.errors import InvalidRequest
from strategies.sampling.chain import ChainParams
from strategies.speculative.eagle.head import ATTACHED_KEY, head_dir, load_head, save_head

# Not 0..9: a head that drafted ids 0..N-1 instead of its map would draft 9 and never 15.
MAP = [15, 3, 4, 5, 1, 2, 0, 6, 7, 8]
N = 1000


@pytest.fixture
def reduced(store, monkeypatch):
    """The toy head with the map ``MAP``, in place of the shipped one for this test."""
    lm = store.get("toy")
    head, record = load_head(lm)
    mapped = copy.deepcopy(head)
    mapped.set_draft_ids(torch.tensor(MAP))
    monkeypatch.setitem(lm.attached, ATTACHED_KEY, (mapped, record))
    return mapped


def drafted(trace) -> set[int]:
    return {n["id"] for r in trace.rounds for n in r["tree"] if n["node"]}


def eagle(store, prompt, seed=0, tokens=20, **params):
    return run(store, Request("toy", "speculative", prompt, {"draft": "eagle", "measure_baseline": False, **params},
                              seed=seed, max_new_tokens=tokens))


@pytest.mark.parametrize("prompt", ["1 2", "3", "once upon", "5 6 7"])
@pytest.mark.parametrize("tree", [dict(), dict(eagle_branching=3, eagle_depth=2)])
def test_greedy_eagle_with_a_reduced_vocabulary_is_greedy(store, reduced, prompt, tree):
    plain = run(store, Request("toy", "sampling", prompt, {"temperature": 0.0}, max_new_tokens=20))
    trace = eagle(store, prompt, temperature=0.0, **tree)
    assert trace.token_ids == plain.token_ids
    assert drafted(trace) <= set(MAP)
    assert trace.extra["speculative"]["draft_vocab"] == len(MAP)


def test_a_prefix_of_the_map_and_the_whole_vocabulary(store, reduced):
    small = eagle(store, "1 2", temperature=0.0, eagle_vocab=3)
    assert drafted(small) <= set(MAP[:3]) and small.extra["speculative"]["draft_vocab"] == 3
    whole = eagle(store, "1 2", temperature=0.0, eagle_vocab=-1)
    assert whole.extra["speculative"]["draft_vocab"] == "full"
    assert drafted(whole) - set(MAP[:3])  # the whole vocabulary drafts what the prefix cannot
    assert small.token_ids == whole.token_ids


@pytest.fixture
def mapped_runs(store, reduced) -> list[tuple[tuple[int, ...], set[int]]]:
    params = {"eagle_depth": 2, "eagle_branching": 2, **CHAIN}
    out = []
    for seed in range(N):
        trace = run(store, Request("toy", "speculative", PROMPT, {"draft": "eagle", "measure_baseline": False,
                                                                  **params}, seed=seed, max_new_tokens=LENGTH,
                                   top_n=1))
        out.append((tuple(trace.token_ids), drafted(trace)))
    return out


def test_tree_sampling_with_a_reduced_vocabulary_is_lossless(store, mapped_runs):
    lm = store.get("toy")
    samples = [t for t, _ in mapped_runs]
    p_value, impossible = chi_square(samples, exact(lm, lm.encode(PROMPT), ChainParams(**CHAIN)))
    assert impossible == 0 and p_value > P_VALUE, (p_value, impossible)
    assert set().union(*(d for _, d in mapped_runs)) <= set(MAP)
    # Tokens outside the map still come out (the target adds them), so the map limits drafts only.
    assert {t for s in samples for t in s} - set(MAP)
    without = ChainParams(**{k: v for k, v in CHAIN.items() if k != "top_p"})
    p_control, impossible_control = chi_square(samples, exact(lm, lm.encode(PROMPT), without))
    assert p_control < 1e-6 or impossible_control > 0


def test_the_map_is_saved_and_read_back_with_the_weights(store, reduced, tmp_path, monkeypatch):
    lm = store.get("toy")
    save_head(reduced, "toy", {"model": "toy"}, tmp_path)
    monkeypatch.delitem(lm.attached, ATTACHED_KEY)
    loaded, _ = load_head(lm, tmp_path)
    assert loaded.draft_ids.tolist() == MAP


def test_a_map_past_the_vocabulary_is_refused(store, reduced, tmp_path, monkeypatch):
    lm = store.get("toy")
    bad = copy.deepcopy(reduced)
    bad.set_draft_ids(torch.tensor([3, lm.vocab_size]))
    save_head(bad, "toy", {"model": "toy"}, tmp_path)
    monkeypatch.delitem(lm.attached, ATTACHED_KEY)
    with pytest.raises(ValueError, match="past the vocabulary"):
        load_head(lm, tmp_path)


@pytest.mark.parametrize("vocab,message", [(11, r"-1, 0 or 1\.\.10"), (-2, "eagle_vocab")])
def test_eagle_vocab_out_of_range_is_refused(store, reduced, vocab, message):
    with pytest.raises(InvalidRequest, match=message):
        eagle(store, "1 2", temperature=0.0, eagle_vocab=vocab)


def test_a_full_head_takes_no_size(store):
    with pytest.raises(InvalidRequest, match="0 or -1"):
        eagle(store, "1 2", temperature=0.0, eagle_vocab=5)


def test_the_shipped_smollm2_head_stores_its_map(store):
    """The map is stored, is not the identity, has distinct ids in range, and matches its record."""
    lm = store.get("smollm2-135m")
    head, record = load_head(lm)
    ids = head.draft_ids
    assert ids is not None
    info = record["draft_vocabulary"]
    assert ids.numel() == info["size"] < lm.vocab_size
    assert not torch.equal(ids.cpu(), torch.arange(ids.numel()))
    assert len(set(ids.tolist())) == ids.numel() and 0 <= int(ids.min()) and int(ids.max()) < lm.vocab_size
    assert json.loads((head_dir("smollm2-135m") / "head.json").read_text())["draft_vocabulary"] == info
