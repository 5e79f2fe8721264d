"""Score a text: one teacher-forced pass, and how surprised the model is by every token of it.

The text's tokens are fed after a context in one forward pass; the logits at position t - 1 are
the model's distribution for token t. The result is a Trace (strategy ``score``) whose steps are
those distributions, so the per-step charts open on any token, with extra fields per step:
``rank`` (1 + how many tokens the model found strictly more probable), ``surprisal`` (-log2 p,
in bits), ``greedy`` / ``greedy_text`` (what greedy decoding would have written there). The step's
``entropy`` is the model's, in nats. ``trace["score"]`` holds the perplexity
exp(-mean log p) and the total log-probability (natural log) over the scored tokens.

The context:
- a chat model with a prompt (and chat not switched off): the chat template's user turn and the
  assistant header, so the text is scored as the assistant's answer to the prompt;
- otherwise ("raw"): the prompt's own tokens, or with no prompt the special tokens the tokenizer
  puts in front of a text (a BOS); when it puts none, the text's first token is the context and
  is not scored (nothing predicts it).

With a grammar (``{"kind": json|regex|choices|lark, "text": ...}``) a fresh matcher reads the scored
tokens one by one: each step inside the grammar records ``grammar_allowed`` (how many tokens it
allowed there) and ``grammar_z`` (the model's probability of those tokens), and
``trace["score"]["grammar"]`` says where the text leaves it: ``leaves_at`` (the first scored token the
matcher refuses, None when it takes them all) with llguidance's message, and ``whole`` (the text is
a complete valid text of the grammar).
"""
from __future__ import annotations

import math
from typing import Any

import torch

from playground.engine import MAX_TEXT_CHARS, in_dtype
from playground.errors import InvalidRequest
from playground.models import LM, ModelStore, Progress
from playground.trace import Trace, rnd
from strategies.recording import make_step
from strategies.sampling.grammar import Grammar, GrammarSpec, compile_grammar, first_line


def text_ids(lm: LM, text: str) -> list[int]:
    """The text's tokens, no special tokens added (toy: token numbers as in its prompts)."""
    if lm.spec.numeric_prompt:
        return lm.encode(text, chat=False)  # checks the words against the toy vocabulary
    return [int(i) for i in lm.tokenizer(text, add_special_tokens=False)["input_ids"]]


def check_texts(text: Any, prompt: Any, system: Any, empty: str = "text must not be empty") -> None:
    """A text to read, its prompt and system prompt: strings within MAX_TEXT_CHARS, the text not blank
    (``empty``: the refusal's words)."""
    for name, value in (("text", text), ("prompt", prompt), ("system prompt", system)):
        if not isinstance(value, str):
            raise InvalidRequest(f"{name} must be a string, got {type(value).__name__}")
        if len(value) > MAX_TEXT_CHARS:
            raise InvalidRequest(f"{name} must be at most {MAX_TEXT_CHARS} characters, got {len(value)}")
    if not text.strip():
        raise InvalidRequest(empty)


def split_context(lm: LM, text: str, prompt: str, system: str, chat: bool | None) -> tuple[list[int], list[int], str]:
    """(context ids, scored ids, mode) for ``text`` after ``prompt``; mode is "chat" or "raw"."""
    ids = text_ids(lm, text)
    if not ids:
        raise InvalidRequest("text must hold at least one token")
    use_chat = lm.has_chat_template if chat is None else (chat and lm.has_chat_template)
    if prompt.strip():
        return lm.encode(prompt, system, use_chat), ids, "chat" if use_chat else "raw"
    with_specials = ids if lm.spec.numeric_prompt else \
        [int(i) for i in lm.tokenizer(text, add_special_tokens=True)["input_ids"]]
    lead = next((k for k in range(len(with_specials) - len(ids) + 1) if with_specials[k:k + len(ids)] == ids), 0)
    if lead:
        return with_specials[:lead], ids, "raw"
    if len(ids) < 2:
        raise InvalidRequest(f"text must hold at least two tokens when there is no prompt and {lm.key} adds "
                             f"no start token, got {len(ids)}")
    return ids[:1], ids[1:], "raw"


