"""A fast path proves itself on the machine where it runs, before a request uses it.

The bfloat16 and int4 weights run through kernels that torch picks per CPU
(``torch.backends.cpu.get_cpu_capability()``: default, AVX2, AVX-512, ...) and, for int4, through a
packed weight layout that differs between those kernels. A path that is right on one CPU can write
garbage on another, and every chart would draw that garbage as what the model said. So on first use
per model and weights (cached with the variant, so once per process), the variant reads the parity
tests' prompt and the float32 model's greedy continuation of it, and its distributions are compared
with the float32 model's (transformers as loaded, the reference): one pass over the prompt, then one
cached step a token, so both the many-row and the one-row kernels are exercised.

The tolerance is the one the parity tests state for bfloat16 and int4 against float32
(tests/models/test_fast_path.py, tests/models/test_int4.py): per-position total variation at most 0.1 and at most
0.03 on average. A wrong layout gives about 1.0; a kernel that is missing raises, and is refused the
same way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from playground.models.cpu import torch_capability
from playground.models.fast import rows
from playground.models.fast.rows import RowForm

MAX_TV = 0.1  # per position: the parity tests' bound for bfloat16 and int4 against float32
MEAN_TV = 0.03  # over the probe's positions
PROBE_PROMPT = "Name three colours of the rainbow."  # the parity tests' prompt, in the model's chat form
STEPS = 8  # the float32 model's greedy continuation, one cached step a token


@dataclass(frozen=True)
class WeightsCheck:
    """How one variant's distributions compared with the float32 model's on the probe."""

    weights: str  # the variant: "bfloat16" or "int4"
    capability: str  # torch's CPU kernel family in this process ("AVX512", "AVX2", "DEFAULT", ...)
    max_tv: float  # largest per-position total variation from float32 (1.0 when the path failed)
    mean_tv: float
    seconds: float  # the variant's pass (the float32 pass, made once per model, is the Probe's)
    error: str = ""  # what the path raised instead of giving logits, if it did
    one_pass_gap: float = 0.0  # ``one_pass_gap``: several tokens in one pass against one at a time
    row_forms: tuple[RowForm, ...] = ()  # how many rows each of the lean forward's products takes a call here

    @property
    def passed(self) -> bool:
        return not self.error and self.max_tv <= MAX_TV and self.mean_tv <= MEAN_TV

    def describe(self) -> str:
        where = f"{self.weights} on this CPU ({self.capability} kernels)"
        if self.error:
            return f"{where} failed its check against float32: {self.error}"
        verdict = "within" if self.passed else "outside"
        return (f"{where} differs from float32 by total variation {self.max_tv:.2f} at most, {self.mean_tv:.3f} "
                f"on average ({verdict} the allowed {MAX_TV} and {MEAN_TV})")

    @property
    def probe_seconds(self) -> float:
        """What choosing the row forms cost (their probes, first met in this check or before it)."""
        return sum(f.seconds for f in self.row_forms)

    def record(self) -> dict[str, Any]:
        """The trace's form: no wall-clock figure (that goes under ``timing``)."""
        d = {"weights": self.weights, "reference": "float32", "capability": self.capability,
             "max_tv": round(self.max_tv, 4), "mean_tv": round(self.mean_tv, 4),
             "tolerance": {"max_tv": MAX_TV, "mean_tv": MEAN_TV}, "passed": self.passed}
        if self.error:
            d["error"] = self.error
        if self.row_forms:
            d["row_forms"] = [f.record() for f in self.row_forms]
        return d


@torch.inference_mode()
def one_pass_gap(lm: Any, prompt_ids: list[int], continuation: list[int], step_logits: torch.Tensor) -> float:
    """The largest logit difference between ``step_logits`` (``probe_logits``: one pass over the
    prompt, then one cached step a token) and the same text cut as speculative decoding cuts it: a
    pass over the prompt less its last token, then one pass over that token and the continuation.
    0.0 means scoring several tokens at once gives the numbers of one token at a time, bit for bit,
    so a greedy draft-and-verify run writes plain greedy's text."""
    cache = lm.new_cache()
    head, rest = prompt_ids[:-1], prompt_ids[-1:] + continuation
    if head:
        lm.forward(torch.tensor([head]), cache)
    one_pass = lm.forward(torch.tensor([rest]), cache).logits[0].float().cpu()
    return float((one_pass - step_logits[len(head):]).abs().max())


@torch.inference_mode()
def probe_logits(lm: Any, prompt_ids: list[int], continuation: list[int] | None = None) -> tuple[torch.Tensor, list[int]]:
    """float32 logits [len(prompt) + STEPS, vocab] of one pass over ``prompt_ids`` and then one
    cached step per token of ``continuation`` (None: the greedy one, which is returned)."""
    cache = lm.new_cache()
    rows = [lm.forward(torch.tensor([prompt_ids]), cache).logits[0]]
    tokens = []
    for i in range(STEPS):
        token = int(rows[-1][-1].argmax()) if continuation is None else continuation[i]
        tokens.append(token)
        rows.append(lm.forward(torch.tensor([[token]]), cache).logits[0])
    return torch.cat(rows).float().cpu(), tokens


