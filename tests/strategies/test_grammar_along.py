"""``Grammar.along``, the masks a speculative draft meets as it walks the grammar, leaves the row's
matcher exactly where it was: the same mask, the same answers to every next token, the same
whole / stopped / error state. Random drafts over random grammars on toy's vocabulary (seeded), and
the drafts that once broke it: a draft that completes the grammar and then proposes the end of text,
and one that walks into a dead end."""
from __future__ import annotations

import json
import random

import llguidance.torch as llt
import pytest

from strategies.sampling.grammar import Grammar, GrammarSpec, allowed_mask, compile_grammar

WORDS = [" once", " upon", " a", " time", " there", " lived", " happily", " ever", " the", " hill", " rose",
         " high"]
STORY = {"kind": "choices", "text": json.dumps([" a time", " the hill rose", " a", " once upon a time there lived",
                                                " a time there lived happily ever"])}
CASES = 300


def random_grammar(rng: random.Random) -> GrammarSpec:
    """Choices of one to five words each, or a regex of word alternatives, some of them repeated."""
    if rng.random() < 0.5:
        texts = {"".join(rng.choices(WORDS, k=rng.randint(1, 5))) for _ in range(rng.randint(1, 5))}
        return GrammarSpec("choices", json.dumps(sorted(texts)))
    groups = []
    for _ in range(rng.randint(1, 4)):
        words = "|".join(sorted(set(rng.choices(WORDS, k=rng.randint(1, 3)))))
        groups.append(f"({words}){rng.choice(['', '', '+', '?'])}")
    return GrammarSpec("regex", "".join(groups))


def walk(stage: Grammar, rng: random.Random, steps: int, vocab: int) -> list[int]:
    """Up to ``steps`` tokens the grammar allows, drawn at random (ends where the text ends)."""
    out: list[int] = []
    matcher = stage.matchers[0].deep_copy()
    for _ in range(steps):
        allowed = [t for t in range(vocab) if mask_of(matcher, vocab)[t]]
        if not allowed or matcher.is_stopped():
            break
        token = rng.choice(allowed)
        out.append(token)
        if not matcher.consume_token(token):
            break
    return out


def mask_of(matcher, vocab: int) -> list[bool]:
    return allowed_mask([matcher], vocab, llt)[0].tolist()


def state(matcher, vocab: int) -> tuple:
    """What the matcher would do next: its flags, its mask and each token's answer, all read on copies
    (asking llguidance for a mask where no token can go on puts that matcher in its error state)."""
    flags = matcher.is_accepting(), matcher.is_stopped(), matcher.is_error()
    answers = tuple(matcher.deep_copy().consume_token(t) for t in range(vocab))
    return flags, answers, tuple(mask_of(matcher.deep_copy(), vocab))


def random_draft(stage: Grammar, rng: random.Random, vocab: int, eos: int) -> list[int]:
    """A draft as a model without the grammar writes one: allowed words, then perhaps the end of
    text or any token at all."""
    draft = walk(stage, rng, rng.randint(0, 4), vocab)
    for _ in range(rng.randint(0, 2)):
        draft.append(eos if rng.random() < 0.3 else rng.randrange(vocab))
    return draft


def check_along(stage: Grammar, draft: list[int], vocab: int) -> None:
    before = state(stage.matchers[0], vocab)
    masks, whole = stage.along(draft, vocab)
    assert state(stage.matchers[0], vocab) == before, draft
    # and each mask is the one a fresh matcher has after the same text
    replay = stage.matchers[0].deep_copy()
    for i in range(masks.shape[0]):
        assert masks[i].tolist() == mask_of(replay, vocab), (draft, i)
        assert whole[i] == replay.is_accepting()
        if i < len(draft) and not replay.consume_token(draft[i]):
            break


@pytest.mark.parametrize("seed", range(3))
def test_along_then_rollback_leaves_the_matcher_as_it_was(toy, seed):
    rng = random.Random(seed)
    vocab, eos = toy.vocab_size, min(toy.eos_ids)
    for _ in range(CASES // 3):
        compiled = compile_grammar(random_grammar(rng), toy)
        stage = Grammar(compiled)
        for token in walk(stage, rng, rng.randint(0, 3), vocab):
            stage.advance([0], [token])
        draft = random_draft(stage, rng, vocab, eos)
        check_along(stage, draft, vocab)
        allowed = [t for t, ok in enumerate(mask_of(stage.matchers[0], vocab)) if ok]
        if allowed:  # the row's own matcher takes any allowed token next
            stage.advance([0], [rng.choice(allowed)])


@pytest.mark.parametrize("prefix, draft", [
    (" a time there lived", [" happily", " ever", "<eos>"]),  # completes the grammar, then ends the text
    (" once upon a time", [" the", " ever"]),  # " the" begins " there", but no word spells its "re"
    ("", [" the", " ever"]),  # a word the grammar forbids after " the"
    (" once upon a time there", [" lived", "<eos>"]),
    (" a", [" time", "<eos>", " there"]),
])
def test_drafts_that_end_or_leave_the_grammar_leave_the_matcher_as_it_was(toy, prefix, draft):
    ids = {toy.piece(i): i for i in range(toy.vocab_size)} | {"<eos>": min(toy.eos_ids)}
    stage = Grammar(compile_grammar(GrammarSpec.from_dict(STORY), toy))
    for word in prefix.split(" ")[1:]:
        stage.advance([0], [ids[" " + word]])
    check_along(stage, [ids[w] for w in draft], toy.vocab_size)
    allowed = [t for t, ok in enumerate(mask_of(stage.matchers[0], toy.vocab_size)) if ok]
    for token in allowed:  # every token allowed before the draft is still taken
        fork = Grammar(stage.compiled)
        fork.matchers = [stage.matchers[0].deep_copy()]
        fork.advance([0], [token])
