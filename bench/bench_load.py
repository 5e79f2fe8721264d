"""Load and fault test of the real app on loopback, as a public Space sees it.

Part 1 starts ``app.py`` (SmolLM2 preloaded, the Space's default budgets) and runs
16 clients for a bounded time and request count: short toy requests, SmolLM2
sampling, SmolLM2 beam search with 8 beams, speculative decoding, and hostile calls
(paths and URLs as models, a 70B hub id, beams past the cap, bad values). It prints
requests served, errors (goal 0), p50/p95 latency of the short toy requests while
the long ones run, the server's resident memory after warm-up and at the end
(goal: no growth), and whether every seeded answer equals its serial reference
(taken from the same server, one request at a time, before the load).

Part 2 starts the app on an empty temporary cache, kills it (SIGKILL) in the middle
of the SmolLM2 conversion, and starts it again: the next start must convert again
and seal the cache, not load a half-written one. A third start finds the cache
truncated and must rebuild it once.

    .venv/bin/python bench/bench_load.py [--seconds 300] [--clients 16] [--max-requests 4000] [--skip-faults]
    .venv/bin/python bench/bench_load.py --quick     # 60 s, for a shared machine
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gradio_client import Client  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from playground.models.weights_cache import CHECKSUMS, seal_problem  # noqa: E402

SMOL = "smollm2-135m"


@dataclass(frozen=True)
class Call:
    kind: str
    model: str
    strategy: str
    prompt: str
    params: dict
    seed: int
    max_new_tokens: int
    refused: str = ""  # hostile: a pattern the server's message must match

    @property
    def key(self) -> str:
        return json.dumps(self.args(), sort_keys=True)

    def args(self) -> dict:
        return dict(model=self.model, strategy=self.strategy, prompt=self.prompt, params=json.dumps(self.params),
                    seed=self.seed, max_new_tokens=self.max_new_tokens, system="", chat="auto")


def workload() -> dict[str, list[Call]]:
    """Each kind's calls; seeded ones are compared with their serial reference."""
    story = "Write one sentence about a lighthouse."
    return {
        "toy": [Call("toy", "toy", s, "1 2", p, seed, 12) for seed in range(3)
                for s, p in (("greedy", {}), ("sampling", {"temperature": 1.0}))],
        "smol_sampling": [Call("smol_sampling", SMOL, "sampling", story, {"temperature": 0.8, "top_p": 0.9}, seed, 24)
                          for seed in range(2)],
        "beam8": [Call("beam8", SMOL, "beam", story, {"num_beams": 8}, 0, 16)],
        "speculative": [Call("speculative", SMOL, "speculative", story, {"temperature": 0.7, "measure_baseline": False},
                             seed, 24) for seed in range(2)],
        "hostile": [
            Call("hostile", "/etc", "greedy", "x", {}, 0, 4, refused="namespace/name"),
            Call("hostile", "../assets/toy", "greedy", "x", {}, 0, 4, refused="namespace/name"),
            Call("hostile", "https://huggingface.co/gpt2", "greedy", "x", {}, 0, 4, refused="namespace/name"),
            Call("hostile", "ｍｅｔａ/ｌｌａｍａ", "greedy", "x", {}, 0, 4, refused="ASCII"),
            # offline: the offline models are named; on a Space: the size cap's two numbers
            Call("hostile", "meta-llama/Llama-3.1-70B", "greedy", "x", {}, 0, 4,
                 refused="offline models|GB of weights"),
            Call("hostile", SMOL, "sample_beam", "hi", {"num_prefixes": 8, "num_beams": 16}, 0, 100,
                 refused="row-tokens"),
            # 16 beams x 512 tokens is the cap itself (served, bounded by the time budget); twice that is refused
            Call("hostile", SMOL, "sample_beam", "hi", {"num_prefixes": 2, "num_beams": 16}, 0, 512,
                 refused="row-tokens"),
            Call("hostile", "toy", "speculative", "1 2", {"draft": "/etc/passwd"}, 0, 4, refused="namespace/name"),
            Call("hostile", "toy", "sampling", "1 2", {"temperature": -3}, 0, 4, refused="temperature must be"),
            Call("hostile", "toy", "greedy", "1 2", {}, 0, 10**9, refused="max_new_tokens must be"),
        ],
    }


# client i's mix: most are short toy requests; a few keep the model busy with long ones; two are hostile
ROLES = ["toy"] * 8 + ["smol_sampling", "smol_sampling", "beam8", "beam8", "speculative", "speculative",
                       "hostile", "hostile"]


