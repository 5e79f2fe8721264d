"""EAGLE drafting: the head drafts a tree on predicted features, the target verifies it in one pass.

One round (Li et al. 2024, EAGLE and EAGLE-2):

1. the head catches up on the committed text: for every position t it has not seen, it reads
   (embedding of x_{t+1}, the target's feature f_t); its last output is the predicted feature at
   the last committed token (the tree's root), whose LM-head reading drafts the root's children;
2. level by level, the head reads (embedding of a drafted token, its parent's predicted feature)
   for the nodes to expand, with a tree attention mask over its own cache, and drafts their
   children: the ``branching`` most probable tokens at temperature 0, tokens drawn without
   replacement from the draft's chained distribution otherwise (what lossless verification
   needs); a drafted end-of-text token gets no children. A static tree expands every node; a
   dynamic tree (EAGLE-2) expands the ``branching`` nodes of highest cumulative draft probability
   per level and keeps the ``total_tokens`` best drafts (temperature 0 only: keeping a draft for
   its own probability biases sampling);
3. the target runs once over [root, drafts] with ``draft_tree``'s mask and positions, the chain
   turns each node's logits into its distribution, and ``tree_verify`` walks the tree (greedy, or
   recursive rejection sampling over siblings);
4. the target's KV cache keeps exactly the accepted path (crop the tree, gather the path's
   entries), its features at the accepted nodes become the head's next inputs, and the head's
   cache drops its drafts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.sampling.chain import ChainRecord, apply_chain, record_chain
from strategies.speculative.drafts import crop, rollback_cache
from strategies.speculative.eagle import tree_verify
from strategies.speculative.eagle.head import HEADS, has_head, load_head
from strategies.speculative.eagle.tree import (
    ancestors_mask,
    attention_mask,
    depths,
    path_to,
    position_ids,
    select_best,
    subtree,
)
from strategies.speculative.eagle.tree_verify import TreeVerdict, draw_children


@dataclass
class DraftTree:
    """A drafted tree: parents, tokens (node 0 is the last committed token), and per node the draft
    distribution its children were drawn from ([N, V]) and its cumulative draft probability."""

    parents: list[int]
    tokens: list[int]
    draft_probs: torch.Tensor
    scores: list[float]
    head_passes: int = 0


@dataclass
class TreeRound:
    tree: DraftTree
    target_chain: list[ChainRecord]  # one record per node
    target_probs: torch.Tensor  # [N, V]
    verdict: TreeVerdict
    committed: list[int]  # accepted drafts, then the target's token
    draft_seconds: float
    verify_seconds: float


def keep_positions(cache: Any, keep: list[int]) -> None:
    """Keep only the cached positions ``keep`` (ascending) in every layer: the accepted path's entries."""
    if hasattr(cache, "keep"):  # the lean forward's cache (playground.models.fast.llama)
        cache.keep(keep)
        return
    for layer in cache.layers:
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        index = torch.tensor(keep, device=layer.keys.device)
        layer.keys = layer.keys.index_select(-2, index)
        layer.values = layer.values.index_select(-2, index)


def check_eagle(lm: LanguageModel, greedy_mode: bool, tree: str) -> None:
    if not has_head(lm.key):
        raise InvalidRequest(f"draft 'eagle' needs a trained head for {lm.key}; heads ship for: "
                             f"{', '.join(sorted(available_heads())) or 'none'}")
    if tree == "dynamic" and not greedy_mode:
        raise InvalidRequest("eagle_tree 'dynamic' needs temperature 0: its reranking keeps drafts for their own "
                             "probability, which would bias sampling; use eagle_tree 'static'")
    if any(getattr(lm.new_cache(), "is_sliding", [])):
        raise InvalidRequest(f"EAGLE tree verification needs a cache without sliding-window layers; {lm.key} has them")


def available_heads() -> list[str]:
    return [p.name for p in HEADS.iterdir() if (p / "head.safetensors").exists()] if HEADS.exists() else []


