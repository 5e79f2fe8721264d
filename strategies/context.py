"""What a decoder is handed: the model seam, the prompt, the budget, the seed."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from playground.trace import Trace


@dataclass
class DecodeContext:
    lm: Any  # playground.models.LM
    prompt: str
    prompt_ids: list[int]
    seed: int
    max_new_tokens: int
    top_n: int = 20  # candidates recorded per step (plus the chosen one)
    load_model: Callable[[str], Any] | None = None  # key -> LM, for drafts and amateurs
    extra: dict[str, Any] = field(default_factory=dict)

    def generator(self, offset: int = 0) -> torch.Generator:
        """A fresh generator seeded from the request (offset separates independent streams)."""
        g = torch.Generator(device=self.lm.device)
        g.manual_seed(self.seed + offset)
        return g

    def new_trace(self, strategy: str, params: dict[str, Any], chain: list[str] | None = None) -> Trace:
        return Trace(model=self.lm.key, strategy=strategy, params=params, seed=self.seed,
                     prompt=self.prompt, prompt_ids=list(self.prompt_ids), chain=chain or [])