@dataclass(frozen=True)
class Probe:
    """The reference's side of the check, made once per model: the prompt, the float32 model's
    greedy continuation and its distributions over both."""

    prompt_ids: list[int]
    continuation: list[int]
    probs: torch.Tensor  # [len(prompt_ids) + STEPS, vocab]
    seconds: float
    one_pass_gap: float  # the reference's own (``one_pass_gap``)

    @classmethod
    def of(cls, reference: Any) -> "Probe":
        start = time.perf_counter()
        prompt_ids = reference.encode("1 2" if reference.spec.numeric_prompt else PROBE_PROMPT)
        logits, continuation = probe_logits(reference, prompt_ids)
        gap = one_pass_gap(reference, prompt_ids, continuation, logits)
        return cls(prompt_ids, continuation, logits.softmax(-1), time.perf_counter() - start, gap)


def check_weights(probe: Probe, variant: Any) -> WeightsCheck:
    """Compare ``variant`` (an LM in bfloat16 or int4) with the float32 model ``probe`` was made on."""
    start = time.perf_counter()
    prompt_ids, continuation, expected = probe.prompt_ids, probe.continuation, probe.probs
    try:
        got, _ = probe_logits(variant, prompt_ids, continuation)
    except (RuntimeError, NotImplementedError, AttributeError) as err:  # a kernel missing on this CPU or build
        return WeightsCheck(variant.weights, torch_capability(), 1.0, 1.0, time.perf_counter() - start,
                            error=f"{type(err).__name__}: {str(err).splitlines()[0][:200]}")
    tv = 0.5 * (got.softmax(-1) - expected).abs().sum(-1)
    tv = torch.nan_to_num(tv, nan=1.0)  # NaN logits are as wrong as can be
    gap = one_pass_gap(variant, prompt_ids, continuation, got)
    fast = getattr(variant, "fast", None)  # a stand-in LM of a test has none
    forms = tuple(rows.forms_of(fast)) if fast is not None else ()
    return WeightsCheck(variant.weights, torch_capability(), float(tv.max()), float(tv.mean()),
                        time.perf_counter() - start, one_pass_gap=gap, row_forms=forms)


def weights_record(check: WeightsCheck | None, weights: str, passed_over: list[str],
                   one_pass: float) -> dict[str, Any]:
    """What a trace records of its weights' check: the check's figures (None: ``weights`` are the
    reference, as loaded), the weights' ``one_pass_gap`` (the check's, or the reference's own from its
    probe) and the refusals ``auto`` passed over to reach them."""
    d = check.record() if check is not None else {"weights": weights, "reference": weights, "passed": True}
    d["one_pass_gap"] = one_pass
    if passed_over:
        d["passed_over"] = list(passed_over)
    return d


def describe_record(record: dict[str, Any]) -> str:
    """One or two sentences for a person (the page's status tooltip) from ``weights_record``."""
    if "max_tv" in record:
        head = (f"{record['weights']} checked against float32 on this CPU ({record['capability']} kernels): "
                f"total variation {record['max_tv']:.3f} at most, {record['mean_tv']:.3f} on average "
                f"(allowed {record['tolerance']['max_tv']} and {record['tolerance']['mean_tv']}).")
    else:
        head = f"{record['weights']}: the weights as loaded, the reference the fast paths are checked against."
    refused = record.get("passed_over") or []
    return " ".join([head, *([gap_sentence(record["one_pass_gap"])] if "one_pass_gap" in record else []),
                     *([forms_sentence(record["row_forms"])] if record.get("row_forms") else []),
                     *(f"Passed over: {r}." for r in refused)])


def forms_sentence(forms: list[dict[str, Any]]) -> str:
    """How many rows a call each product takes on this CPU (``rows.RowForm.record``), in one sentence."""
    parts = [f"{f['product']} {f['rows']} ({f['stop']})" for f in forms]
    return "Rows per matrix product call, chosen by probing this CPU: " + "; ".join(parts) + "."


def gap_sentence(gap: float) -> str:
    """What ``one_pass_gap`` means for a person."""
    if gap == 0:
        return ("On the check's probe, scoring several tokens in one pass gave the logits of one token at a "
                "time bit for bit, so greedy speculative decoding writes plain greedy's text.")
    return (f"On the check's probe, scoring several tokens in one pass differed from one token at a time by up "
            f"to {gap:.2g} in a logit on this CPU, so at a near tie speculative decoding's text can part from "
            "plain decoding's.")
