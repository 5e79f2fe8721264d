"""The documented What-if endpoints: sample many, sweep, score, logit lens, lockstep, watermark detection.

Each is a plain function of plain values registered with ``gr.api``: its docstring is the description
Gradio's API page, gradio_client and an MCP client read, and it returns the record the page draws as
JSON text. Every one calls the playground.whatif function the page's own event calls, on the page's
model store, with the page's limits (its sizes, the store's allowed models, the run's time budget for a
sweep), and a refused input is raised with the message the page shows.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable

from playground.engine import Request
from playground.errors import InvalidRequest
from playground.models import ModelStore
from playground.models.dtypes import DEFAULT_DTYPE
from playground.serving.budget import Budget
from playground.ui.api_args import Chat, Weights, chat_arg, grammar_of, json_object, string_list, trace_arg
from playground.whatif.grid import parse_values
from playground.whatif.lens import lens
from playground.whatif.lockstep import lockstep
from playground.whatif.sample_many import sample_many
from playground.whatif.score import score, summary
from playground.whatif.sweep import sweep
from playground.whatif.watermark import detect_synthid_text, detect_text


def dumps(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, default=list)


class WhatIf:
    """The endpoints, bound to the page's model store and time budget."""

    def __init__(self, store: Callable[[], ModelStore], budget: Budget) -> None:
        self.store, self.budget = store, budget

    def sample_many(self, model: str, strategy: str, prompt: str, params: str = "{}", seed: int = 0, n: int = 100,
                    tokens: int = 4, system: str = "", chat: Chat = "auto", dtype: Weights = "auto",
                    grammar: str = "", batched: bool = True) -> str:
        """Draw n samples of a short continuation with one strategy (seeds seed .. seed + n - 1) and set each
        distinct outcome's frequency beside its exact probability under the strategy's final distribution.
        Use it to check a sampler (is the 30% really 30%?) or to see how spread a strategy's outputs are.
        Returns JSON: outcomes (text, ids, count, frequency, probability, seeds), chi_square, tv_distance and
        timing; with a grammar also the probability given the text is valid. Limits: n in [1, 1000], tokens in
        [1, 64], seed + n - 1 <= 2147483647, no loop_stop.

        Args:
            model: a model key (see /generate), e.g. "toy" or "smollm2-135m"
            strategy: a sampling-family strategy name from /strategies, e.g. "sampling"
            prompt: the prompt (toy models: token numbers such as "1 2")
            params: JSON object of the strategy's parameters, e.g. {"temperature": 0.7, "top_k": 20}
            seed: the first sample's seed, an integer in [0, 2147483647]
            n: how many samples, an integer in [1, 1000]
            tokens: tokens per outcome, an integer in [1, 64]
            system: a system prompt for a chat model ("" for none)
            chat: "auto" (the model's chat template where it has one), "true" or "false"
            dtype: the weights: "auto", "float32", "bfloat16" or "int4"
            grammar: "" for none, or JSON {"kind": "json"|"regex"|"choices"|"lark", "text": ...}
            batched: true draws all samples as rows of one batch; false runs the engine once per seed
        """
        req = Request(model=model, strategy=strategy, prompt=prompt, params=json_object(params, "params"), seed=seed,
                      max_new_tokens=tokens, system=system or "", chat=chat_arg(chat), dtype=dtype or DEFAULT_DTYPE,
                      grammar=grammar_of(grammar))
        return dumps(sample_many(self.store(), req, n, bool(batched)))

    def sweep(self, model: str, strategy: str, prompt: str, param: str, values: str, params: str = "{}",
              seed: int = 0, n: int = 20, tokens: int = 8, system: str = "", chat: Chat = "auto",
              dtype: Weights = "auto", extract: str = "", expected: str = "[]", keep_samples: bool = False) -> str:
        """Sweep one numeric parameter of a strategy over a list or grid of values, drawing n samples at each
        (the same seeds at every value), and measure what changes: loop rate, distinct-n, surprisal, entropy,
        length, the modal answer's share and, with expected answers, accuracy. Use it to pick a temperature or
        a top-p, or to show where a model starts looping. Returns JSON: values, and one point per value with its
        measures (and its samples with keep_samples); stopped is true when the time budget ended it early.
        Limits: at most 12 values, n in [1, 1000], n x values <= 4000, tokens in [1, 64].

        Args:
            model: a model key (see /generate)
            strategy: a strategy name from /strategies, e.g. "sampling"
            prompt: the prompt
            param: the numeric parameter to sweep, e.g. "temperature" or "top_p"
            values: "0.2,0.5,1" or a grid "lin:LOW:HIGH:COUNT" / "log:LOW:HIGH:COUNT" (COUNT <= 12)
            params: JSON object of the strategy's other parameters
            seed: the first seed, an integer in [0, 2147483647]
            n: samples per value, an integer in [1, 1000]
            tokens: tokens per sample, an integer in [1, 64]
            system: a system prompt for a chat model ("" for none)
            chat: "auto", "true" or "false"
            dtype: the weights: "auto", "float32", "bfloat16" or "int4"
            extract: "" or an answer extractor: "last_number", "first_number", "regex:PATTERN", "json:FIELD", "choices:A|B"
            expected: JSON array of accepted answers (strings), e.g. ["12"]; [] for none
            keep_samples: true keeps every sample and its step records in each point
        """
        req = Request(model=model, strategy=strategy, prompt=prompt, params=json_object(params, "params"), seed=seed,
                      max_new_tokens=tokens, system=system or "", chat=chat_arg(chat), dtype=dtype or DEFAULT_DTYPE)
        deadline = None if self.budget.seconds is None else time.perf_counter() + self.budget.seconds
        out = sweep(self.store(), req, str(param), parse_values(values), n, str(extract or "") or None,
                    string_list(expected, "expected"), bool(keep_samples),
                    stop=None if deadline is None else lambda: time.perf_counter() > deadline)
        return dumps(out)

    def score(self, model: str, text: str, prompt: str = "", system: str = "", chat: Chat = "auto",
              dtype: Weights = "auto", grammar: str = "") -> str:
        """Teacher-force a given text through a model (one pass, no sampling) and record, token by token, the
        probability, rank and surprisal the model gave it, with the top candidates at every step. Use it to ask
        how surprised a model is by a text, or why a token was unlikely. Returns JSON: summary (per token its
        probability, rank, surprisal, entropy and greedy's alternative; perplexity, total log-probability) and trace (the trace JSON /generate returns, each step's extra
        holding rank and surprisal). Limits: text, prompt and system at most 20000 characters each; the text
        must not be blank.

        Args:
            model: a model key (see /generate)
            text: the text to score (with a chat model: the answer to the prompt)
            prompt: the context before the text ("" for none)
            system: a system prompt for a chat model ("" for none)
            chat: "auto", "true" or "false"
            dtype: the weights: "auto", "float32", "bfloat16" or "int4"
            grammar: "" or JSON {"kind", "text"}: also records where the text leaves the grammar
        """
        trace = score(self.store(), model, text, prompt, system or "", chat_arg(chat), grammar=grammar_of(grammar),
                      dtype=dtype or DEFAULT_DTYPE)
        return dumps({"summary": summary(trace), "trace": trace.to_dict()})

    def logit_lens(self, trace: str, step: int) -> str:
        """The logit lens at one step of a finished run: the run's context read through every layer's hidden
        state, the final norm and the LM head, so each layer's top tokens and the chosen token's rank show where
        the model settled on it. Use it to ask "when did the model decide on this token?". Returns JSON: step,
        position, model, dtype and the lens record (per layer: top tokens and probabilities, the chosen
        token's probability and rank). Limits: a trace from /generate (at most 20 MB) of a llama, Gemma or
        GPT-2 style model; step in [0, tokens - 1].

        Args:
            trace: the trace JSON /generate returned (its model, prompt_ids and tokens are read)
            step: the step to read, an integer in [0, number of generated tokens - 1]
        """
        run = trace_arg(trace)
        vocab = self.store().get(run["model"]).vocab_size
        if any(i >= vocab for i in [*run.get("prompt_ids", []), *(t["id"] for t in run["tokens"])]):
            raise InvalidRequest(f"a trace's token ids must be in [0, {vocab - 1}] for {run['model']}")
        return dumps(lens(self.store(), run, step))

    def lockstep(self, text: str, model_a: str, model_b: str = "", dtype_a: Weights = "float32",
                 dtype_b: Weights = "int4", prompt: str = "", system: str = "", chat: Chat = "auto") -> str:
        """Two models (or one model in two weights) read the same text in one pass each; per step the KL
        divergence both ways, the total variation, the top-10 overlap and whether their argmax differs. Use it
        to see where two models part, or what 4-bit weights change. Returns JSON: steps (one per token of the
        text) and summary (largest: the step of largest KL(A||B) first; mean divergences, argmax agreement).
        Limits: the two must share a tokenizer; text, prompt and system at most 20000 characters each.

        Args:
            text: the text both read (with a chat model: the answer to the prompt)
            model_a: model A's key (see /generate)
            model_b: model B's key; "" for model A again (compare its weights)
            dtype_a: A's weights: "auto", "float32", "bfloat16" or "int4"
            dtype_b: B's weights: "auto", "float32", "bfloat16" or "int4"
            prompt: the context before the text ("" for none)
            system: a system prompt for chat models ("" for none)
            chat: "auto", "true" or "false"
        """
        record = lockstep(self.store(), text, model_a, model_b or model_a, dtype_a, dtype_b, prompt, system or "",
                          chat_arg(chat))
        return dumps(record)

    def detect(self, model: str, text: str, params: str = "{}", prompt: str = "", system: str = "",
               chat: Chat = "auto") -> str:
        """Test a text for a watermark with the model's tokenizer: the green-list watermark (a z-score and
        p-value over the tokens' green share), or SynthID Text's mean g-value score when params carry
        synthid_keys. Use it on text a watermarking strategy wrote, or on any text, to see the evidence token by
        token. Returns JSON: the scores, the settings and marks (one per token: id, text, green or g_values,
        counted). Limits: text, prompt and system at most 20000 characters each.

        Args:
            model: the model whose tokenizer (and, for SynthID, context) the watermark used
            text: the text to test
            params: JSON object: watermark_gamma (0..1), watermark_scheme, watermark_key; or synthid_keys,
                synthid_ngram_len, synthid_context_history_size, synthid_sampling_table_size, synthid_sampling_table_seed
            prompt: the context the text followed ("" for none)
            system: a system prompt for a chat model ("" for none)
            chat: "auto", "true" or "false"
        """
        p, chat_flag = json_object(params, "params"), chat_arg(chat)
        if str(p.get("synthid_keys") or "").strip():
            result = detect_synthid_text(self.store(), model, text, p["synthid_keys"], p.get("synthid_ngram_len", 5),
                                         p.get("synthid_context_history_size"), p.get("synthid_sampling_table_size"),
                                         p.get("synthid_sampling_table_seed"))
        else:
            result = detect_text(self.store(), model, text, prompt, system or "", chat_flag,
                                 p.get("watermark_gamma", 0.25), p.get("watermark_scheme", "lefthash"),
                                 p.get("watermark_key"))
        return dumps(result)
