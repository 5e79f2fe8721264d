"""One pass over a flattened draft tree with the tree mask gives every node the logits of its own
root-to-node path, on GPT-2 (toy) and llama (SmolLM2); greedy tree decoding on SmolLM2 with an
untrained head (seeded) equals greedy SmolLM2 token for token, so mask, positions and the gathered
cache are right whatever the head proposes."""
from __future__ import annotations

import pytest
import torch

from playground.engine import Request, run
from strategies.sampling.chain import ChainParams, build_chain
from strategies.speculative.drafts import rollback_cache
from strategies.speculative.eagle.decoder import DraftTree, EagleDecoder
from strategies.speculative.eagle.head import EagleHead
from strategies.speculative.eagle.tree import attention_mask, path_to, position_ids

SEVEN = [-1, 0, 0, 1, 1, 3, 2]


@pytest.mark.parametrize("key", ["toy", "smollm2-135m"])
def test_tree_pass_equals_each_path(store, key):
    lm = store.get(key)
    prefix = lm.encode("once upon") if key == "toy" else lm.encode("Tell me about the moon.")
    g = torch.Generator().manual_seed(0)
    tokens = [prefix[-1]] + torch.randint(0, min(lm.vocab_size, 1000), (len(SEVEN) - 1,), generator=g).tolist()
    cache = rollback_cache(lm)
    cache = lm.forward(torch.tensor([prefix[:-1]]), cache).cache
    past = len(prefix) - 1
    tree = lm.forward(torch.tensor([tokens]), cache, attention_mask=attention_mask(SEVEN, past),
                      position_ids=position_ids(SEVEN, past)).logits[0]
    for node in range(len(SEVEN)):
        path = prefix[:-1] + [tokens[i] for i in path_to(SEVEN, node)]
        alone = lm.forward(torch.tensor([path])).logits[0, -1]
        torch.testing.assert_close(tree[node], alone, atol=2e-4, rtol=1e-4)


def test_greedy_tree_on_smollm2_is_greedy_smollm2(store):
    """The first round's tree hides the greedy continuation on the branch 0 -> 2 -> 6 of SEVEN among
    wrong tokens; the verifier must take that path, the cache keep exactly it, and the rest of the
    text (drafted by an untrained head) still be greedy SmolLM2's."""
    lm = store.get("smollm2-135m")
    prompt = "What is gravity?"
    plain = run(store, Request("smollm2-135m", "sampling", prompt, {"temperature": 0.0}, max_new_tokens=12))
    greedy_ids = plain.token_ids
    torch.manual_seed(0)
    decoder = EagleDecoder(lm, build_chain(ChainParams(temperature=0.0)), True, "static", 2, 3, 0,
                           torch.Generator().manual_seed(0), torch.Generator().manual_seed(1),
                           lm.encode(prompt) + greedy_ids[:1], lambda: 0.0, head=EagleHead(lm.model.config).eval())
    wrong = [t + 1 for t in greedy_ids[:4]]
    tokens = [greedy_ids[0], wrong[1], greedy_ids[1], wrong[2], wrong[3], wrong[0], greedy_ids[2]]
    planted = DraftTree(SEVEN, tokens, torch.full((7, lm.vocab_size), 1.0 / lm.vocab_size), [1.0] * 7)
    with torch.inference_mode():
        decoder.prefill()
        drafting = decoder.draft
        decoder.draft = lambda: planted
        first = decoder.step()
        decoder.draft = drafting
        assert first.verdict.path == [2, 6] and first.committed == greedy_ids[1:4]
        assert decoder.cache.get_seq_length() == len(decoder.ids) - 1
        while len(decoder.ids) - len(plain.prompt_ids) < 12:
            decoder.step()
    assert decoder.ids[len(plain.prompt_ids):][:12] == greedy_ids
