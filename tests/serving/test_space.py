"""The app booted as a Hugging Face Space boots it: ``python app.py`` in its own process with
``SPACE_ID`` set, the hub unreachable (``HF_HUB_OFFLINE=1``, an empty hub cache), a free port,
and the `spaces` package installed; called with gradio_client like any script.

A second boot is the ZeroGPU one: the same app.py with `spaces` saying ZeroGPU is on and its
``spaces.GPU`` replaced by a recorder that evaluates the declared duration the way `spaces`
does (a callable is called with the decorated function's inputs) and then runs the function
(there is no GPU here: the weights stay on the CPU through $PLAYGROUND_DEVICE). Each duration it
records must be what ``playground.serving.zerogpu`` says: clamp(floor, rows x new tokens x the
per-token cost, the time budget).
"""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

pytest.importorskip("spaces", reason="the `spaces` package (tests/requirements.txt) is not installed")
from gradio_client import Client
from gradio_client.exceptions import AppError

from playground.engine import Request
from playground.models import DEFAULT_MODEL, OFFLINE
from playground.serving import zerogpu
from playground.serving.budget import Budget
from playground.ui import handlers

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:.*no_silent_downcasting"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]

ROOT = Path(__file__).resolve().parents[2]
BOOT_SECONDS = 240
TOKEN_SECONDS = 0.5  # the per-token cost the ZeroGPU boot is given, so small toy runs pass the floor
TIME_BUDGET = 45

