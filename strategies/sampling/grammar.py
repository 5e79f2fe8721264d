"""Structured decoding: a grammar as one stage of the chain, with llguidance as the matcher.

A grammar is given in one of four forms (``GRAMMAR_KINDS``):

- ``json``: a JSON schema (``{"type": "object", "properties": {...}}``), its whitespace bounded
  (``JSON_WHITESPACE``: one space, or a line break and at most 16 spaces or tabs, where JSON allows
  whitespace) unless the schema's own ``x-guidance`` sets it;
- ``regex``: a regular expression the whole generated text must match (Rust ``regex`` syntax, with
  ``\\d`` meaning the ASCII digits 0-9, not every Unicode digit: ``lark_regex``);
- ``choices``: a JSON list of strings, or the strings separated by ``|``; the text is one of them;
- ``lark``: a Lark grammar in llguidance's dialect (``start: ...``).

At every step the ``grammar`` stage asks the matcher which tokens can continue a valid text and
gives every other token a logit of -inf; the rest of the chain then sees the model's distribution
renormalised over the allowed tokens. Its decision per step:

- ``allowed`` [batch, vocab] bool: the mask (recorded as the candidate ids it allows);
- ``allowed_count`` [batch]: how many tokens of the vocabulary it allows;
- ``z`` [batch]: the feasible mass Z_t, the probability the stage's input gave the allowed tokens
  (1: the grammar asks nothing of the model here; near 0: the grammar fights the model);
- ``forced`` [batch]: exactly one token is allowed, so the grammar chose it, not the model;
- ``complete`` [batch]: the text so far is already a whole valid text (end of text is allowed);
- ``dead`` [batch]: no token can continue the text and it is not whole (a vocabulary that cannot
  spell what the grammar asks); the loop ends the run there ("grammar: no token allowed");
- ``mask``: what the mask is, ``"feasible"`` (``MASK_MEANING``): every token whose bytes continue
  the text toward a valid whole text, however the text is split into tokens, so ``z`` is the
  grammar's feasible mass.

The mask allows a token whose bytes begin a valid continuation, even where the vocabulary has no
token to finish it (the toy models' `` the`` under ``( there)+``): the next step then allows nothing
but the end of text, and such a row is ``dead``.

llguidance's forcing is off. Where the grammar leaves one way to go on (" definitely" after
``yes,`` under ``yes, definitely | yes | no``) a forcing matcher allows only the token that starts
the canonical spelling of those bytes, and drops the other tokens that spell a valid continuation
(`` d``, `` def``, `` defin``, ...). With it off the mask is the grammar's whole feasible set, the
token is drawn from the model renormalised over that set, and Z_t is the mass of that set: the
normaliser the sampler used, and the probability the model gave every way on that the grammar
allows.

Constrained is not conditioned: choosing token by token under the mask draws each token from the
model renormalised over what the grammar allows *now*, which is not the model's distribution over
whole texts restricted to valid ones (Park et al. 2024, "Grammar-Aligned Decoding"); the sample
many view shows the gap on the toy model.

The matcher is llguidance (Microsoft's low-level guidance library, the one llama.cpp, vLLM and
SGLang use). A model whose tokenizer llguidance cannot read directly (the toy models' word-level
vocabulary) is described to it token by token.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

from playground.errors import InvalidRequest
from playground.seam import LanguageModel
from strategies.sampling.grammar_refusals import refusal_text
from strategies.sampling.transforms import NEG_INF
from strategies.stages import Decision, Outcome, TransformBase, stage
from strategies.untrusted_json import loads_untrusted

GRAMMAR_KINDS = ("json", "regex", "choices", "lark")
MAX_GRAMMAR_CHARS = 20_000
NO_FORCING = '%llguidance {"no_forcing": true}'  # the option line every grammar is given (forcing off)
MAX_CHOICES = 200
GRAMMAR_REASON = "grammar complete"  # finish reason: the text is whole and the grammar allows no more
DEAD_END_REASON = "grammar: no token allowed"  # finish reason: nothing in the vocabulary can continue
INCOMPLETE_REASON = "grammar: no whole text within max_new_tokens"  # a search found no valid text
LIMIT_REASON = "grammar: parser limit"  # finish reason: llguidance's parser hit one of its limits mid-run


class GrammarLimit(InvalidRequest):
    """The grammar's parser reached one of llguidance's limits (the items it keeps per step, say) on a
    token its own mask allowed: the engine ends the run there, the text so far kept, with LIMIT_REASON
    and this message."""
MASK_MEANING = "feasible"  # the mask is every token that continues a valid text (forcing off)
# llguidance's default allows any run of whitespace wherever JSON does, and a model can spend its tokens
# there (SmolLM2 spent up to 39% of a sample's tokens on it): one space, or a line break and an indent
JSON_WHITESPACE = r"(?: |\n[ \t]{0,16})"

EXAMPLES = {
    "json": '{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, '
            '"required": ["name", "age"], "additionalProperties": false}',
    "regex": r"\d{4}-\d{2}-\d{2}",
    "choices": "yes | no | maybe",
    "lark": 'start: "The answer is " ANSWER "."\nANSWER: "yes" | "no"',
}


@dataclass(frozen=True)
class GrammarSpec:
    """A grammar as a person gives it: its kind and its text (validated on construction)."""

    kind: str
    text: str

    def __post_init__(self) -> None:
        if self.kind not in GRAMMAR_KINDS:
            raise InvalidRequest(f"grammar kind must be one of {', '.join(GRAMMAR_KINDS)}, got {self.kind!r}")
        if not isinstance(self.text, str) or not self.text.strip():
            raise InvalidRequest(f"the {self.kind} grammar must not be empty")
        if len(self.text) > MAX_GRAMMAR_CHARS:
            raise InvalidRequest(f"the {self.kind} grammar must be at most {MAX_GRAMMAR_CHARS} characters, "
                                 f"got {len(self.text)}")
        if self.kind == "json":
            schema_of(self.text)
        if self.kind == "choices":
            choices_of(self.text)

    @classmethod
    def from_dict(cls, value: Any) -> "GrammarSpec | None":
        """``{"kind": ..., "text": ...}`` (or None / an empty text: no grammar) -> a spec."""
        if value is None or value == {} or value == "":
            return None
        if isinstance(value, GrammarSpec):
            return value
        if not isinstance(value, dict) or set(value) - {"kind", "text"}:
            raise InvalidRequest(f"grammar must be {{\"kind\": one of {', '.join(GRAMMAR_KINDS)}, "
                                 f"\"text\": the grammar}}, got {value!r:.200}")
        text = value.get("text") or ""
        if not str(text).strip():
            return None
        return cls(str(value.get("kind", "")), str(text))

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "text": self.text}

    def lark(self, forcing: bool = True) -> str:
        """The grammar in llguidance's Lark dialect (JSON and regex embedded as its own lexemes)."""
        # the option goes last, so that llguidance's line numbers are the person's own
        tail = "" if forcing else f"\n{NO_FORCING}\n"
        if self.kind == "json":
            return "start: %json " + json.dumps(bounded_whitespace(schema_of(self.text))) + tail
        if self.kind == "regex":
            return "start: /" + lark_regex(self.text) + "/" + tail
        if self.kind == "choices":
            return "start: " + " | ".join(json.dumps(c) for c in choices_of(self.text)) + tail
        return self.text.rstrip("\n") + tail


