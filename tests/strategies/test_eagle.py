"""EAGLE through the ``speculative`` strategy on ``toy`` with its shipped head: greedy equals the target
token for token, tree sampling is lossless (the chi-square of the speculative issue, with its
decisive controls), the KV cache keeps exactly the accepted path, and the head's held-out tau
matches the value recorded when it was trained."""
from __future__ import annotations

import json

import pytest
import torch
from test_speculative_strategy_lossless import CHAIN, LENGTH, P_VALUE, PROMPT, chi_square, exact

from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.tools.train_eagle import held_out_tau
from strategies.sampling.chain import ChainParams, build_chain
from strategies.speculative.eagle.decoder import EagleDecoder, available_heads
from strategies.speculative.eagle.head import head_dir

N = 1000
TREES = [dict(), dict(eagle_branching=1, eagle_depth=5), dict(eagle_branching=3, eagle_depth=2),
         dict(eagle_tree="dynamic", eagle_branching=3, eagle_depth=4, eagle_total_tokens=6)]


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("prompt", ["1 2", "3", "once upon", "5 6 7"])
def test_greedy_eagle_is_greedy_target(store, tree, prompt):
    plain = run(store, Request("toy", "sampling", prompt, {"temperature": 0.0}, max_new_tokens=20))
    eagle = run(store, Request("toy", "speculative", prompt, {"draft": "eagle", "temperature": 0.0,
                                                              "measure_baseline": False, **tree}, max_new_tokens=20))
    assert eagle.token_ids == plain.token_ids
    assert eagle.extra["speculative"]["rounds"] < len(eagle.tokens)  # some round kept a draft


@pytest.mark.parametrize("tree", [dict(eagle_depth=4, eagle_branching=2),
                                  dict(eagle_tree="dynamic", eagle_depth=4, eagle_branching=3, eagle_total_tokens=12)])
def test_greedy_eagle_with_the_shipped_head_is_greedy_smollm2(store, tree):
    assert "smollm2-135m" in available_heads()
    prompt = "Why do leaves change colour in autumn?"
    plain = run(store, Request("smollm2-135m", "sampling", prompt, {"temperature": 0.0}, max_new_tokens=24))
    eagle = run(store, Request("smollm2-135m", "speculative", prompt, {"draft": "eagle", "temperature": 0.0,
                                                                       "measure_baseline": False, **tree},
                               max_new_tokens=24))
    assert eagle.token_ids == plain.token_ids
    assert eagle.extra["speculative"]["rounds"] < len(eagle.tokens)  # the trained head's drafts were kept


def test_the_cache_keeps_exactly_the_accepted_path(store):
    lm = store.get("toy")
    chain = build_chain(ChainParams(temperature=1.5))
    decoder = EagleDecoder(lm, chain, False, "static", 3, 2, 0, torch.Generator().manual_seed(0),
                           torch.Generator().manual_seed(1), lm.encode("1 2"), lambda: 0.0)
    with torch.inference_mode():
        decoder.prefill()
    for _ in range(4):
        with torch.inference_mode():
            decoder.step()
        assert decoder.cache.get_seq_length() == len(decoder.ids) - 1 == decoder.features.shape[0]
    cached = lm.forward(torch.tensor([decoder.ids[-1:]]), decoder.cache, hidden=True)
    fresh = lm.forward(torch.tensor([decoder.ids]), hidden=True)
    torch.testing.assert_close(cached.logits[0, -1], fresh.logits[0, -1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(decoder.features, fresh.hidden_states[-1][0, :-1], atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def tree_runs(store) -> list[tuple[tuple[int, ...], int]]:
    """(continuation, rejected drafts) of each run: a static tree of two children over two levels."""
    params = {"draft": "eagle", "eagle_depth": 2, "eagle_branching": 2, "measure_baseline": False, **CHAIN}
    out = []
    for seed in range(N):
        trace = run(store, Request("toy", "speculative", PROMPT, params, seed=seed, max_new_tokens=LENGTH, top_n=1))
        out.append((tuple(trace.token_ids), sum(n["fate"] == "rejected" for r in trace.rounds for n in r["tree"])))
    return out


def test_tree_sampling_is_lossless(store, tree_runs):
    lm = store.get("toy")
    p_value, impossible = chi_square([t for t, _ in tree_runs], exact(lm, lm.encode(PROMPT), ChainParams(**CHAIN)))
    assert impossible == 0
    assert p_value > P_VALUE, f"chi-square p = {p_value:.3g}"


@pytest.mark.parametrize("dropped", ["repetition_penalty", "top_p"])
def test_the_tree_sample_size_is_decisive(store, tree_runs, dropped):
    lm = store.get("toy")
    without = ChainParams(**{k: v for k, v in CHAIN.items() if k != dropped})
    p_value, impossible = chi_square([t for t, _ in tree_runs], exact(lm, lm.encode(PROMPT), without))
    assert p_value < 1e-6 or impossible > 0, (dropped, p_value, impossible)


def test_siblings_were_rejected_often(tree_runs):
    """Rejections (and the residuals they leave) happen in more than one run in twenty, else the
    chi-square would say little about the recursive rejection over siblings."""
    assert sum(rejected for _, rejected in tree_runs) > N // 20


@pytest.mark.parametrize("key", available_heads())
def test_shipped_head_keeps_its_held_out_tau(store, key):
    record = json.loads((head_dir(key) / "head.json").read_text())["held_out"]
    tau = held_out_tau(store, key, record["prompts"], record["max_new_tokens"], eagle_depth=4, eagle_branching=2)
    assert tau == pytest.approx(record["tau"], abs=1e-3)


@pytest.mark.parametrize("model,params,message", [
    ("toy-small", {}, "needs a trained head for toy-small"),
    ("toy", {"eagle_tree": "dynamic", "temperature": 1.0}, "needs temperature 0"),
])
def test_refusals(store, model, params, message):
    with pytest.raises(InvalidRequest, match=message):
        run(store, Request(model, "speculative", "1 2", {"draft": "eagle", **params}, max_new_tokens=4))
