"""On SmolLM2 the grammar's mask is its feasible set and the recorded Z_t that set's mass.

The reference is a brute force over the 49,152 tokens' own bytes (GPT-2's byte-level alphabet read
back to bytes): a token is allowed after a text when the text plus the token's bytes is still the
beginning of a valid text (choices: a byte prefix of one of them; a regex: the ``regex`` package's
partial match, the package transformers itself needs), and the end of text when the text is whole.
That includes the steps where a single way on is left (" definitely" after ``yes,``, ``om`` at the end
of an email), where a forcing matcher allows only the token that starts the canonical spelling."""
from __future__ import annotations

import random

import llguidance.torch as llt
import pytest
import regex
import torch

from playground.engine import Request, run
from strategies.sampling.grammar import MASK_MEANING, GrammarSpec, allowed_mask, compile_grammar

SMOL = "smollm2-135m"
CHOICES = ["yes, definitely", "yes", "no"]
UNICODE = ["Zürich", "Zug", "Zoë"]
EMAIL = r"[a-z]{1,8}@example\.(com|org)"
GRAMMARS = {
    "choices": (GrammarSpec("choices", " | ".join(CHOICES)),
                lambda t: any(c.encode().startswith(t) for c in CHOICES), lambda t: t in {c.encode() for c in CHOICES}),
    "unicode": (GrammarSpec("choices", " | ".join(UNICODE)),
                lambda t: any(c.encode().startswith(t) for c in UNICODE), lambda t: t in {c.encode() for c in UNICODE}),
    # latin-1 reads each byte as one character: a byte outside ASCII matches none of the ASCII classes
    "email": (GrammarSpec("regex", EMAIL), lambda t: regex.fullmatch(EMAIL, t.decode("latin-1"), partial=True) is not None,
              lambda t: regex.fullmatch(EMAIL, t.decode("latin-1")) is not None),
}


def byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet: each byte's character in a token's text, read backwards."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


@pytest.fixture(scope="module")
def vocab_bytes(smollm) -> list[bytes | None]:
    """Each token's bytes (None for the special tokens, which spell no text)."""
    alphabet, special = byte_alphabet(), set(smollm.tokenizer.all_special_ids)
    return [None if i in special else bytes(alphabet[c] for c in smollm.tokenizer.convert_ids_to_tokens(i))
            for i in range(smollm.vocab_size)]


def brute_force(viable, whole, text: bytes, vocab_bytes: list[bytes | None], eos: frozenset[int]) -> set[int]:
    allowed = {i for i, b in enumerate(vocab_bytes) if b and viable(text + b)}
    return allowed | set(eos) if whole(text) else allowed


def test_the_byte_alphabet_reads_tokens_as_the_tokenizer_decodes_them(smollm, vocab_bytes):
    for i in (216, 287, 7170, 18736, 9048, 28, 10407):
        assert vocab_bytes[i].decode() == smollm.tokenizer.decode([i])


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_the_mask_is_the_brute_force_feasible_set_on_random_spellings(smollm, vocab_bytes, name):
    """Random walks through the feasible set (seeded), most of them spelled as no tokenizer would: at
    every step the matcher's mask over the whole vocabulary is the brute force's set."""
    spec, viable, whole = GRAMMARS[name]
    compiled = compile_grammar(spec, smollm)
    rng = random.Random(name)
    widest = 0
    for _ in range(3):
        matcher, text = compiled.matcher(), b""
        while not matcher.is_stopped():
            expected = brute_force(viable, whole, text, vocab_bytes, smollm.eos_ids)
            mask = allowed_mask([matcher], smollm.vocab_size, llt)[0]
            assert set(mask.nonzero().flatten().tolist()) == expected, (name, text)
            words = sorted(expected - smollm.eos_ids)
            if not words or (whole(text) and rng.random() < 0.3):
                break
            token = rng.choice(words)
            assert matcher.consume_token(token)
            text += vocab_bytes[token]
            widest = max(widest, len(words))
    assert widest >= 3


def _steps(trace):
    for i, step in enumerate(trace.to_dict()["steps"]):
        yield i, next(s for s in step["stages"] if s["name"] == "grammar")["decision"], step


@pytest.mark.parametrize("name, prompt, forced", [
    ("choices", "Is the sky blue on a clear day?", {0: "yes", 1: ","}),
    ("email", "Write an email address for Ada at example dot com.", {}),
    ("unicode", "Name a Swiss city that starts with Z.", {}),
])
def test_the_record_is_the_feasible_set_and_z_its_mass(store, smollm, vocab_bytes, name, prompt, forced):
    """Greedy runs: every step records ``mask`` "feasible", the allowed count of the brute force, the
    candidates it allows, and Z_t, the model's mass on that set (a fresh forward over the whole text)."""
    spec, viable, whole = GRAMMARS[name]
    trace = run(store, Request(SMOL, "greedy", prompt, max_new_tokens=16, grammar=spec.to_dict(), forced=forced))
    ids = list(trace.prompt_ids) + trace.token_ids
    probs = smollm.forward(torch.tensor([ids])).logits[0].softmax(-1)
    text, counts = b"", []
    for i, decision, step in _steps(trace):
        expected = brute_force(viable, whole, text, vocab_bytes, smollm.eos_ids)
        assert decision["mask"] == MASK_MEANING == "feasible"
        assert decision["allowed_count"] == len(expected), (name, text, decision["allowed_count"])
        candidates = [c["id"] for c in step["candidates"]]
        assert set(decision["allowed"]) == expected & set(candidates)
        z = float(probs[len(trace.prompt_ids) - 1 + i, sorted(expected)].sum())
        assert decision["z"] == pytest.approx(z, rel=1e-3, abs=1e-5), (name, i, decision["z"], z)
        counts.append(len(expected))
        token = trace.token_ids[i]
        text += vocab_bytes[token] if token not in smollm.eos_ids else b""
    assert whole(text), text
    if name == "choices":  # after "yes," every token that starts " definitely" is allowed, not one
        assert text == b"yes, definitely" and counts[2] >= 8