# What a ZeroGPU Space's `spaces` does to the decorated function, without a GPU: evaluate the
# duration as spaces.zero.wrappers.static_duration does, write it down, run the function.
ZERO_GPU_BOOT = """
import json, os, runpy, sys
import spaces, spaces.config
spaces.config.Config.zero_gpu = True
log = os.environ["GPU_LOG"]

def GPU(task=None, *, duration=None, size=None):
    def decorate(fn):
        def run(*args, **kwargs):
            seconds = duration(*args, **kwargs) if callable(duration) else duration
            with open(log, "a") as f:
                f.write(json.dumps(seconds) + "\\n")
            yield from fn(*args, **kwargs)
        return run
    return decorate(task) if task is not None else decorate

spaces.GPU = GPU
sys.argv = ["app.py"]
runpy.run_path("app.py", run_name="__main__")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def boot(tmp: Path, argv: list[str], **env: str):
    """Start the app as a Space would; returns (process, url, log path) once it answers."""
    port = free_port()
    log = tmp / "server.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PLAYGROUND_", "GRADIO_", "SPACE"))}
    environ.update(SPACE_ID="someone/decoding-playground", HF_HUB_OFFLINE="1", HF_HOME=str(tmp / "hf"),
                   PLAYGROUND_CACHE=str(tmp / "cache"), PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1",
                   GRADIO_ANALYTICS_ENABLED="False", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **env)
    out = open(log, "w")
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=environ, stdout=out, stderr=subprocess.STDOUT)
    url, deadline = f"http://127.0.0.1:{port}/", time.monotonic() + BOOT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"app.py exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, url, log
        except OSError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail(f"app.py did not listen within {BOOT_SECONDS} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    proc, url, log = boot(tmp_path_factory.mktemp("space"), ["app.py"])
    try:
        yield Client(url, verbose=False), log
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def zero_gpu_space(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zerogpu")
    gpu_log = tmp / "gpu.jsonl"
    proc, url, log = boot(tmp, ["-c", ZERO_GPU_BOOT], GPU_LOG=str(gpu_log), PLAYGROUND_DEVICE="cpu",
                          PLAYGROUND_GPU_TOKEN_SECONDS=str(TOKEN_SECONDS), PLAYGROUND_TIME_BUDGET=str(TIME_BUDGET))
    try:
        yield Client(url, verbose=False), gpu_log, log
    finally:
        stop(proc)


def generate(client: Client, model: str = "toy", strategy: str = "greedy", params: dict | None = None,
             max_new_tokens: int = 12, seed: int = 0) -> tuple[str, dict]:
    text, trace = client.predict(model=model, strategy=strategy, prompt="1 2", params=json.dumps(params or {}),
                                 seed=seed, max_new_tokens=max_new_tokens, system="", chat="auto", dtype="auto",
                                 api_name="/generate")
    return text, json.loads(trace)


def test_a_space_serves_generate_on_toy(space):
    client, _ = space
    text, trace = generate(client)
    assert trace["model"] == "toy" and trace["text"] == text and len(trace["tokens"]) >= 1
    names = {s["name"] for s in json.loads(client.predict(api_name="/strategies"))}
    assert {"greedy", "sampling", "beam"} <= names


def test_a_hub_model_is_refused_in_plain_text_naming_what_loads_here(space):
    client, log = space
    for model in ("smollm2-135m", "openai-community/gpt2"):  # on a Space both come from the hub
        with pytest.raises(AppError) as err:
            generate(client, model=model)
        message = str(err.value)
        assert message == (f"model {model!r} could not be loaded from the Hugging Face hub (no network here?); "
                           f"the offline models are: toy, toy-small, toy-think")
        assert "&#x27;" not in message and "&lt;" not in message
    generate(client)  # and the next request is served
    # the default model could not be had either: the start said so and served the others
    assert "warning: model 'smollm2-135m' could not be loaded" in log.read_text()


def expected_seconds(rows: int, max_new_tokens: int) -> int:
    need = math.ceil(round(rows * max_new_tokens * TOKEN_SECONDS, 6))
    return max(zerogpu.FLOOR_SECONDS, min(need, TIME_BUDGET))


@pytest.mark.parametrize("strategy, params, max_new_tokens, rows", [
    ("greedy", {}, 8, 1),  # 4 s: the floor
    ("sampling", {"temperature": 1.0}, 30, 1),  # 15 s
    ("beam", {"num_beams": 2}, 20, 2),  # 20 s
    ("beam", {}, 30, 4),  # the default 4 beams: 60 s, capped by the time budget
])
def test_zero_gpu_declares_rows_x_tokens_x_cost_within_the_floor_and_the_budget(zero_gpu_space, strategy, params,
                                                                                max_new_tokens, rows):
    client, gpu_log, _ = zero_gpu_space
    before = gpu_log.read_text().splitlines() if gpu_log.exists() else []
    _, trace = generate(client, strategy=strategy, params=params, max_new_tokens=max_new_tokens)
    declared = gpu_log.read_text().splitlines()[len(before):]
    assert [json.loads(s) for s in declared] == [expected_seconds(rows, max_new_tokens)]
    assert trace["strategy"] == strategy


def test_zero_gpu_loads_the_kept_models_before_serving_and_replays_a_finished_run(zero_gpu_space):
    client, gpu_log, log = zero_gpu_space
    started = log.read_text()
    assert all(f"{toy} ready" in started for toy in ("toy", "toy-small", "toy-think"))  # at start-up, outside the GPU function
    first = generate(client, strategy="sampling", params={"temperature": 1.0}, max_new_tokens=10, seed=123)
    calls = len(gpu_log.read_text().splitlines())
    again = generate(client, strategy="sampling", params={"temperature": 1.0}, max_new_tokens=10, seed=123)
    assert again == first and len(gpu_log.read_text().splitlines()) == calls  # replayed: no GPU asked


class FakeSpaces(types.SimpleNamespace):
    """`spaces` on ZeroGPU as handlers sees it: its config says so, its decorator records durations."""

    def __init__(self) -> None:
        super().__init__(config=types.SimpleNamespace(Config=types.SimpleNamespace(zero_gpu=True)), durations=[])

    def GPU(self, task=None, *, duration=None, size=None):  # the name `spaces` gives it
        def decorate(fn):
            def run(*args, **kwargs):
                self.durations.append(duration(*args, **kwargs))
                yield from fn(*args, **kwargs)
            return run
        return decorate


def test_the_status_says_the_estimate_on_zero_gpu(store, monkeypatch):
    fake = FakeSpaces()
    monkeypatch.setattr(handlers, "spaces", fake)
    monkeypatch.setenv(zerogpu.TOKEN_SECONDS_ENV, "0.5")
    decoder = handlers.GpuDecoder(store, Budget(seconds=60))
    frames = list(handlers.generate(store, Request("toy", "beam", "1 2", {"num_beams": 3}, max_new_tokens=20),
                                    decoder=decoder))
    assert fake.durations == [30]
    assert "ZeroGPU: up to 30 s of GPU for 3 rows x 20 tokens" in frames[-1].status
    frames = list(handlers.generate(store, Request("toy", "greedy", "1 2", max_new_tokens=6), decoder=decoder))
    assert "ZeroGPU: up to 10 s of GPU for 6 tokens" in frames[-1].status and fake.durations == [30, 10]


def test_off_zero_gpu_the_status_has_no_estimate(store, monkeypatch):
    fake = FakeSpaces()
    fake.config.Config.zero_gpu = False
    monkeypatch.setattr(handlers, "spaces", fake)
    decoder = handlers.GpuDecoder(store, Budget(seconds=60))
    frames = list(handlers.generate(store, Request("toy", "greedy", "1 2", max_new_tokens=6), decoder=decoder))
    assert "ZeroGPU" not in frames[-1].status and decoder.replays is None


def test_gpu_seconds_clamps_between_the_floor_and_the_budget():
    assert zerogpu.gpu_seconds(1, 12, 0.07, 60) == 10  # 0.84 s: the floor
    assert zerogpu.gpu_seconds(1, 512, 0.07, 60) == 36  # 35.84 s, rounded up
    assert zerogpu.gpu_seconds(4, 512, 0.07, 60) == 60  # 143 s: the time budget
    assert zerogpu.gpu_seconds(4, 512, 0.07, None) == zerogpu.UNCAPPED_SECONDS
    assert zerogpu.gpu_seconds(1, 100, 0.1, 60) == 10  # 10.000000000000002 is 10, not 11
    assert zerogpu.gpu_seconds(1, 500, 0.1, 5) == 10  # a budget under the floor still gets the floor


def test_the_space_preloads_the_default_models_but_not_the_gated_one():
    front = (ROOT / "README.md").read_text(encoding="utf-8").split("---", 2)[1]
    block = front.split("preload_from_hub:", 1)[1]
    repos = [line.split()[1] for line in block.splitlines() if line.strip().startswith("- ")]
    listed = [line.split()[1] for line in front.split("models:", 1)[1].split("preload_from_hub:")[0].splitlines()
              if line.strip().startswith("- ")]
    assert OFFLINE[DEFAULT_MODEL].hub_id in repos and set(repos) <= set(listed)
    assert OFFLINE["gemma3-270m"].hub_id not in repos  # gated: it downloads on first use with HF_TOKEN


def test_replays_keep_only_runs_that_ended_by_themselves():
    replays = zerogpu.Replays(size=2)
    replays.keep("a", "run a", "eos")
    replays.keep("b", "run b", "time budget")
    replays.keep("c", "run c", "stopped")
    assert replays.get("a") == "run a" and replays.get("b") is None and len(replays) == 1
    replays.keep("d", "run d", "length")
    replays.keep("e", "run e", "length")
    assert replays.get("a") is None and replays.get("e") == "run e"  # the least recently used goes first


def test_the_readme_says_what_a_day_of_quota_buys():
    """The README's ZeroGPU arithmetic is the module's: the quota per account over the per-token cost."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    quota = zerogpu.DAILY_QUOTA_SECONDS
    assert (f"daily quota: {quota['unauthenticated'] // 60} minutes unauthenticated, {quota['free'] // 60} minutes "
            f"with a free account, {quota['PRO'] // 60} with PRO") in text
    (t_anon, r_anon), (t_free, r_free), (t_pro, r_pro) = (zerogpu.day_of_quota(a) for a in quota)
    assert (t_anon, t_free, t_pro) == (1714, 4285, 34285) and (r_anon, r_free, r_pro) == (3, 8, 66)
    assert (f"about {round(t_anon, -2):,} tokens of sampling or greedy unauthenticated, {round(t_free, -2):,} with a "
            f"free account and {round(t_pro, -3):,} with PRO") in text
    assert f"three 512-token runs ({zerogpu.gpu_seconds(1, 512, 0.07, 60)} s each), eight, and {r_pro}" in text
