"""Forced tokens: a branch takes a given token at a given step instead of the strategy's choice.

``DecodeContext.forced`` maps a step (0 = the first generated token) to a token id. The loops of
the sampling family and of contrastive decoding ask ``choose`` for every step's token.

The seed-stream rule: a forced step draws nothing from the run's generator. The strategy's own
choice at that step is still computed, for the trace, from a copy of the generator's state, which
is then put back. So forcing the whole prefix of steps ``0 .. f`` gives, from step ``f + 1`` on,
exactly the run whose prompt already holds those ``f + 1`` tokens, with the same seed: both start
drawing from the fresh generator at the same text. (Forcing only step ``f`` keeps steps ``0 .. f - 1``
as the unforced run wrote them, and its step ``f + 1`` takes the draw the unforced run used at ``f``.)

The stages of the chain keep the rule: XTC's coin, drawn inside the chain before the token is
chosen, is taken back at a forced step, and the stateful stages (mirostat's mu, adaptive-p's running
average) do not learn from a forced token, since a prompt holding it would not have taught them
(strategies.sampling.chain.accept_chosen). With them on, forcing a prefix is still the run whose prompt
holds it.

A forced step records ``forced: true``, ``strategy_choice`` (the id the strategy would have
taken, on the same distribution) and its text; the token's log-probability is the forced token's
under the chained distribution (-inf, written as null, when the chain had cut it).

A strategy takes forced tokens when its registration says so (``forceable``: its steps commit one token
each). Beam search and speculative decoding do not: a beam step commits k hypotheses at once and a
speculative round commits several tokens from one verification, so there is no single choice to
replace. Their answer to "what if" is a prompt that already holds the prefix.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.registry import all_strategies, get_strategy


def forceable_families() -> tuple[str, ...]:
    """The families whose strategies take forced tokens (``StrategySpec.forceable``), in FAMILY_ORDER."""
    return tuple(dict.fromkeys(s.family for s in all_strategies() if s.forceable))


def __getattr__(name: str) -> Any:
    """``FORCEABLE_FAMILIES``, read off the registry when asked (it fills as the strategy modules load)."""
    if name == "FORCEABLE_FAMILIES":
        return forceable_families()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

Select = Callable[[], tuple[torch.Tensor, torch.Tensor | None]]


def choose(forced: dict[int, int], step: int, select: Select, generator: torch.Generator | None
           ) -> tuple[int, torch.Tensor | None, dict[str, Any]]:
    """The token of ``step``: the selector's pick, or the forced id. Returns (id, noise, step extra).

    ``select`` runs the selector ([1] ids, [1, vocab] noise or None); ``generator`` is the one it
    draws from (None for greedy). At a forced step the generator's state is restored afterwards.
    """
    token = forced.get(step)
    if token is None:
        chosen, noise = select()
        return int(chosen[0]), noise, {}
    saved = generator.get_state() if generator is not None else None
    would, _ = select()
    if generator is not None and saved is not None:
        generator.set_state(saved)
    return int(token), None, {"forced": True, "strategy_choice": int(would[0])}


def annotate(step: Any, extra: dict[str, Any], lm: LanguageModel) -> None:
    """Write a forced step's record (``choose``'s extra) onto a trace Step."""
    if extra:
        step.extra.update(extra, strategy_choice_text=lm.piece(extra["strategy_choice"]))


def resolve_token(lm: LanguageModel, token: int | str) -> int:
    """A forced token as given by a person: an id (an int, or a string of digits), or a piece of text
    the tokenizer maps to exactly one token (``"the"`` on toy is `` the``, id 9)."""
    vocab = lm.vocab_size
    if isinstance(token, bool):
        raise InvalidRequest(f"a forced token must be a token id or text, got {token!r}")
    if isinstance(token, int) or (isinstance(token, str) and token.strip().isdigit()):
        token_id = int(token)
        if not 0 <= token_id < vocab:
            raise InvalidRequest(f"forced token ids must be in [0, {vocab - 1}], got {token_id}")
        return token_id
    if not isinstance(token, str) or not token:
        raise InvalidRequest(f"a forced token must be a token id or text, got {token!r}")
    ids = lm.tokenizer(token, add_special_tokens=False)["input_ids"]
    unk = lm.tokenizer.unk_token_id
    if unk is not None and unk in ids:
        raise InvalidRequest(f"a forced token's text must be in the vocabulary of {lm.key}, got {token!r}")
    if len(ids) != 1:
        raise InvalidRequest(f"a forced token's text must map to exactly one token of {lm.key}, got {token!r} "
                             f"({len(ids)} tokens: {[lm.piece(i) for i in ids]})")
    return int(ids[0])


FORCE_REFUSAL = "--force must be STEP:TOKEN (e.g. 0:the or 0:9), got {item!r}"
PATH_REFUSAL = ("forced tokens must be written step:token (e.g. 0:9 or 0:the), separated by commas, "
                "got {item!r}")


def parse_step_tokens(items: Iterable[str], refusal: str, digit_steps: bool = False) -> list[tuple[str, str]]:
    """The one parser of the ``step:token`` notation: each item split at its first colon into (step,
    token), the step stripped and the token kept whole (its text may hold colons or spaces). An item
    without a colon or without a token, or, with ``digit_steps``, whose step is not digits, is
    refused with ``refusal`` naming it."""
    out: list[tuple[str, str]] = []
    for item in items:
        step, sep, token = item.partition(":")
        if not sep or not token or (digit_steps and not step.strip().isdigit()):
            raise InvalidRequest(refusal.format(item=item))
        out.append((step.strip(), token))
    return out


def parse_force(items: list[str]) -> dict[str, str]:
    """``STEP:TOKEN`` strings (the CLI's ``--force``) -> step -> token; ``resolve_forced`` checks the steps."""
    return dict(parse_step_tokens(items, FORCE_REFUSAL))


def parse_path(text: Any) -> dict[int, int | str]:
    """A forced path as the page and a share link write it, ``"0:9,3:the"`` -> {0: 9, 3: "the"} (ids as
    ints; a token's text is kept for the model to map)."""
    if text is None:
        return {}
    if not isinstance(text, str):
        raise InvalidRequest(f"forced tokens must be written step:token, separated by commas, got {text!r}")
    items = [item for item in (part.strip() for part in text.split(",")) if item]
    return {int(step): int(token) if token.strip().isdigit() else token
            for step, token in parse_step_tokens(items, PATH_REFUSAL, digit_steps=True)}


def resolve_forced(lm: LanguageModel, forced: Mapping[Any, int | str], max_new_tokens: int, family: str,
                   strategy: str) -> dict[int, int]:
    """Check a request's forced tokens (step -> id or text) and return step -> id."""
    if not forced:
        return {}
    if not isinstance(forced, dict):
        raise InvalidRequest(f"forced tokens must be a mapping of step to token, got {type(forced).__name__}")
    if not get_strategy(strategy).forceable:
        names = [s.name for s in all_strategies() if s.forceable]
        raise InvalidRequest(f"forced tokens work with {', '.join(names[:-1])} and {names[-1]}, not {strategy}: "
                             f"a {family} step commits several tokens at once, so there is no single choice to "
                             f"replace; put the prefix in the prompt instead")
    out: dict[int, int] = {}
    for step, token in forced.items():
        try:
            index = int(step)
        except (TypeError, ValueError):
            index = -1
        if isinstance(step, bool) or not 0 <= index < max_new_tokens or str(step).strip() != str(index):
            raise InvalidRequest(f"forced steps must be integers in [0, {max_new_tokens - 1}], got {step!r}")
        out[index] = resolve_token(lm, token)
    return out