def roles(clients: int) -> list[str]:
    """The clients' kinds, spread over ROLES: 16 clients take it whole; 4 take toy, toy, SmolLM2
    sampling and speculative, so a short run still keeps the model busy with long requests."""
    return [ROLES[(i * len(ROLES)) // clients % len(ROLES)] if clients < len(ROLES) else ROLES[i % len(ROLES)]
            for i in range(clients)]


@dataclass
class Tally:
    served: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    toy_latency: list[float] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    out_of_time: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    """``app.py`` in a subprocess on a loopback port; its output is kept for the checks."""

    def __init__(self, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        full = dict(os.environ, GRADIO_SERVER_NAME="127.0.0.1", PORT=str(self.port), PYTHONUNBUFFERED="1",
                    GRADIO_ANALYTICS_ENABLED="False", **env)
        self.log: list[str] = []
        self.proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=full, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line.rstrip())

    def output(self) -> str:
        return "\n".join(self.log)

    def wait_ready(self, timeout: float = 600) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited ({self.proc.returncode}):\n{self.output()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the app did not start in {timeout} s:\n{self.output()[-3000:]}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def answer(client: Client, call: Call) -> dict:
    _, trace_json = client.predict(**call.args(), api_name="/generate")
    return json.loads(trace_json)


def same_answer(got: dict, ref: dict) -> bool:
    """Equal tokens and text; where the time budget stopped either run, equal over the tokens both made."""
    ids, ref_ids = [t["id"] for t in got["tokens"]], [t["id"] for t in ref["tokens"]]
    if "time budget" in (got["finish_reason"], ref["finish_reason"]):
        n = min(len(ids), len(ref_ids))
        return ids[:n] == ref_ids[:n]
    return ids == ref_ids and got["text"] == ref["text"]


def client_loop(url: str, role: str, calls: list[Call], refs: dict[str, dict], tally: Tally, stop_at: float,
                budget: list[int], seed: int) -> None:
    client = Client(url, verbose=False)
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        with tally.lock:
            if budget[0] <= 0:
                return
            budget[0] -= 1
        call = rng.choice(calls)
        start = time.monotonic()
        try:
            got = answer(client, call)
        except AppError as err:
            with tally.lock:
                if call.refused and re.search(call.refused, str(err)):
                    tally.refused += 1
                else:
                    tally.errors.append(f"{call.kind} {call.model} {call.strategy}: {err}")
            continue
        except Exception as err:  # anything else is an error of the server under load
            with tally.lock:
                tally.errors.append(f"{call.kind} {call.model} {call.strategy}: {type(err).__name__}: {err}")
            continue
        elapsed = time.monotonic() - start
        with tally.lock:
            if call.refused:
                tally.errors.append(f"hostile call served: {call}")
                continue
            tally.served += 1
            tally.by_kind[call.kind] = tally.by_kind.get(call.kind, 0) + 1
            tally.out_of_time += got["finish_reason"] == "time budget"
            if call.kind == "toy":
                tally.toy_latency.append(elapsed)
            if not same_answer(got, refs[call.key]):
                tally.mismatches.append(f"{call.kind} seed {call.seed}: {got['text']!r} != "
                                        f"{refs[call.key]['text']!r}")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def load_test(seconds: float, clients: int, max_requests: int, time_budget: str, warmups: int = 2) -> bool:
    print(f"== part 1: {clients} clients for {seconds:.0f} s (at most {max_requests} requests), loopback, "
          f"time budget {time_budget or 'the default'}")
    server = Server({"PLAYGROUND_MODEL": SMOL, **({"PLAYGROUND_TIME_BUDGET": time_budget} if time_budget else {})})
    try:
        t0 = time.monotonic()
        server.wait_ready()
        print(f"app ready in {time.monotonic() - t0:.1f} s (SmolLM2 preloaded)")
        work = workload()
        serial = Client(server.url, verbose=False)
        kinds = roles(clients)
        seeded = [call for kind, calls in work.items() if kind != "hostile" and kind in kinds for call in calls]
        refs = {call.key: answer(serial, call) for call in seeded}
        for _ in range(warmups):  # every kind again, so allocator pools settle before the first memory reading
            for call in seeded:
                answer(serial, call)
        rss_start = rss_mb(server.proc.pid)
        cut = sum(r["finish_reason"] == "time budget" for r in refs.values())
        print(f"clients' kinds: {', '.join(kinds)}")
        print(f"{len(refs)} serial references taken ({cut} stopped by the time budget); server RSS after warm-up "
              f"{rss_start:.0f} MB")
        tally, budget = Tally(), [max_requests]
        stop_at = time.monotonic() + seconds
        samples = [rss_start]

        def sample_rss() -> None:
            while time.monotonic() < stop_at:
                samples.append(rss_mb(server.proc.pid))
                time.sleep(1)

        threads = [threading.Thread(target=client_loop, args=(server.url, kind, work[kind], refs, tally, stop_at,
                                                              budget, i)) for i, kind in enumerate(kinds)]
        threads.append(threading.Thread(target=sample_rss))
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - started
        rss_end = rss_mb(server.proc.pid)
    finally:
        server.stop()
    lat = tally.toy_latency
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(tally.by_kind.items()))
    print(f"served {tally.served} requests in {wall:.0f} s ({kinds}); "
          f"hostile calls refused with their message: {tally.refused}")
    print(f"errors: {len(tally.errors)}" + "".join(f"\n  {e}" for e in tally.errors[:10]))
    print(f"short toy requests while long ones run: p50 {percentile(lat, 0.5):.2f} s, "
          f"p95 {percentile(lat, 0.95):.2f} s (n={len(lat)}; they wait in the one-model queue)")
    quarters = [samples[min(len(samples) - 1, len(samples) * q // 4)] for q in (1, 2, 3)]
    print(f"server RSS: after warm-up {rss_start:.0f} MB, at 1/4, 1/2, 3/4 of the load "
          f"{', '.join(f'{v:.0f}' for v in quarters)} MB, peak {max(samples):.0f} MB, end {rss_end:.0f} MB "
          f"(end / start = {rss_end / rss_start:.3f})")
    print(f"stopped by the time budget: {tally.out_of_time}")
    print(f"seeded answers equal to their serial reference: {tally.served - len(tally.mismatches)}/{tally.served}"
          + "".join(f"\n  {m}" for m in tally.mismatches[:10]))
    return not tally.errors and not tally.mismatches


def fault_test() -> bool:
    print("== part 2: kill the app in the middle of the SmolLM2 conversion, then start it again")
    ok = True
    with tempfile.TemporaryDirectory(prefix="pg-bench-cache-") as cache:
        env = {"PLAYGROUND_CACHE": cache, "PLAYGROUND_MODEL": SMOL}
        target = Path(cache) / "converted" / SMOL
        first = Server(env)
        t0, seen = time.monotonic(), ""
        while time.monotonic() - t0 < 600 and first.proc.poll() is None:
            tmp = list(target.parent.glob(f"{SMOL}.tmp*")) if target.parent.exists() else []
            weights = [p for d in tmp for p in d.glob("*.safetensors")]
            if weights:
                seen = f"{weights[0].name} at {weights[0].stat().st_size / 1e6:.0f} MB in {tmp[0].name}"
                break
            time.sleep(0.02)
        first.kill()
        left = sorted(p.name for p in target.parent.iterdir()) if target.parent.exists() else []
        print(f"killed after {time.monotonic() - t0:.1f} s while writing {seen or '(nothing written yet)'}; "
              f"left on disk: {left}")
        ok &= bool(seen) and not target.exists()

        second = Server(env)
        t1 = time.monotonic()
        second.wait_ready()
        converted = "dequantising" in second.output()
        sealed = seal_problem(target) is None and (target / CHECKSUMS).is_file()
        print(f"restart ready in {time.monotonic() - t1:.1f} s; converted again: {converted}; cache sealed and "
              f"sound: {sealed}; left on disk: {sorted(p.name for p in target.parent.iterdir())}")
        ok &= converted and sealed
        ok &= sorted(p.name for p in target.parent.iterdir()) == [SMOL, f"{SMOL}.lock"]  # no temporary left
        text = answer(Client(second.url, verbose=False), workload()["smol_sampling"][0])["text"]
        second.stop()

        weights = target / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
        third = Server(env)
        t2 = time.monotonic()
        third.wait_ready()
        healed = "damaged" in third.output() and "converting again" in third.output()
        again = answer(Client(third.url, verbose=False), workload()["smol_sampling"][0])["text"]
        print(f"with model.safetensors truncated to half: ready in {time.monotonic() - t2:.1f} s; rebuilt with "
              f"the progress shown: {healed}; same answer as before: {again == text}")
        print("  " + next((line for line in third.log if "damaged" in line), "(no progress line)"))
        third.stop()
        ok &= healed and again == text and seal_problem(target) is None
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--max-requests", type=int, default=4000)
    parser.add_argument("--quick", action="store_true", help="60 s of load")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--time-budget", default="", help="the server's PLAYGROUND_TIME_BUDGET (default: its own)")
    parser.add_argument("--warmups", type=int, default=2,
                        help="rounds of every seeded call before the load (memory readings need them; 0 for a smoke run)")
    args = parser.parse_args()
    ok = True
    if not args.skip_load:
        ok &= load_test(60 if args.quick else args.seconds, args.clients, args.max_requests, args.time_budget,
                        args.warmups)
    if not args.skip_faults:
        ok &= fault_test()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
