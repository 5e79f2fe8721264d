"""The documented API: /generate (one decoding, streamed), /strategies (the registry as JSON), and every
other capability of the page as a plain function (api_runs.py, api_whatif.py), each returning the trace or
record JSON the page draws, with the page's limits and refusals. The page's own events, which return
components, stay undocumented; these endpoints are the contract (docs/api.md), served over MCP too."""
from __future__ import annotations

import inspect
import json
from typing import TYPE_CHECKING, Any, Callable, Iterator

import gradio as gr

from playground.engine import READING_REASON, Request
from playground.errors import InvalidRequest
from playground.models.dtypes import DEFAULT_DTYPE
from playground.serving.budget import Budget
from playground.ui import share
from playground.ui.api_args import MAX_PARAMS_CHARS, grammar_of, refusing, store_of
from playground.ui.api_runs import Runs, export_config
from playground.ui.api_whatif import WhatIf
from playground.ui.controls import strategies_in_order
from playground.ui.events import LOG, MODEL_EVENT, handler
from strategies.params import describe
from strategies.untrusted_json import loads_untrusted

if TYPE_CHECKING:
    from playground.models import ModelStore
    from playground.ui.components import Shared
    from playground.ui.handlers import Decoder

# the documented endpoints besides /generate and /strategies, in the order the API page lists them (the page's
# own events hold the short names compare, sample_many, score, lockstep, detect and branch)
ENDPOINTS = ("compare_strategies", "sample_many_outcomes", "sweep", "score_text", "logit_lens", "lockstep_models",
             "detect_watermark", "branch_run", "export_config")


def layout(page: Shared) -> None:
    """The /generate endpoint's own inputs (hidden): a script passes the strategy's params as JSON."""
    page.api_in = [gr.Textbox(label="model"), gr.Textbox(label="strategy"), gr.Textbox(label="prompt"),
                   gr.Textbox("{}", label="params"), gr.Number(0, label="seed", precision=0),
                   gr.Number(share.DEFAULT_MAX_NEW_TOKENS, label="max_new_tokens", precision=0),
                   gr.Textbox("", label="system"), gr.Textbox("auto", label="chat"),
                   gr.Textbox(DEFAULT_DTYPE, label="dtype"), gr.Textbox("", label="grammar")]
    page.api_out = [gr.Textbox(label="text"), gr.Textbox(label="trace_json")]
    page.api_trigger = gr.Button(visible=False)


def list_strategies() -> str:
    """Every strategy with its family, summary and parameters (name, type, default, range, help), as JSON."""
    out = [dict(name=s.name, family=s.family, summary=s.summary, params=describe(s.params))
           for s in strategies_in_order()]
    return json.dumps(out, default=list)


list_strategies.__signature__ = inspect.Signature([], return_annotation=str)  # type: ignore


def api_generate_stream(decoder: Decoder, model: str, strategy: str, prompt: str, params_json: str, seed: Any,
                        max_new_tokens: Any, system: str, chat: str, dtype: str = DEFAULT_DTYPE, grammar: str = ""
                        ) -> Iterator[tuple[str, str]]:
    """The /generate endpoint: (text so far, "") after every token, then (text, trace JSON).
    ``grammar``: "" (none) or a JSON object ``{"kind": json|regex|choices|lark, "text": ...}``."""
    try:
        params = loads_untrusted(params_json or "{}", "params", max_chars=MAX_PARAMS_CHARS)
    except json.JSONDecodeError as err:
        raise InvalidRequest(f"params must be a JSON object, got {params_json!r:.200} ({err.msg})") from None
    if not isinstance(params, dict):
        raise InvalidRequest(f"params must be a JSON object, got {params_json!r:.200}")
    chat_flag = {"auto": None, "true": True, "false": False, "": None}.get(str(chat).strip().lower())
    if chat_flag is None and str(chat).strip().lower() not in ("auto", ""):
        raise InvalidRequest(f"chat must be one of auto, true, false, got {chat!r}")
    req = Request(model=model, strategy=strategy, prompt=prompt, params=params, seed=seed,
                  max_new_tokens=max_new_tokens, system=system or "", chat=chat_flag, dtype=dtype or DEFAULT_DTYPE,
                  grammar=grammar_of(grammar))
    trace = None
    for trace in decoder(req, None):
        if trace.finish_reason != READING_REASON:  # the announcement before the prompt is read has no text
            yield trace.text, ""
    if trace is not None and trace.finish_reason != READING_REASON:
        yield trace.text, trace.to_json()


