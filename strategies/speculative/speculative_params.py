"""Speculative decoding's parameters (``SpeculativeParams``): the sampling chain's knobs, the draft and the
verifier. Their own file, below the decoder (speculative.py) and its rounds' records (rounds.py), which both
read them."""
from __future__ import annotations

from dataclasses import dataclass

from playground.errors import InvalidRequest
from strategies.loops import LoopParams
from strategies.params import param
from strategies.phases import PhaseParams
from strategies.sampling.chain import ChainParams
from strategies.speculative.drafts import KINDS
from strategies.speculative.eagle.auto_tree import parse_tree

MAX_GAMMA = 16

@dataclass(frozen=True)
class SpeculativeParams(PhaseParams, LoopParams, ChainParams):
    """The sampling chain's knobs (temperature 0 = greedy) plus the draft and the verifier; loops are looked
    for on the text the rounds committed; phases (strategies/phases.py) verify each round under its phase's
    chain, and a thinking budget counts committed tokens, never drafts."""

    draft: str = param("early_exit", "Who proposes: 'early_exit' (the target's own first layers), "
                       "'prompt_lookup' (copy from the prompt, no model), 'eagle' (the model's trained EAGLE "
                       "head drafting a tree), or a model key with the target's tokenizer (e.g. toy-small for toy).", brief="Who proposes the tokens: early exit, prompt lookup, EAGLE, or a smaller model.")
    draft_layer: int = param(-1, "Early-exit draft: the target's layer it reads through the final norm and LM "
                             "head, i.e. how many layers it runs (as amateur_layer in contrastive decoding). "
                             "-1 = a quarter of the target's layers.", low=-1, high=256, step=1, ui_max=32,
                             when={"draft": ("early_exit",)}, brief="Early-exit draft: how many of the target's layers it runs (-1: a quarter).")
    gamma: int = param(4, "Tokens drafted per round.", low=1, high=MAX_GAMMA, step=1)
    adaptive_gamma: bool = param(False, "Grow gamma by 2 after a fully accepted round, shrink it by 1 after a "
                                 "rejection (transformers' heuristic). Off = fixed gamma.", noop=False, brief="Grow gamma after a fully accepted round, shrink it after a rejection.")
    verify: str = param("rejection", "rejection: lossless (Leviathan et al. 2022). topk: accept while the draft "
                        "is in the target model's own top-K, as in the course notes (lossy); the replacement "
                        "token is drawn from the target's processed distribution.",
                        choices=("rejection", "topk"), brief="How drafts are checked: rejection (lossless) or topk (lossy).")
    verify_top_k: int = param(5, "K of topk verification, taken on the target model's own distribution before the "
                              "chain: temperature keeps the order, so it never changes the top K (T = 0 "
                              "included); the repetition penalty and top-k / top-p / min-p do not apply to it.",
                              low=1, high=1000, step=1, ui_max=50, when={"verify": ("topk",)}, brief="topk verification: accept a draft while it is in the target's own top K.")
    lookup_ngram: int = param(3, "Longest n-gram prompt lookup matches.", low=1, high=8, step=1,
                              when={"draft": ("prompt_lookup",)})
    eagle_tree: str = param("static", "EAGLE draft tree: static (every node gets eagle_branching children, to "
                            "eagle_depth; branching 1 is a chain), dynamic (EAGLE-2: expand the most probable "
                            "nodes, keep the best eagle_total_tokens; temperature 0 only), or auto (the static "
                            "tree whose depth and branching give the most tokens per second by this machine's "
                            "measured pass costs and the head's measured acceptance by depth; eagle_depth and "
                            "eagle_branching are then chosen, not read).",
                            choices=("static", "dynamic", "auto"), brief="How EAGLE's draft tree is shaped.",
                            when={"draft": ("eagle",)})
    eagle_auto_tree: str = param("", "The tree eagle_tree 'auto' takes, depth x branching such as 4x2: empty, auto "
                                 "measures the pass costs and chooses, and the run's trace records its choice "
                                 "here, so a link or a request that carries it replays the same tree without "
                                 "measuring. Read only when eagle_tree is auto.", noop="", filled=True,
                                 when={"draft": ("eagle",), "eagle_tree": ("auto",)}, brief="The depth x branching auto chose, such as 4x2 (empty: measure and choose).")
    eagle_depth: int = param(4, "Levels of the EAGLE draft tree (tokens on its longest path).", low=1, high=8, step=1,
                            when={"draft": ("eagle",), "eagle_tree": ("static", "dynamic")})
    eagle_branching: int = param(2, "Children per expanded node of the EAGLE tree (nodes expanded per level when "
                                 "dynamic).", low=1, high=8, step=1,
                                 when={"draft": ("eagle",), "eagle_tree": ("static", "dynamic")})
    eagle_total_tokens: int = param(16, "Drafts a dynamic EAGLE tree keeps.", low=1, high=64, step=1,
                                    when={"draft": ("eagle",), "eagle_tree": ("dynamic",)})
    eagle_vocab: int = param(0, "EAGLE draft vocabulary: the head's LM-head reading covers only the N most "
                             "frequent tokens of its training data (its stored map; FR-Spec). 0 = as the head "
                             "ships; -1 = the whole vocabulary. Verification is unchanged: only drafts outside "
                             "the N become impossible.", low=-1, high=262144, step=1, ui_max=49152,
                             when={"draft": ("eagle",)}, brief="EAGLE's draft vocabulary: the N most frequent tokens (0: as shipped; -1: all).")
    measure_baseline: bool = param(True, "Also time plain target decoding of the same tokens after the run, off its "
                                   "clock and its time budget.")

    def validate(self) -> None:
        super().validate()
        name = self.draft.strip()
        if not name or any(c.isspace() for c in name):
            raise InvalidRequest(f"draft must be {', '.join(KINDS)} or a model key sharing the target's "
                                 f"tokenizer, got {self.draft!r}")
        object.__setattr__(self, "draft", name)
        if self.eagle_auto_tree.strip():
            parse_tree(self.eagle_auto_tree)
        object.__setattr__(self, "eagle_auto_tree", self.eagle_auto_tree.strip().lower())