def lark_regex(text: str) -> str:
    """A person's regex as a Lark ``/.../`` lexeme: ``\\d`` is ASCII digits (Rust's is any Unicode digit,
    so ``\\d{2}`` would allow emoji digits), ``\\D`` what is not one, and a slash not already escaped is
    escaped (``\\d{2}\\/\\d{2}`` and ``\\d{2}/\\d{2}`` are one regex). Escaped backslashes and
    character classes are read as such: ``[\\d]`` is ``[0-9]``, ``\\\\d`` a backslash and a d."""
    out, i, in_class = [], 0, False
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            pair, nxt = text[i:i + 2], text[i + 1]
            if nxt == "d":
                out.append("0-9" if in_class else "[0-9]")
            elif nxt == "D" and not in_class:
                out.append("[^0-9]")
            else:
                out.append(pair)
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class and not (out and out[-1] in ("[", "[^")):
            in_class = False
        out.append("\\/" if c == "/" else c)
        i += 1
    return "".join(out)


def bounded_whitespace(schema: Any) -> Any:
    """``schema`` with llguidance's ``x-guidance`` whitespace set to ``JSON_WHITESPACE`` (matched at most
    once wherever JSON allows whitespace), unless the schema's own ``x-guidance`` sets
    ``whitespace_flexible`` or ``whitespace_pattern`` (``{"whitespace_flexible": true}``: any whitespace)."""
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        return schema
    own = schema.get("x-guidance", {})
    if not isinstance(own, dict) or {"whitespace_flexible", "whitespace_pattern"} & set(own):
        return schema  # the person's own setting (llguidance refuses one that is not an object)
    return {**schema, "x-guidance": {**own, "whitespace_pattern": JSON_WHITESPACE}}


