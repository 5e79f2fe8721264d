"""The model seam as types (part of the contract): what strategies call on a loaded model
(``LanguageModel``, which ``playground.models.LM`` is) and what its forward returns (``ModelOutput``).

Strategies see ``playground`` only through the contract, and the models room imports no strategies,
so the seam is declared here, where both read it; mypy checks ``LM`` against it wherever the engine
hands an ``LM`` to a strategy."""
from __future__ import annotations

from typing import Any, Callable, Protocol

import torch


class ModelOutput(Protocol):
    """One forward pass (``playground.models.Forward``)."""

    @property
    def logits(self) -> torch.Tensor:
        """[batch, n, vocab], float32."""
        ...

    @property
    def cache(self) -> Any:
        """A transformers Cache or the lean forward's: crop(-n), reorder_cache(rows), get_seq_length()."""
        ...

    @property
    def hidden_states(self) -> tuple[torch.Tensor, ...] | None:
        """Embeddings + one per layer, when asked for."""
        ...


class LanguageModel(Protocol):
    """A loaded causal LM with its tokenizer, as strategies use it."""

    @property
    def key(self) -> str: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def model(self) -> Any:
        """The transformers model (its dtype, config, embeddings)."""
        ...

    @property
    def tokenizer(self) -> Any: ...

    @property
    def attached(self) -> dict[Any, Any]:
        """What a strategy keeps with this copy of the model, under a key of its own."""
        ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def num_layers(self) -> int: ...

    @property
    def max_context(self) -> int: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    def piece(self, token_id: int) -> str:
        """Display text of one token, with its leading space."""
        ...

    def decode(self, ids: list[int]) -> str: ...

    def check_prompt_length(self, n_prompt: int, max_new_tokens: int) -> None: ...

    def forward(self, input_ids: torch.Tensor, cache: Any = None, hidden: bool = False,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                last: bool = False) -> ModelOutput:
        """Feed ``input_ids`` [batch, n] after what ``cache`` holds (None: a fresh one); ``last``: the last
        row's logits alone (a prefill)."""
        ...

    def new_cache(self) -> Any: ...

    def measured_once(self, name: str, measure: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """``measure()`` for these weights on this machine, made once and kept; (it, measured just now)."""
        ...

    def is_measured(self, name: str) -> bool:
        """Whether ``measured_once(name, ...)`` would read what was kept rather than measure now."""
        ...

    def decoder_parts(self) -> tuple[Any, str, Any]:
        """(the base model, the name of its layer list, its final norm)."""
        ...

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head on an intermediate hidden state -> float32 logits."""
        ...

    def layer_logits(self, states: tuple[torch.Tensor, ...], row: int = 0, position: int = -1,
                     last: torch.Tensor | None = None) -> torch.Tensor:
        """The logit lens: each of a forward's hidden states at one position read as the model reads its
        last one -> float32 logits [len(states), vocab]; ``last``: the forward's own logits, its last row."""
        ...

    def truncated(self, num_layers: int) -> LanguageModel:
        """The first ``num_layers`` layers + final norm + LM head as a model of its own."""
        ...
