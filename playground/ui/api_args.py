"""What the documented endpoints share: their arguments read from a script's plain values (JSON texts
checked for size and depth, a trace checked for the fields a capability reads, the chat choice), a
refused input raised as the plain message a script reads, and the model store the page's decoder uses.
"""
from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any, Callable, Literal, cast

import gradio as gr

from playground.errors import InvalidRequest
from playground.models import ModelStore
from playground.models.lineup import MAX_NEW_TOKENS, MAX_PROMPT_TOKENS
from playground.ui.events import LOG
from strategies.sampling.grammar import MAX_GRAMMAR_CHARS
from strategies.untrusted_json import loads_untrusted

if TYPE_CHECKING:
    pass

MAX_PARAMS_CHARS = 100_000  # a params JSON; the longest real one is a few hundred
MAX_TRACE_CHARS = 20_000_000  # a trace JSON: 512 tokens with 100 candidates each is a few MB
MAX_LIST_CHARS = 20_000  # a list of answers
MAX_GRAMMAR_ARGUMENT_CHARS = 4 * MAX_GRAMMAR_CHARS  # the grammar's JSON wrapper: its text, escaped
MAX_TOKEN_ID = 2**31 - 1
CHAT_CHOICES = {"auto": None, "": None, "true": True, "false": False}
# the choices as types: the API's schema and the MCP tools' list them (tests/ui/test_api_docs.py holds them to
# playground.models.dtypes.DTYPES and playground.engines.FORMATS); a value outside is refused by the request
Chat = Literal["auto", "true", "false"]
Weights = Literal["auto", "float32", "bfloat16", "int4"]
Engine = Literal["all", "llama-server", "llama-cli", "vllm", "vllm-json", "transformers", "ollama", "openai"]

def refusing(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` with a refused input raised as gr.Error whose message is the plain text (a script reads it as
    written; the page's toasts escape theirs, for HTML). Signature, hints and docstring stay ``fn``'s; its
    name is the endpoint's, which Gradio's MCP server gives the tool."""
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InvalidRequest as err:
            LOG.warning("refused: %s", err)
            raise gr.Error(str(err), title="Not run", print_exception=False) from None
    wrapped.__name__ = wrapped.__qualname__ = name
    return wrapped


def json_arg(text: Any, name: str, kind: type, empty: str, shape: str, max_chars: int) -> Any:
    """``text`` parsed as JSON of ``kind`` (``shape`` says it in words), "" read as ``empty``; refused naming
    ``name`` where it is not text, does not parse, or is another kind."""
    if not isinstance(text, str):
        raise InvalidRequest(f"{name} must be {shape} as text, got {type(text).__name__}")
    try:
        value = loads_untrusted(text or empty, name, max_chars=max_chars)
    except json.JSONDecodeError as err:
        raise InvalidRequest(f"{name} must be {shape}, got {text!r:.200} ({err.msg})") from None
    if not isinstance(value, kind):
        raise InvalidRequest(f"{name} must be {shape}, got {text!r:.200}")
    return value


def json_object(text: Any, name: str, max_chars: int = MAX_PARAMS_CHARS) -> dict[str, Any]:
    """``text`` as a JSON object ("" is {}); refused naming ``name`` when it is not one."""
    return cast(dict[str, Any], json_arg(text, name, dict, "{}", "a JSON object", max_chars))


def grammar_of(text: Any) -> dict[str, Any] | None:
    """A grammar argument: "" (or None) is none, else a JSON object ``{"kind", "text"}`` the request validates."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    return cast(dict[str, Any], json_arg(text, "grammar", dict, "{}", 'a JSON object {"kind": ..., "text": ...}',
                                         MAX_GRAMMAR_ARGUMENT_CHARS))


def string_list(text: Any, name: str) -> list[Any]:
    """``text`` as a JSON array ("" is []); its items are checked by the capability that reads them."""
    return cast(list[Any], json_arg(text, name, list, "[]", "a JSON array of strings", MAX_LIST_CHARS))


def chat_arg(chat: Any) -> bool | None:
    """auto (the model's chat template where it has one), true or false."""
    key = str(chat).strip().lower()
    if key not in CHAT_CHOICES:
        raise InvalidRequest(f"chat must be one of auto, true, false, got {chat!r:.100}")
    return CHAT_CHOICES[key]


def _ids(value: Any, name: str, most: int) -> list[int]:
    if not isinstance(value, list) or len(value) > most:
        raise InvalidRequest(f"a trace's {name} must be a list of at most {most} token ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_TOKEN_ID for i in value):
        raise InvalidRequest(f"a trace's {name} must be token ids (integers in [0, {MAX_TOKEN_ID}])")
    return value


def trace_arg(text: Any) -> dict[str, Any]:
    """A trace JSON as /generate returns it, with the fields a lens, a branch or an export reads checked:
    model, strategy, prompt, params, seed, tokens (each with its id), steps, prompt_ids."""
    trace = json_object(text, "trace", MAX_TRACE_CHARS)
    kinds = {"model": str, "strategy": str, "prompt": str, "params": dict, "seed": int}
    for key, kind in kinds.items():
        if not isinstance(trace.get(key), kind) or isinstance(trace.get(key), bool):
            raise InvalidRequest(f"a trace must be the trace JSON /generate returns: its {key} must be a "
                                 f"{kind.__name__}, got {str(trace.get(key))!r:.100}")
    tokens, steps = trace.get("tokens"), trace.get("steps", [])
    if not isinstance(tokens, list) or not all(isinstance(t, dict) for t in tokens):
        raise InvalidRequest("a trace's tokens must be a list of objects, each with its id")
    _ids([t.get("id") for t in tokens], "tokens", MAX_NEW_TOKENS)
    _ids(trace.get("prompt_ids", []), "prompt_ids", MAX_PROMPT_TOKENS)
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise InvalidRequest("a trace's steps must be a list of objects")
    for key, kind in (("dtype", str), ("grammar", dict)):
        if trace.get(key) is not None and not isinstance(trace[key], kind):
            raise InvalidRequest(f"a trace's {key} must be a {kind.__name__} or absent")
    return trace


def store_of(store: ModelStore | None) -> Callable[[], ModelStore]:
    """The page's model store, which the endpoints run on; a page built without one (a test's) gets a store
    of its own, made on first use."""
    if isinstance(store, ModelStore):
        return lambda: store
    return functools.cache(ModelStore)