def schema_of(text: str) -> Any:
    try:
        schema = loads_untrusted(text, "the JSON schema")
    except json.JSONDecodeError as e:
        raise InvalidRequest(f"the JSON schema does not parse: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if not isinstance(schema, (dict, bool)):
        raise InvalidRequest(f"a JSON schema must be an object, got {type(schema).__name__}")
    return schema


def choices_of(text: str) -> list[str]:
    """'["yes", "no"]' or 'yes | no' -> ['yes', 'no'] (a JSON list keeps spaces and bars inside items)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            items = loads_untrusted(stripped, "grammar choices")
        except json.JSONDecodeError as e:
            raise InvalidRequest(f"grammar choices as a JSON list do not parse: {e.msg} at column {e.colno}") from None
    else:
        items = [s.strip() for s in stripped.split("|")]
    if not isinstance(items, list) or not items or not all(isinstance(s, str) and s for s in items):
        raise InvalidRequest(f"grammar choices must be non-empty strings separated by | or a JSON list of "
                             f"strings, got {text!r:.200}")
    if len(items) > MAX_CHOICES:
        raise InvalidRequest(f"grammar choices must be at most {MAX_CHOICES}, got {len(items)}")
    return items


# --- the model's vocabulary as llguidance reads it --------------------------------------------------

_TOKENIZERS: dict[int, tuple[Any, Any]] = {}  # id(hf tokenizer) -> (it, LLTokenizer)


class _Vocabulary:
    """A tokenizer described token by token (what ``llguidance.TokenizerWrapper`` reads): every
    token's bytes, the special ids, and a greedy longest-match encoder over those bytes."""

    def __init__(self, tokenizer: Any, n_vocab: int, eos: int) -> None:
        self.eos_token_id = eos
        self.bos_token_id = getattr(tokenizer, "bos_token_id", None)
        self.special_token_ids = sorted(int(i) for i in getattr(tokenizer, "all_special_ids", []) if i < n_vocab)
        special = set(self.special_token_ids)
        self.tokens = []
        for i in range(n_vocab):
            raw = tokenizer.convert_ids_to_tokens(i) if i < len(tokenizer) else None
            if raw is None:
                self.tokens.append(b"\xff<unused>")
            elif i in special:
                self.tokens.append(b"\xff" + raw.encode())
            else:
                self.tokens.append(_token_bytes(raw))
        self._ids = {b: i for i, b in enumerate(self.tokens) if i not in special and b}
        self._longest = max((len(b) for b in self._ids), default=1)

    def __call__(self, text: str | bytes) -> list[int]:
        data = text if isinstance(text, bytes) else text.encode()
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                hit = self._ids.get(data[i:i + n])
                if hit is not None:
                    out.append(hit)
                    i += n
                    break
            else:
                i += 1  # a byte no token spells: left out
        return out


def _token_bytes(raw: str) -> bytes:
    if len(raw) == 6 and raw.startswith("<0x") and raw.endswith(">"):
        return bytes([int(raw[3:5], 16)])
    return raw.replace("▁", " ").encode()


def llg_tokenizer(lm: LanguageModel) -> Any:
    """llguidance's view of ``lm``'s vocabulary (built once per tokenizer, about a second for
    49,152 tokens)."""
    import llguidance
    import llguidance.hf

    tok = lm.tokenizer
    hit = _TOKENIZERS.get(id(tok))
    if hit is not None and hit[0] is tok:
        return hit[1]
    eos = sorted(int(i) for i in lm.eos_ids)
    try:
        made = llguidance.hf.from_tokenizer(tok, n_vocab=lm.vocab_size, eos_token=eos)
    except ValueError:  # a decoder llguidance does not know (the toy models' Metaspace)
        vocab = _Vocabulary(tok, lm.vocab_size, eos[0] if eos else 0)
        made = llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocab), n_vocab=lm.vocab_size, eos_token=eos)
    _TOKENIZERS[id(tok)] = (tok, made)
    return made


