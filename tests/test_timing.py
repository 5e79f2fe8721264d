"""Timing counts the decoder's own work, not the time a consumer holds the stream."""
from __future__ import annotations

import time

from playground.engine import Request, stream


def test_time_held_by_the_consumer_is_not_decoding_time(store):
    req = Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=0, max_new_tokens=6)
    held = 0.0
    for trace in stream(store, req):
        if trace.finish_reason == "running":
            time.sleep(0.2)  # a slow consumer: drawing charts between two tokens
            held += 0.2
    assert held >= 0.2
    assert trace.timing.seconds < 0.2, trace.timing.seconds
    assert trace.timing.seconds > 0


def test_stopping_the_stream_closes_the_strategy(store):
    req = Request("toy", "greedy", "1 2", {}, seed=0, max_new_tokens=8)
    it = stream(store, req)
    first = next(it)
    it.close()
    assert first.finish_reason == "running"
    assert len(first.tokens) == 1
