"""One request in, a streamed Trace out: the entry point the CLI and the UI share.

Validation lives here and in each strategy's Params, so every front end
gives the same message for the same bad value.
"""
from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generator, Iterator, Mapping, cast

from playground.errors import InvalidRequest
from playground.models import LM, MAX_NEW_TOKENS, ModelStore, Progress, WeightsRefused
from playground.models.dtypes import check_dtype, weights_order
from playground.models.fast.check import weights_record
from playground.serving.budget import FINISH_REASON as OUT_OF_TIME
from playground.serving.budget import Budget, Deadline
from playground.trace import READING_REASON, Trace
from strategies.context import DecodeContext, OutOfTime
from strategies.forcing import resolve_forced
from strategies.params import Params
from strategies.registry import get_strategy
from strategies.sampling.grammar import LIMIT_REASON, GrammarLimit, GrammarSpec, compile_grammar

# the longest text taken from outside, whatever reads it: a prompt, a system prompt, a text to score, to read
# in lockstep or to test for a watermark (playground.whatif.score.check_texts)
MAX_TEXT_CHARS = 20_000
MAX_SEED = 2**31 - 1
MAX_TOP_N = 100


@dataclass(frozen=True)
class Request:
    model: str
    strategy: str
    prompt: str
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    max_new_tokens: int = 32
    system: str = ""
    chat: bool | None = None  # None: the model's chat template when it has one
    top_n: int = 20
    forced: Mapping[Any, int | str] = field(default_factory=dict)  # step -> token id or text (a branch)
    # "float32" keeps a programmatic request on the reference numbers; the CLI, the page and the API
    # default to "auto" (see playground.models.dtypes).
    dtype: str = "float32"
    # the text must follow this grammar: {"kind": json|regex|choices|lark, "text": ...} (or a GrammarSpec)
    grammar: Any = None
    # steps whose every layer the run reads (the logit lens, strategies/lens.py), recorded in the trace's
    # ``lens`` by the strategies that decode token by token (greedy, sampling, gumbel)
    lens: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        object.__setattr__(self, "grammar", GrammarSpec.from_dict(self.grammar))
        checks = (("seed", self.seed, 0, MAX_SEED), ("max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS),
                  ("top_n", self.top_n, 1, MAX_TOP_N))
        for name, value, low, high in checks:
            try:
                ok = float(value).is_integer() and low <= int(value) <= high
            except (TypeError, ValueError, OverflowError):
                ok = False
            if not ok:
                shown = value if not isinstance(value, float) or math.isfinite(value) else str(value)
                raise InvalidRequest(f"{name} must be an integer in [{low}, {high}], got {shown}")
            object.__setattr__(self, name, int(value))
        lens = tuple(self.lens or ())
        for step in lens:
            if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step < self.max_new_tokens:
                raise InvalidRequest(f"a lens step must be an integer in [0, {self.max_new_tokens - 1}], got {step!r}")
        object.__setattr__(self, "lens", tuple(sorted(set(lens))))
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise InvalidRequest("prompt must not be empty")
        if len(self.prompt) > MAX_TEXT_CHARS:
            raise InvalidRequest(f"prompt must be at most {MAX_TEXT_CHARS} characters, got {len(self.prompt)}")
        if len(self.system) > MAX_TEXT_CHARS:
            raise InvalidRequest(f"system prompt must be at most {MAX_TEXT_CHARS} characters, "
                                 f"got {len(self.system)}")

    @cached_property
    def parsed_params(self) -> Params:
        """``params`` read into the strategy's Params (InvalidRequest naming a refused value), once per request:
        the run, the time budget's row cap, the ZeroGPU duration and the page's estimate all read this one."""
        return get_strategy(self.strategy).params.from_dict(dict(self.params))

    def row_factors(self) -> tuple[tuple[str, int], ...]:
        """The factors of the rows one step runs through the model (the strategy spec's ``row_factors``)."""
        return get_strategy(self.strategy).row_factors(self.parsed_params)


def prepare(store: ModelStore, req: Request, progress: Progress | None = None, held: ExitStack | None = None,
            budget: Budget | None = None) -> tuple[Any, Any, DecodeContext]:
    """Validate everything, load the model, encode the prompt. Raises InvalidRequest on bad input.

    With ``held``, every model the request loads (drafts and amateurs too) is held until it closes."""
    spec, params = get_strategy(req.strategy), req.parsed_params
    (budget or Budget()).check_rows(req.strategy, req.row_factors(), req.max_new_tokens)

    passed_over: list[str] = []

    def load(key: str) -> Any:
        lm = held.enter_context(store.use(key, progress)) if held is not None else store.get(key, progress)
        lm, skipped = choose_weights(lm, req.dtype, progress)
        if key == req.model:
            passed_over.extend(skipped)
        return lm

    lm = load(req.model)
    prompt_ids = lm.encode(req.prompt, req.system, req.chat)
    lm.check_prompt_length(len(prompt_ids), req.max_new_tokens)
    forced = resolve_forced(lm, req.forced, req.max_new_tokens, spec.family, spec.name)
    grammar = compile_grammar(req.grammar, lm) if req.grammar is not None else None
    ctx = DecodeContext(lm=lm, prompt=req.prompt, prompt_ids=prompt_ids, seed=req.seed,
                        max_new_tokens=req.max_new_tokens, top_n=req.top_n, load_model=load, forced=forced,
                        grammar=grammar, progress=progress, lens=frozenset(req.lens),
                        extra={"weights_check": weights_record(lm.check, lm.weights, passed_over, lm.one_pass_gap)})
    return spec, params, ctx


def stream(store: ModelStore, req: Request, progress: Progress | None = None,
           budget: Budget | None = None, announce: bool = False) -> Iterator[Trace]:
    """Yield the growing trace after every committed token; the last yield is complete.

    The request's models are held (never unloaded) until the stream ends or is closed. ``budget``
    (unlimited by default) caps beam rows x tokens up front and the decoding time between steps.
    ``announce``: first yield a trace with no tokens, ``finish_reason`` "reading" and the prompt's
    token count in ``extra["prompt_tokens"]``, once the request is valid and before the model reads
    the prompt (a long prompt's prefill takes seconds before the first token); a strategy may then
    announce a one-off set-up step the same way (``DecodeContext.announcement``). ``progress`` hears
    the loading and the strategy's set-up steps (``DecodeContext.report``)."""
    budget = budget or Budget()
    with ExitStack() as held:
        spec, params, ctx = prepare(store, req, progress, held, budget)
        ctx.announce = announce
        lm = cast(LM, ctx.lm)  # prepare hands the strategy the store's LM
        dtype, check = lm.weights, ctx.extra["weights_check"]
        if announce:
            yield reading(req, ctx)
        for trace in timed(spec.run(ctx, params), ctx, budget.deadline(ctx.clock.now)):
            trace.extra["dtype"] = dtype  # the weights (a dtype or int4); the chain always gets float32 logits
            trace.extra["weights_check"] = check  # how those weights compared with float32 on this CPU
            trace.extra["max_new_tokens"] = req.max_new_tokens  # the limit asked (an export's max tokens)
            if req.grammar is not None:
                trace.extra["grammar"] = req.grammar.to_dict()
            if lm.check is not None:
                trace.timing.extra["weights_check_seconds"] = round(lm.check.seconds, 3)
                if lm.check.row_forms:  # choosing each product's rows per call on this CPU
                    trace.timing.extra["row_probe_seconds"] = round(lm.check.probe_seconds, 3)
            if trace.finish_reason == OUT_OF_TIME and budget.seconds is not None:
                trace.extra["time_budget_seconds"] = budget.seconds  # the page names it
            yield trace


def reading(req: Request, ctx: DecodeContext) -> Trace:
    """The trace announced before the prompt is read: no tokens, the prompt's token count."""
    return Trace(model=req.model, strategy=req.strategy, params=dict(req.params), seed=req.seed, prompt=req.prompt,
                 prompt_ids=list(ctx.prompt_ids), finish_reason=READING_REASON,
                 extra={"prompt_tokens": len(ctx.prompt_ids), "dtype": cast(LM, ctx.lm).weights})


def choose_weights(lm: LM, name: str, progress: Progress | None = None) -> tuple[LM, list[str]]:
    """``lm`` in the first weights of ``name``'s order (playground.models.dtypes.weights_order) that pass
    their check on this CPU, and the refusals of those passed over on the way (``auto`` only: a
    named one that fails is refused to the caller)."""
    order = weights_order(name, lm.device, lm.dtype, toy=lm.spec.source == "assets",
                          has_int4=lambda: lm.int4_refusal is None)
    passed_over: list[str] = []
    for weights in order[:-1]:
        try:
            return lm.with_weights(weights, progress), passed_over
        except WeightsRefused as refused:
            passed_over.append(refused.check.describe())
    return lm.with_weights(order[-1], progress), passed_over


def in_dtype(lm: LM, name: str, progress: Progress | None = None) -> LM:
    """``lm`` with the weights ``name`` resolves to for it (``choose_weights``)."""
    return choose_weights(lm, name, progress)[0]


def timed(traces: Generator[Trace, None, None], ctx: DecodeContext, deadline: Deadline | None = None) -> Iterator[Trace]:
    """Pass the strategy's traces on, with its clock paused while the consumer holds each one,
    so drawing and sending between two tokens never counts as decoding time.

    When ``deadline`` passes, the strategy is closed between two steps exactly as Stop closes it, and
    the trace so far is yielded once more with ``finish_reason`` "time budget" (first the strategy may
    wind up: ``wind_up``); likewise when the
    grammar's parser reaches one of its limits mid-run ("grammar: parser limit", the limit named in
    ``grammar_limit``). A run that already holds
    all its ``max_new_tokens`` is let finish (its reason is its own, "length"): no step is left to cut."""
    trace = None
    try:
        while True:
            out_of_time = (deadline is not None and trace is not None and trace.finish_reason == "running"
                           and len(trace.tokens) < ctx.max_new_tokens)
            if out_of_time and deadline is not None and trace is not None and deadline.passed():
                trace.finish_reason = OUT_OF_TIME
                trace = wind_up(traces, trace)
                trace.finish_reason = OUT_OF_TIME
                break
            ctx.clock.resume()
            try:
                trace = next(traces)
            except StopIteration:
                break
            except GrammarLimit as limit:
                if trace is None:  # before the first token: nothing to keep, the request is refused
                    raise
                trace.finish_reason = LIMIT_REASON
                trace.extra["grammar_limit"] = str(limit)
                break
            finally:
                ctx.clock.pause()
            yield trace
    finally:
        traces.close()  # a consumer that stops early (Stop) ends the strategy between two steps
    if trace is None:
        raise RuntimeError("the strategy produced no trace")
    if trace.finish_reason in (OUT_OF_TIME, LIMIT_REASON):
        yield trace


def wind_up(traces: Generator[Trace, None, None], trace: Trace) -> Trace:
    """The run's last trace once the time budget cut it at ``trace``: OutOfTime is thrown in at the
    strategy's yield, with the decoder's clock held (paused since that yield), so what the strategy does
    then counts neither in its timing nor against the budget. A strategy with nothing to do lets it
    through (``trace`` stays the last); one that catches it yields its last trace."""
    try:
        return traces.throw(OutOfTime())
    except (OutOfTime, StopIteration):
        return trace


def run(store: ModelStore, req: Request, progress: Progress | None = None, budget: Budget | None = None) -> Trace:
    trace = None
    for trace in stream(store, req, progress, budget):
        pass
    assert trace is not None
    return trace