@dataclass
class CompiledGrammar:
    """A grammar checked against one model's vocabulary; ``matcher()`` starts a fresh text."""

    spec: GrammarSpec
    tokenizer: Any
    source: str

    def matcher(self) -> Any:
        import llguidance
        return llguidance.LLMatcher(self.tokenizer, self.source, log_level=0)


def compile_grammar(spec: GrammarSpec, lm: LanguageModel) -> CompiledGrammar:
    """Check ``spec`` against ``lm``'s vocabulary; a grammar that fails to parse or exceeds
    llguidance's limits is refused with its problem in the person's terms (grammar_refusals)."""
    import llguidance

    tokenizer = llg_tokenizer(lm)

    def refused(message: str) -> InvalidRequest:
        return InvalidRequest(refusal_text(spec.kind, spec.text, message, NO_FORCING))

    try:
        source = llguidance.LLMatcher.grammar_from_lark(spec.lark(forcing=False))
    except ValueError as e:
        raise refused(str(e)) from None
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(source, tokenizer)
    if is_error:
        raise refused(messages[0])
    compiled = CompiledGrammar(spec, tokenizer, source)
    first = compiled.matcher()
    if first.is_error():
        raise refused(first.get_error())
    return compiled


# --- the stage ---------------------------------------------------------------------------------------


