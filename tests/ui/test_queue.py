"""While one visitor's run holds the model, the next one waits in the queue and is told its place and why."""
from __future__ import annotations

import threading
import time

import pytest
from gradio_client import Client
from gradio_client.utils import Status

from playground.engine import stream
from playground.ui.page import serve

pytestmark = [pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]


@pytest.fixture(scope="module")
def slow_app(store):
    """The page with a decoder that holds the model until the test lets it go."""
    gate = threading.Event()

    def decoder(req, progress=None):
        for trace in stream(store, req, progress):
            gate.wait(60)
            yield trace

    demo, url = serve(store, decoder=decoder)
    yield url, gate, demo
    gate.set()
    demo.close()


def submit(client: Client, seed: int):
    return client.submit(model="toy", strategy="greedy", prompt="1 2", params="{}", seed=seed, max_new_tokens=3,
                         system="", chat="auto", api_name="/generate")


def wait_for(job, code: Status, seconds: float = 60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        status = job.status()
        if status.code == code:
            return status
        time.sleep(0.05)
    raise AssertionError(f"job never reached {code}, last {job.status()}")


def test_a_waiting_request_is_told_its_queue_position(slow_app):
    url, gate, _ = slow_app
    client = Client(url, verbose=False)
    first = submit(client, 1)
    wait_for(first, Status.PROCESSING)
    second, third = submit(client, 2), submit(client, 3)
    waiting = [wait_for(job, Status.IN_QUEUE) for job in (second, third)]
    assert sorted(s.rank for s in waiting) == [0, 1]  # places in line behind the running one
    gate.set()
    assert [job.result(timeout=60)[0] for job in (first, second, third)] == [first.result()[0]] * 3


def test_the_page_says_why_runs_wait_and_shows_progress_over_the_text(slow_app):
    _, _, demo = slow_app
    config = demo.get_config_file()
    notes = [c for c in config["components"] if c.get("props", {}).get("elem_id") == "pg-queue-note"]
    assert notes and "One run at a time" in notes[0]["props"]["value"] and "queue" in notes[0]["props"]["value"]
    explore = next(d for d in config["dependencies"] if d.get("api_name") == "explore")
    assert explore["show_progress"] == "full" and demo.fns[explore["id"]].concurrency_limit == 1
