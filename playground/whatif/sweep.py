"""Sweep: one parameter over a grid of values, N samples at each, and what changes along it.

At each value the request is drawn N times with that one parameter changed (seeds s .. s + N - 1 at
every value, so a point differs from the next only by the parameter): through sample many's batched rows
where the strategy allows (greedy, sampling, gumbel with the plain five stages; sample_records.py), else
one engine run per seed (beam width, speculative's gamma, ...). The measures of a point come from the
samples' own step records (sweep_metrics.py). ``progress(fraction, message)`` hears each value start
and its draw go on (the fraction of the whole sweep); ``stop()`` is asked before each value (and between
the runs of a one-by-one draw): a sweep told to stop returns the values done, marked ``stopped``.
``sweep_points`` yields the record after each value (``done`` at the last), so a page draws it growing.
The result is JSON-ready: the request, the values, and one point per value with how it was drawn
(``batched``), its measures and, with ``keep_samples``, its samples and their records; the sweep's
``batched`` is whether every point was.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterator, Sequence

from playground.engine import Request
from playground.errors import InvalidRequest
from playground.models import ModelStore, Progress
from playground.whatif.extractors import make_extractor
from playground.whatif.grid import sweep_values
from playground.whatif.sample_many import check_size
from playground.whatif.sample_records import Stop, draw_records
from playground.whatif.sweep_metrics import point_metrics
from playground.whatif.verifiers import check_expected

LOOP_REPEATS = 3  # a span written three times back to back is a loop, unless the request sets its own
MAX_SWEEP_SAMPLES = 4000  # N x values: the draws one sweep may make
MAX_PAGE_N = 200  # N per value on the page's slider, and in a share link


def loop_settings(params: dict) -> tuple[int, int]:
    """The loop detector's (repeats, min_span): the request's own where it turns detection on, else 3 and 1."""
    repeats = int(params.get("loop_repeats") or 0)
    return (repeats, int(params.get("loop_min_span", 1))) if repeats >= 2 else (LOOP_REPEATS, 1)


def within(progress: Progress, i: int, count: int) -> Progress:
    """``progress`` for the draw of value i of ``count``: its fractions are placed inside that value's share."""
    return lambda fraction, message: progress((i + fraction) / count, message)


def sweep(store: ModelStore, req: Request, param: str, values: Sequence[float], n: int,
          extract: str | None = None, expected: Sequence[str] = (), keep_samples: bool = True,
          progress: Progress | None = None, stop: Stop | None = None) -> dict[str, Any]:
    """Sweep ``param`` of ``req``'s strategy over ``values`` with ``n`` samples each (module docstring)."""
    record: dict[str, Any] = {}
    for record in sweep_points(store, req, param, values, n, extract, expected, keep_samples, progress, stop):
        pass
    return record


def sweep_points(store: ModelStore, req: Request, param: str, values: Sequence[float], n: int,
                 extract: str | None = None, expected: Sequence[str] = (), keep_samples: bool = True,
                 progress: Progress | None = None, stop: Stop | None = None) -> Iterator[dict[str, Any]]:
    """The sweep as it goes: the record (``sweep``'s) after each value, marked ``done`` at the last one
    (the page draws each point as it comes). Every input is checked before the first value runs."""
    progress = progress or (lambda f, m: None)
    points_of = sweep_values(req.strategy, param, list(values), dict(req.params))
    n = check_size(n, req.max_new_tokens, req.seed)
    if n * len(points_of) > MAX_SWEEP_SAMPLES:
        raise InvalidRequest(f"n x values must be at most {MAX_SWEEP_SAMPLES}, got {n} x {len(points_of)}")
    expected = check_expected(expected)
    extractor = make_extractor(extract) if extract else None
    repeats, min_span = loop_settings(dict(req.params))
    started = time.perf_counter()
    points: list[dict[str, Any]] = []
    stopped = False
    model, strategy, batched = req.model, req.strategy, True

    def record(done: bool) -> dict[str, Any]:
        return {"kind": "sweep", "model": model, "strategy": strategy, "params": dict(req.params), "param": param,
                "values": points_of, "n": n, "prompt": req.prompt, "seed": req.seed, "tokens": req.max_new_tokens,
                "extract": extract, "expected": list(expected), "loop_repeats": repeats, "loop_min_span": min_span,
                "batched": batched, "stopped": stopped, "done": done, "points": list(points),
                "timing": {"seconds": round(time.perf_counter() - started, 3)}}

    for i, value in enumerate(points_of):
        if stop is not None and stop():
            stopped = True
            break
        progress(i / len(points_of), f"{param} = {value:g}: {n} samples ({i + 1} of {len(points_of)})")
        point_started = time.perf_counter()
        draw = draw_records(store, dataclasses.replace(req, params={**req.params, param: value}), n,
                            within(progress, i, len(points_of)), stop)
        model, strategy, batched = draw.model, draw.strategy, batched and draw.batched
        point = {"value": value, "batched": draw.batched,
                 **point_metrics(draw.samples, repeats, min_span, extractor, expected),
                 "seconds": round(time.perf_counter() - point_started, 3)}
        if keep_samples:
            point["samples"] = [s.to_dict() for s in draw.samples]
        points.append(point)
        if len(draw.samples) < n:  # stopped inside a one-by-one draw: keep the point, end here
            stopped = True
            break
        if i < len(points_of) - 1:
            yield record(False)
    progress(1.0, "sweep stopped" if stopped else "sweep done")
    yield record(True)