@stage("grammar", truncates=True)
class Grammar(TransformBase):
    """The grammar stage: every token that cannot continue a valid text gets -inf, as llguidance's matcher
    (the one llama.cpp, vLLM and SGLang use) says; one matcher per row of the batch (a beam hypothesis, a sample).

    ``advance(parents, tokens)`` moves the rows on: row ``j`` of the next step continues row
    ``parents[j]`` of this one with ``tokens[j]`` (copying a matcher when two rows share a parent,
    as beams do when they fork). ``accept`` is ``advance`` with every row keeping its place, for a
    forced token as for a drawn one (the text holds either).
    """

    def __init__(self, compiled: CompiledGrammar, rows: int = 1) -> None:
        self.compiled = compiled
        self.matchers = [compiled.matcher() for _ in range(rows)]
        self.pinned: tuple[torch.Tensor, list[bool]] | None = None  # a mask given from outside (``along``)

    @property
    def spec(self) -> GrammarSpec:
        return self.compiled.spec

    def allowed(self, vocab: int) -> torch.Tensor:
        """[rows, vocab] bool: the tokens each row's matcher allows next."""
        import llguidance.torch as llt

        return allowed_mask(self.matchers, vocab, llt)

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        eos = self.compiled.tokenizer.eos_tokens
        if self.pinned is not None:  # a position of a speculative draft: the mask ``along`` computed
            mask, complete = self.pinned
            return masked(logits, mask.to(logits.device).expand_as(logits), complete, eos)
        allowed = self.allowed(logits.shape[-1]).to(logits.device)
        if allowed.shape[0] != logits.shape[0]:
            raise RuntimeError(f"grammar has {allowed.shape[0]} rows for {logits.shape[0]} rows of logits")
        return masked(logits, allowed, [m.is_accepting() for m in self.matchers], eos)

    def accept(self, outcome: Outcome) -> Decision:
        self.advance(list(range(len(self.matchers))), [int(t) for t in outcome.chosen.tolist()])
        return {}

    def advance(self, parents: list[int], tokens: list[int]) -> None:
        """Row j of the next step: row ``parents[j]``'s text plus ``tokens[j]``. A token the grammar
        does not allow (a forced one) is refused with a message that names it."""
        self.keep(parents)
        for m, token in zip(self.matchers, tokens):
            if not m.consume_token(int(token)):
                problem = first_line(m.get_error())
                if "limit" in problem.lower():  # the parser's own limit, not a token the grammar refuses
                    raise GrammarLimit(f"the grammar's parser reached a limit at token {int(token)}: {problem}")
                raise InvalidRequest(f"the grammar does not allow token {int(token)} here: {problem}")

    def keep(self, rows: list[int]) -> None:
        """Row j goes on as row ``rows[j]`` (its text unchanged); a row kept twice is copied."""
        used: set[int] = set()
        out = []
        for r in rows:
            out.append(self.matchers[r].deep_copy() if r in used else self.matchers[r])
            used.add(r)
        self.matchers = out

    def dead(self, decision: Decision, row: int = 0) -> bool:
        """Whether this stage's ``decision`` left row ``row`` nowhere to go (see the module docstring)."""
        return bool(decision["dead"][row])

    def stopped(self, row: int = 0) -> bool:
        """The text of ``row`` is whole and the grammar allows nothing more after it."""
        return self.matchers[row].is_stopped()

    def accepting(self, row: int = 0) -> bool:
        return self.matchers[row].is_accepting()

    def along(self, tokens: list[int], vocab: int, row: int = 0) -> tuple[torch.Tensor, list[bool]]:
        """The masks [n + 1, vocab] before each of the first n of ``tokens`` and after them, as the text of
        ``row`` grows by them (a speculative draft), with whether the text is whole at each; n stops at
        the first token the grammar forbids (that token is still checked against its mask, and fails).

        The walk runs on a copy of the row's matcher, which is never touched: llguidance's rollback
        does not undo everything a walk can do to a matcher (an end of text consumed after the text
        is whole, a mask asked for where no token can go on), so a rolled-back matcher could refuse
        a token it allowed before."""
        import llguidance.torch as llt

        m = self.matchers[row].deep_copy()
        masks, whole = [], []
        for t in tokens:
            masks.append(allowed_mask([m], vocab, llt)[0])
            whole.append(m.is_accepting())
            if not masks[-1][int(t)] or not m.consume_token(int(t)):
                break
        else:
            masks.append(allowed_mask([m], vocab, llt)[0])
            whole.append(m.is_accepting())
        return torch.stack(masks), whole


