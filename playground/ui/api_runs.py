"""The documented endpoints that run the decoder or read a run's settings: compare two strategies, branch a
run at a step, and a run's settings as an inference engine's config.

Runs go through the page's decoder (playground.ui.handlers.default_decoder: the engine within the
Space's time budget and row-token cap, on the store's allowed models); the result is the final trace
JSON, as /generate's last output. A refused input is raised with the message the page shows.
"""
from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

from playground.engine import READING_REASON, Request
from playground.engines import FORMATS, export, settings_for, settings_of_trace
from playground.errors import InvalidRequest
from playground.models.dtypes import DEFAULT_DTYPE
from playground.ui.api_args import Chat, Engine, Weights, chat_arg, grammar_of, json_object, trace_arg
from playground.ui.handlers import side_refused
from playground.whatif.branches import branch_settings

if TYPE_CHECKING:
    from playground.trace import Trace
    from playground.ui.handlers import Decoder


def final_trace(decode: Decoder, req: Request) -> Trace:
    """The decoder's last trace of ``req`` (the announcement before the prompt is read is not one)."""
    last = None
    for trace in decode(req, None):
        if trace.finish_reason != READING_REASON:
            last = trace
    if last is None:
        raise InvalidRequest("the run made no step")
    return last


class Runs:
    """The endpoints, bound to the page's decoder."""

    def __init__(self, decode: Decoder) -> None:
        self.decode = decode

    def compare(self, model: str, prompt: str, strategy_a: str, strategy_b: str, params_a: str = "{}",
                params_b: str = "{}", seed: int = 0, max_new_tokens: int = 32, system: str = "", chat: Chat = "auto",
                dtype: Weights = "auto", grammar: str = "") -> str:
        """Run two strategies on the same model, prompt, seed and grammar, as the page's Compare tab does. Use
        it to see how two decoding settings differ on one prompt (greedy against sampling, top-p against
        min-p). Returns JSON {"a": trace, "b": trace}, each the trace JSON /generate returns. A refused input
        names its side: "A (beam): ...". Limits: as /generate for each run (max_new_tokens in [1, 512], the
        server's time budget per run, beams x tokens within the row-token cap).

        Args:
            model: a model key (see /generate)
            prompt: the prompt both runs read
            strategy_a: side A's strategy name from /strategies
            strategy_b: side B's strategy name from /strategies
            params_a: JSON object of A's parameters
            params_b: JSON object of B's parameters
            seed: the seed of both runs, an integer in [0, 2147483647]
            max_new_tokens: tokens each run may write, an integer in [1, 512]
            system: a system prompt for a chat model ("" for none)
            chat: "auto", "true" or "false"
            dtype: the weights: "auto", "float32", "bfloat16" or "int4"
            grammar: "" or JSON {"kind": "json"|"regex"|"choices"|"lark", "text": ...}, for both runs
        """
        try:
            a = Request(model=model, strategy=strategy_a, prompt=prompt, params=json_object(params_a, "params_a"),
                        seed=seed, max_new_tokens=max_new_tokens, system=system or "", chat=chat_arg(chat),
                        dtype=dtype or DEFAULT_DTYPE, grammar=grammar_of(grammar))
        except InvalidRequest as err:  # what both sides share is refused as side A's, as the page does
            raise side_refused("A", strategy_a, err) from None
        traces = {}
        for side, req in (("A", a), ("B", None)):
            try:
                req = req or dataclasses.replace(a, strategy=strategy_b, params=json_object(params_b, "params_b"))
                traces[side.lower()] = final_trace(self.decode, req).to_dict()
            except InvalidRequest as err:
                raise side_refused(side, req.strategy if req else strategy_b, err) from None
        return json.dumps(traces, ensure_ascii=False)

    def branch(self, trace: str, step: int, token: str, max_new_tokens: int = 32, system: str = "",
               chat: Chat = "auto") -> str:
        """Continue a finished run with another token at one step: the run's own tokens before the step, the
        given token at it, then the run's strategy, parameters and seed from there on (a forced path). Use it to
        ask "what if the model had picked this token instead?". Returns the branch's trace JSON, as /generate
        returns it, its forced steps marked. Limits: a trace from /generate (at most 20 MB); step in
        [0, tokens - 1]; the token must be one token of the run's model; max_new_tokens in [1, 512].

        Args:
            trace: the trace JSON /generate returned (its model, strategy, params, seed, prompt and tokens are read)
            step: the step to branch at, an integer in [0, number of generated tokens - 1]
            token: the token to put there: its id (e.g. "17") or text that is one token of the model
            max_new_tokens: tokens the branch may write in all, an integer in [1, 512]
            system: the run's system prompt for a chat model ("" for none)
            chat: "auto", "true" or "false"
        """
        parent = trace_arg(trace)
        req = Request(**branch_settings(parent, step, token if isinstance(token, (str, int)) else str(token)),
                      max_new_tokens=max_new_tokens, system=system or "", chat=chat_arg(chat))
        return final_trace(self.decode, req).to_json()


def export_config(strategy: str = "sampling", params: str = "{}", engine: Engine = "all", seed: int = 0,
                  max_new_tokens: int = 32, grammar: str = "", trace: str = "") -> str:
    """A run's decoding settings as an inference engine's config: llama.cpp (llama-server, llama-cli flags),
    vLLM (SamplingParams, JSON body), transformers (GenerationConfig), Ollama (PARAMETER lines) or an OpenAI
    body, with what that engine cannot express of the run. Use it to take settings found here to a server.
    Returns JSON {engine: {engine, title, text, cannot_express, version}}. Limits: greedy, sampling and gumbel
    runs only; a trace (from /generate, at most 20 MB) replaces strategy, params, seed and max_new_tokens.

    Args:
        strategy: "greedy", "sampling" or "gumbel"
        params: JSON object of the strategy's parameters, e.g. {"temperature": 0.7, "min_p": 0.05}
        engine: "all", or one of llama-server, llama-cli, vllm, vllm-json, transformers, ollama, openai
        seed: the run's seed, an integer in [0, 2147483647]
        max_new_tokens: the run's token limit, an integer in [1, 512]
        grammar: "" or JSON {"kind": "json"|"regex"|"choices"|"lark", "text": ...}
        trace: "" or a trace JSON from /generate, whose settings are exported instead
    """
    if str(trace or "").strip():
        settings = settings_of_trace(trace_arg(trace))
    else:
        settings = settings_for(str(strategy), json_object(params, "params"), seed, max_new_tokens,
                                grammar=grammar_of(grammar))
    names = list(FORMATS) if engine == "all" else [str(engine)]
    return json.dumps({name: export(name, settings).to_dict() for name in names}, ensure_ascii=False)