@torch.inference_mode()
def score(store: ModelStore, model: str, text: str, prompt: str = "", system: str = "",
          chat: bool | None = None, top_n: int = 20, progress: Progress | None = None, grammar: Any = None,
          dtype: str = "float32") -> Trace:
    """Teacher-force ``text`` (after ``prompt``) through ``model`` in the weights ``dtype`` resolves to
    (``auto``: as a run's, playground.engine.in_dtype; recorded in ``extra["dtype"]``); see the module
    docstring."""
    spec = GrammarSpec.from_dict(grammar)
    check_texts(text, prompt, system)
    lm = in_dtype(store.get(model, progress), dtype, progress)
    compiled = None if spec is None else compile_grammar(spec, lm)
    context, scored, mode = split_context(lm, text, prompt, system, chat)
    unscored = context if mode == "raw" and not prompt.strip() and context == text_ids(lm, text)[:1] else []
    if len(context) + len(scored) > lm.max_context:
        raise InvalidRequest(f"text is {len(scored)} tokens after a context of {len(context)}; {lm.key} accepts "
                             f"at most {lm.max_context} in all")
    ids = torch.tensor([context + scored], device=lm.device)
    logits = lm.forward(ids).logits[0, len(context) - 1:-1]  # [len(scored), vocab]
    trace = Trace(model=lm.key, strategy="score", params={"mode": mode}, seed=0, prompt=prompt,
                  prompt_ids=context, chain=["teacher-forced"])
    for i, (row, token) in enumerate(zip(logits, scored)):
        step, tok = make_step(lm, len(context) + i, [row], [], token, top_n)
        step.extra.update(_token_fields(lm, row, token))
        trace.steps.append(step)
        trace.tokens.append(tok)
    walk = None if compiled is None else grammar_walk(Grammar(compiled), logits, scored, trace, lm)
    trace.text = lm.decode(unscored + scored)
    trace.finish_reason = "scored"
    trace.timing.target_forward_passes = 1
    trace.extra["dtype"] = lm.weights
    total = sum(t.logprob for t in trace.tokens)
    trace.extra["score"] = {"mode": mode, "tokens": len(scored), "total_logprob": rnd(total),
                            "perplexity": rnd(math.exp(-total / len(scored))),
                            "unscored": [{"id": i, "text": lm.piece(i)} for i in unscored]}
    if walk is not None:
        assert spec is not None  # walked only under a grammar
        trace.extra["grammar"] = spec.to_dict()
        trace.extra["score"]["grammar"] = walk
    return trace


def grammar_walk(stage: Grammar, logits: torch.Tensor, scored: list[int], trace: Trace, lm: LM) -> dict[str, Any]:
    """Feed ``scored`` to the grammar's matcher token by token (``logits``: the model's rows before
    each); record the mask's size and mass on each step it reaches; where the text leaves it."""
    matcher = stage.matchers[0]
    for i, (row, token) in enumerate(zip(logits, scored)):
        allowed = stage.allowed(row.shape[-1])[0].to(row.device)
        step = trace.steps[i]
        step.extra["grammar_allowed"] = int(allowed.sum())
        step.extra["grammar_z"] = rnd(float(row.float().softmax(-1)[allowed].sum()))
        if not matcher.consume_token(int(token)) or not bool(allowed[token]):
            reason = first_line(matcher.get_error()) if matcher.is_error() else "the grammar does not allow it here"
            return {"leaves_at": i, "token": lm.piece(token), "message": reason, "whole": False}
    return {"leaves_at": None, "token": None, "message": "", "whole": bool(matcher.is_accepting())}


def _token_fields(lm: LM, logits: torch.Tensor, token: int) -> dict[str, Any]:
    logp = logits.float().log_softmax(-1)
    greedy = int(logits.argmax())
    return {"rank": int((logits > logits[token]).sum()) + 1, "surprisal": rnd(-float(logp[token]) / math.log(2)),
            "greedy": greedy, "greedy_text": lm.piece(greedy)}


def summary(trace: Trace) -> dict[str, Any]:
    """The JSON the CLI prints: every token of the text with prob, rank, surprisal, entropy and
    greedy's alternative (an unscored first token has nulls), the perplexity, the total."""
    section = trace.extra["score"]
    tokens = [{"id": t["id"], "text": t["text"], "prob": None, "logprob": None, "rank": None, "surprisal": None,
               "entropy": None, "greedy": None} for t in section["unscored"]]
    for step, token in zip(trace.steps, trace.tokens):
        tokens.append({"id": token.id, "text": token.text, "prob": rnd(math.exp(token.logprob)),
                       "logprob": rnd(token.logprob), "rank": step.extra["rank"],
                       "surprisal": step.extra["surprisal"], "entropy": rnd(step.entropy),
                       "greedy": step.extra["greedy_text"]})
    out = {"model": trace.model, "dtype": trace.extra.get("dtype"), "prompt": trace.prompt, "text": trace.text,
           "mode": section["mode"],
           "tokens": tokens, "perplexity": section["perplexity"], "total_logprob": section["total_logprob"]}
    if "grammar" in section:
        lead = len(section["unscored"])
        for step, t in zip(trace.steps, tokens[lead:]):
            t["grammar_allowed"] = step.extra.get("grammar_allowed")
            t["grammar_z"] = step.extra.get("grammar_z")
        out["grammar"] = section["grammar"]
    return out