def masked(logits: torch.Tensor, allowed: torch.Tensor, complete: list[bool], eos: list[int]
           ) -> tuple[torch.Tensor, Decision]:
    """The grammar's decision on ``logits`` [batch, vocab] given its mask ``allowed`` [batch, vocab].

    A row the mask leaves empty (an earlier stage cut every allowed token) keeps the end of text, so
    the row stays a distribution; it is ``dead``, as is a row that allows only the end of text
    before its text is whole."""
    vocab = logits.shape[-1]
    eos_ids = torch.tensor([e for e in eos if e < vocab], dtype=torch.long, device=logits.device)
    done = torch.tensor(complete, dtype=torch.bool, device=logits.device)
    allowed = allowed & torch.isfinite(logits)
    counts = allowed.sum(-1)
    only_end = counts == allowed[:, eos_ids].sum(-1)
    dead = (counts == 0) | (only_end & ~done)
    if bool((counts == 0).any()):
        allowed = allowed.clone()
        allowed[(counts == 0).nonzero().flatten()[:, None], eos_ids[None, :]] = True
    probs = logits.float().softmax(-1)
    z = torch.where(allowed, probs, torch.zeros_like(probs)).sum(-1)
    out = logits.masked_fill(~allowed, NEG_INF)
    return out, {"allowed": allowed, "allowed_count": counts, "z": z, "forced": counts == 1,
                 "complete": done, "dead": dead, "mask": MASK_MEANING}


def allowed_mask(matchers: list[Any], vocab: int, llt: Any) -> torch.Tensor:
    """[len(matchers), vocab] bool from llguidance's packed bitmask (32 tokens per int32)."""
    bitmask = llt.allocate_token_bitmask(len(matchers), vocab)
    for r, m in enumerate(matchers):
        llt.fill_next_token_bitmask(m, bitmask, r)
    bits = (bitmask.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten(1)[:, :vocab].bool()


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "the matcher refused it"


def grammar_stage(ctx: Any, rows: int = 1, prefix: list[int] | None = None) -> Grammar | None:
    """A fresh grammar stage for a run of ``ctx`` (a DecodeContext), ``rows`` texts at once, each
    starting with the generated tokens ``prefix``; None when the request has no grammar."""
    if ctx.grammar is None:
        return None
    stage = Grammar(ctx.grammar, rows)
    for token in prefix or []:
        stage.advance(list(range(rows)), [token] * rows)
    return stage


def with_grammar(chain: list, grammar: Grammar | None, order: str = "") -> list:
    """``chain`` with the grammar stage placed where ``order`` names ``grammar`` (counted among the
    stages that are on), or first when it does not: truncations then act on the allowed tokens."""
    if grammar is None:
        return list(chain)
    names = [n.strip() for n in order.split(",") if n.strip()]
    if "grammar" not in names:
        return [grammar, *chain]
    before = set(names[:names.index("grammar")])
    at = sum(1 for t in chain if t.name in before)
    return [*chain[:at], grammar, *chain[at:]]


def grammar_of(chain: list) -> Grammar | None:
    return next((t for t in chain if isinstance(t, Grammar)), None)


def constrain_rows(stage: Grammar, logprobs: torch.Tensor, renormalise: bool
                   ) -> tuple[torch.Tensor, list[Decision]]:
    """A search's log-probabilities [rows, vocab] under the grammar, and each row's decision.

    Without ``renormalise`` (beam search) an allowed token keeps the model's log-probability, so a
    hypothesis's score stays the model's log-probability of its text and finished texts rank as the
    model ranks them; with it (a stochastic beam, which samples) each row is renormalised over the
    allowed tokens. A dead row gets no continuation at all."""
    out, decision = stage.decide(logprobs, torch.empty(0))
    dead = decision["dead"]
    if bool(dead.any()):
        out = out.masked_fill(dead[:, None], NEG_INF)
    if renormalise:
        alive = ~dead
        out = torch.where(alive[:, None], out.log_softmax(-1), out)
    rows = [{k: (v[r] if isinstance(v, torch.Tensor) else v) for k, v in decision.items()}
            for r in range(logprobs.shape[0])]
    return out, rows


def ends_whole(stage: Grammar, row: int, token: int) -> bool:
    """Whether row ``row``'s text plus ``token`` is a whole valid text (the end of text always is: the
    mask allows it only there)."""
    if token in stage.compiled.tokenizer.eos_tokens:
        return True
    m = stage.matchers[row].deep_copy()
    return m.consume_token(int(token)) and m.is_accepting()