def plain_refusals(stream: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
    """``stream`` with a refused input raised as an error whose message is the plain text: a script
    reads it as it was written (the page's toasts escape theirs, for HTML; this endpoint has no toast)."""
    try:
        yield from stream
    except InvalidRequest as err:
        LOG.warning("refused: %s", err)
        raise gr.Error(str(err), title="Not run", print_exception=False) from None


GENERATE_DOC = """Run one decoding with a strategy and stream it: (text so far, "") after every token, then (text,
trace JSON). The trace holds every step's candidates (raw and final probabilities, kept or cut), the chosen
token and its log-probability, and what each stage of the chain did. Use it for one run you want to read
step by step, or as the trace the lens, branch and export endpoints take. Limits: max_new_tokens in
[1, 512], the server's time budget per run, beams x tokens within its row-token cap, the allowed models.

Args:
    model: a model key: toy, toy-small, toy-think, smollm2-135m, gemma3-270m, or a hub id where the server is online
    strategy: a strategy name from /strategies, e.g. greedy, sampling, beam, speculative, contrastive
    prompt: the prompt (toy and toy-small: token numbers such as "1 2"; toy-think: words such as "3 + 4 =")
    params: JSON object of the strategy's parameters (/strategies lists them with ranges), e.g. {"temperature": 0.7}
    seed: the run's seed, an integer in [0, 2147483647]
    max_new_tokens: tokens the run may write, an integer in [1, 512]
    system: a system prompt for a chat model ("" for none)
    chat: "auto" (the model's chat template where it has one), "true" or "false"
    dtype: the weights: "auto", "float32", "bfloat16" or "int4"
    grammar: "" for none, or JSON {"kind": "json"|"regex"|"choices"|"lark", "text": ...} the text must follow
"""


def wire(page: Shared, decode: Decoder, store: ModelStore | None) -> None:
    """/generate (the page's decoder, streamed), /strategies, and the documented capabilities on ``store``."""
    names = ("model", "strategy", "prompt", "params", "seed", "max_new_tokens", "system", "chat", "dtype", "grammar")
    generate = handler(lambda *a: plain_refusals(api_generate_stream(decode, *a)), len(page.api_in), names=names)
    generate.__name__, generate.__doc__ = "generate", GENERATE_DOC  # the MCP tool's name and its parameters' help
    page.api_trigger.click(generate, page.api_in, page.api_out, api_name="generate",
                           api_description=GENERATE_DOC.split("\n\n")[0].replace("\n", " "), **MODEL_EVENT)
    gr.api(refusing(list_strategies, "strategies"), api_name="strategies",
           api_description="Every strategy with its family, summary and parameters (name, type, default, range, help), "
           "as JSON. Use it to learn what /generate's params may hold.")
    wire_capabilities(decode, store)


def wire_capabilities(decode: Decoder, store: ModelStore | None) -> None:
    """The documented endpoints of ENDPOINTS: runs through the page's decoder, questions on ``store``."""
    runs, whatif = Runs(decode), WhatIf(store_of(store), Budget.from_env())
    model_fns: dict[str, Callable[..., str]] = dict(
        compare_strategies=runs.compare, sample_many_outcomes=whatif.sample_many, sweep=whatif.sweep,
        score_text=whatif.score, logit_lens=whatif.logit_lens, lockstep_models=whatif.lockstep,
        detect_watermark=whatif.detect, branch_run=runs.branch)
    for name in ENDPOINTS:
        if name in model_fns:  # one model run at a time, with the page's own
            gr.api(refusing(model_fns[name], name), api_name=name, **MODEL_EVENT)
        else:
            gr.api(refusing(export_config, name), api_name=name)