@dataclass
class EagleDecoder:
    """Target, head and their caches; ``step()`` runs one round and commits its tokens.

    ``ids`` is the prompt plus every committed token; the target's cache covers ``ids[:-1]`` and
    ``features[t]`` is its last hidden state at position t for those. The head's cache covers its
    real inputs at positions ``< head_seen``.
    """

    target: LanguageModel  # playground.models.LM
    chain: list
    greedy: bool
    tree_kind: str  # "static" or "dynamic"
    depth: int
    branching: int
    total_tokens: int
    draft_generator: torch.Generator
    verify_generator: torch.Generator
    ids: list[int]
    clock: Callable[[], float]
    target_passes: int = 0
    head_passes: int = 0
    features: torch.Tensor | None = None
    head_seen: int = 0
    cache: Any = None
    head_cache: Any = None
    head: Any = field(default=None, repr=False)
    vocab: int = 0  # eagle_vocab: 0 the head's own map (or none), -1 the whole vocabulary, N its first N
    draft_map: torch.Tensor | None = field(default=None, repr=False)  # draft index -> target id
    draft_weight: torch.Tensor | None = field(default=None, repr=False)  # the LM head's rows of draft_map
    _draft_bias: torch.Tensor | None = field(default=None, repr=False)

    def prefill(self) -> None:
        if self.head is None:  # the shipped head; a test may hand in another
            self.head, _ = load_head(self.target)
        self._draft_vocabulary()
        self.head_cache = self.head.new_cache()
        self.cache = rollback_cache(self.target)
        d = int(self.target.model.config.hidden_size)
        self.features = torch.zeros(0, d, device=self.target.device, dtype=self.target.model.dtype)
        if len(self.ids) > 1:
            out = self.target.forward(self._tensor(self.ids[:-1]), self.cache, hidden=True, last=True)
            self.cache, self.target_passes = out.cache, self.target_passes + 1
            assert out.hidden_states is not None  # asked for: hidden=True
            self.features = out.hidden_states[-1][0]

    def _draft_vocabulary(self) -> None:
        """The rows the draft's LM-head reading multiplies by (FR-Spec): the head's stored map, a prefix
        of it, or every row."""
        stored = getattr(self.head, "draft_ids", None)
        size = 0 if stored is None else int(stored.numel())
        if self.vocab == -1 or (self.vocab == 0 and stored is None):
            self.draft_map = self.draft_weight = None
            return
        if stored is None or not 1 <= self.vocab <= size and self.vocab != 0:
            allowed = "0 or -1 (it drafts from the whole vocabulary)" if stored is None else f"-1, 0 or 1..{size}"
            raise InvalidRequest(f"eagle_vocab for the {self.target.key} head must be {allowed}, got {self.vocab}")
        n = size if self.vocab == 0 else self.vocab
        key = ("eagle_draft_rows", n, id(self.head))
        cached = self.target.attached.get(key)
        if cached is None:
            ids = stored[:n].to(self.target.device)
            lm_head = self.target.model.get_output_embeddings()
            cached = (ids, lm_head.weight.index_select(0, ids).contiguous(),
                      None if getattr(lm_head, "bias", None) is None else lm_head.bias.index_select(0, ids))
            self.target.attached[key] = cached
        self.draft_map, self.draft_weight, self._draft_bias = cached

    @property
    def vocab_label(self) -> int | str:
        """The draft vocabulary's size, or 'full'."""
        return "full" if self.draft_map is None else int(self.draft_map.numel())

    def draft_logits(self, features: torch.Tensor) -> torch.Tensor:
        """[n, V] float32 logits the draft reads from predicted features [n, d], in one product (the
        LM head's rows are read once for all of them); -inf outside the draft vocabulary."""
        lm_head = self.target.model.get_output_embeddings()
        if self.draft_map is None:
            return lm_head(features).float()
        assert self.draft_weight is not None  # set with draft_map (_draft_vocabulary)
        small = torch.nn.functional.linear(features, self.draft_weight, self._draft_bias).float()
        logits = torch.full((features.shape[0], lm_head.weight.shape[0]), float("-inf"), device=small.device)
        logits[:, self.draft_map] = small
        return logits

    def _tensor(self, ids: list[int]) -> torch.Tensor:
        return torch.tensor([ids], device=self.target.device)

    # --- drafting ----------------------------------------------------------------------------

    def _head(self, tokens: list[int], feats: torch.Tensor, mask: torch.Tensor | None = None,
              positions: torch.Tensor | None = None) -> torch.Tensor:
        """Head pass over ``tokens`` with the features before them; predicted features [n, d]."""
        emb = self.target.model.get_input_embeddings()(self._tensor(tokens))
        dtype = self.target.model.dtype
        pred, self.head_cache = self.head(emb, feats.unsqueeze(0).to(dtype), self.head_cache,
                                          None if mask is None else mask.to(self.target.device, dtype),
                                          None if positions is None else positions.to(self.target.device))
        self.head_passes += 1
        return pred[0]

    def _draft_rows(self, features: torch.Tensor, texts: list[list[int]]) -> list[torch.Tensor]:
        """[V] per predicted feature [n, d]: the draft's distribution, the target's LM head then the
        chain on that node's text (at temperature 0 the raw softmax, whose order picks the top drafts)."""
        logits = self.draft_logits(features)
        if self.greedy:
            return list(logits.softmax(-1))
        return [apply_chain(self.chain, logits[i:i + 1], self._tensor(text)).softmax(-1)[0]
                for i, text in enumerate(texts)]

    def _children(self, row: torch.Tensor, k: int) -> list[int]:
        if self.greedy:
            return torch.topk(row, min(k, row.shape[-1])).indices.tolist()
        return draw_children(row, k, self.draft_generator)

    def draft(self) -> DraftTree:
        """Draft a tree from the root ``ids[-1]`` (see the module docstring, steps 1 and 2)."""
        passes = self.head_passes
        n = len(self.ids)
        root_row = torch.zeros(self.target.vocab_size, device=self.target.device)
        parents, tokens, rows, scores = [-1], [self.ids[-1]], [root_row], [1.0]
        if n < 2:  # nothing for the head to read yet: an empty tree, the target adds one token
            return DraftTree(parents, tokens, root_row.unsqueeze(0), scores)
        assert self.features is not None  # set by prefill
        pending = list(range(self.head_seen, n - 1))
        pred = self._head([self.ids[t + 1] for t in pending], self.features[pending])
        self.head_seen = n - 1
        predicted = {0: pred[-1]}  # node -> its predicted feature
        rows[0] = self._draft_rows(pred[-1:], [self.ids])[0]
        frontier = [0]
        fed: list[int] = []  # draft nodes in the head's cache, in the order fed
        for level in range(self.depth):
            new: list[int] = []
            for node in frontier:
                if node and tokens[node] in self.target.eos_ids:  # nothing after the end of text is drafted
                    continue
                for token in self._children(rows[node], self.branching):
                    parents.append(node)
                    tokens.append(token)
                    scores.append(scores[node] * float(rows[node][token]))
                    rows.append(torch.zeros_like(root_row))
                    new.append(len(parents) - 1)
            if self.tree_kind == "dynamic":
                new = sorted(new, key=lambda i: (-scores[i], i))[: self.branching]
            if level == self.depth - 1 or not new:
                break
            # Feed the nodes to expand: each sees the head's real cache and its own drafted ancestors.
            order = fed + new
            full = ancestors_mask(parents)
            sub = full[new][:, order]
            allowed = torch.cat([torch.ones(len(new), self.head_seen, dtype=torch.bool), sub], dim=1)
            mask = torch.zeros(allowed.shape)
            mask[~allowed] = torch.finfo(torch.float32).min
            dep = depths(parents)
            positions = torch.tensor([[self.head_seen - 1 + dep[i] for i in new]])
            pred = self._head([tokens[i] for i in new], torch.stack([predicted[parents[i]] for i in new]),
                              mask[None, None], positions)
            texts = [self.ids + [tokens[j] for j in path_to(parents, node)[1:]] for node in new]
            for i, (node, row) in enumerate(zip(new, self._draft_rows(pred, texts))):
                predicted[node] = pred[i]
                rows[node] = row
            fed, frontier = order, new
        crop(self.head_cache, len(fed))
        tree = DraftTree(parents, tokens, torch.stack(rows), scores, self.head_passes - passes)
        if self.tree_kind == "dynamic" and len(parents) - 1 > self.total_tokens:
            keep = select_best(parents, scores, self.total_tokens)
            tree = DraftTree(subtree(parents, keep), [tokens[i] for i in keep], tree.draft_probs[keep],
                             [scores[i] for i in keep], tree.head_passes)
        return tree

    # --- verification ------------------------------------------------------------------------

    def step(self) -> TreeRound:
        t0 = self.clock()
        tree = self.draft()
        t1 = self.clock()
        past = len(self.ids) - 1
        out = self.target.forward(self._tensor(tree.tokens), self.cache, hidden=True,
                                  attention_mask=attention_mask(tree.parents, past),
                                  position_ids=position_ids(tree.parents, past))
        self.cache, self.target_passes = out.cache, self.target_passes + 1
        records = []
        for i in range(len(tree.parents)):
            # Each node's context is the text plus its own path, so the penalty stage sees exactly that.
            context = self._tensor(self.ids + [tree.tokens[j] for j in path_to(tree.parents, i)[1:]])
            records.append(record_chain(self.chain, out.logits[:, i], context))
        target_probs = torch.cat([r.logits[-1] for r in records]).softmax(-1)
        if self.greedy:
            verdict = tree_verify.greedy(tree.parents, tree.tokens, target_probs, tree.draft_probs)
        else:
            verdict = tree_verify.sampling(tree.parents, tree.tokens, target_probs, tree.draft_probs,
                                           self.verify_generator)
        kept = [0] + verdict.path
        keep_positions(self.cache, list(range(past)) + [past + i for i in kept])
        assert out.hidden_states is not None  # asked for: hidden=True
        assert self.features is not None  # set by prefill
        self.features = torch.cat([self.features, out.hidden_states[-1][0, kept]])
        committed = [tree.tokens[i] for i in verdict.path] + [verdict.next_id]
        self.ids = self.ids + committed
        t2 = self.clock()
        return TreeRound(tree, records, target_probs, verdict, committed, t1 - t0, t2 - t1)
