"""Timing counts the decoder's own work, not the time a consumer holds the stream; closing the
stream ends the strategy between two steps and releases the models it held."""
from __future__ import annotations

import time

import pytest

from playground.engine import Request, stream

PAUSE = 0.25  # a slow consumer: drawing charts between two tokens (or two speculative rounds)


@pytest.mark.parametrize("req", [
    Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=0, max_new_tokens=6),
    Request("toy", "speculative", "1 2 3 4 5 6 7 8 0 1 2", {"draft": "toy-small", "gamma": 1,
                                                             "measure_baseline": False}, seed=0, max_new_tokens=6),
], ids=["sampling", "speculative"])
def test_time_held_by_the_consumer_is_not_decoding_time(store, req):
    held = 0.0
    for trace in stream(store, req):
        if trace.finish_reason == "running":
            time.sleep(PAUSE)
            held += PAUSE
    assert held >= 2 * PAUSE
    # counted, the consumer's time alone would be `held`; half of it leaves a loaded machine's decoding room
    # (6 toy steps took 0.252 s beside the capability sweep in a cold run)
    assert 0 < trace.timing.seconds < held / 2, (trace.timing.seconds, held)
    rounds = trace.timing.extra.get("rounds")
    if rounds is not None:  # each round's own draft and verify time fits inside the decoder's time
        assert 0 < sum(r["draft"] + r["verify"] for r in rounds) <= trace.timing.seconds


def test_stopping_the_stream_ends_the_strategy_and_releases_its_models(store):
    req = Request("toy", "speculative", "1 2", {"draft": "toy-small"}, seed=0, max_new_tokens=8)
    users = lambda key: store.residency.entries[key].users  # noqa: E731
    it = stream(store, req)
    first = next(it)
    assert first.finish_reason == "running"
    assert users("toy") == 1 and users("toy-small") == 1  # the target and its draft are held while it runs
    it.close()
    assert users("toy") == 0 and users("toy-small") == 0
