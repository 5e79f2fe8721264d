"""Where one decode step's time goes, per model and weights, beside llama.cpp's step on the same file.

For each model and weights type, after a prompt: one-token forward steps are timed plain (the
reference), then the same steps run under torch's profiler, whose self times of the long kernels give
the parts that are arithmetic:

- the layers' matrix products: the 4-bit kernel (``_weight_int4pack_mm_for_cpu``) or dense ``mm``;
- the LM head: the same products whose output is the vocabulary;
- attention (``scaled_dot_product_attention``'s kernels);
- everything else: the norms, RoPE, activations, residual adds, casts and cache writes, and Python and
  dispatch between the operations, as the plain step's time less the three parts above (the
  profiler's own cost per operation would swamp these short ones; the long kernels themselves run a
  little slower under it, so where they fill the step this part reads 0). The line under it counts the
  step's operations and what that many operations on one-element tensors cost: the floor of the
  dispatch alone.

Then the decoder's whole step (``playground.engine``'s greedy run: the forward, the sampling chain and
its records) per token, from two runs that differ only in their number of tokens, so the prompt's pass
cancels; its excess over the forward step is the chain and the records. Then one pass over 8 new
tokens (a speculative round's verification) in steps, with the share of that pass in the matrix
products. With ``--llamacpp``,
llama.cpp's time per token on the same GGUF file and threads (``bench/bench_llamacpp.py``'s worker:
64 greedy tokens after the same prompt, prompt included, as that bench compares).

    .venv/bin/python bench/bench_step.py [--models smollm2-135m,gemma3-270m] [--dtypes int4,float32]
                                         [--steps 20] [--threads 2] [--llamacpp] [--isa avx2] [--quick]

``--quick``: the toy in float32, 4 steps (what the tests run). Prints a table per model and weights
and, for each, the line ``step profile <model> <weights>: step X ms, rest/step R`` (R: the share of
the step outside any operation).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playground.engine import Request, in_dtype, run  # noqa: E402
from playground.models import ModelStore  # noqa: E402

PROMPTS = {"toy": "once upon a time", "default": "Write a long, detailed story about a dragon who learns to bake bread."}


def prompt_of(key: str) -> str:
    return PROMPTS.get(key, PROMPTS["default"])
PARTS = ("layer products", "LM head", "attention")
REST = "norms, RoPE, activations, copies, Python and dispatch"


def part_of(name: str, shapes: list[Any], vocab: int) -> str | None:
    """Which arithmetic part of a step an operation's self time belongs to (None: the rest)."""
    if name == "aten::_weight_int4pack_mm_for_cpu":  # inputs: x [M, K], packed, group, scales [K/32, N, 2]
        return "LM head" if len(shapes) > 3 and len(shapes[3]) == 3 and shapes[3][1] == vocab else "layer products"
    if name in ("aten::mm", "aten::addmm", "aten::bmm"):  # x [M, K] @ w.T [K, N]
        n = shapes[1][-1] if len(shapes) > 1 and shapes[1] else None
        return "LM head" if n == vocab else "layer products"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    return None


def step_profile(lm: Any, steps: int) -> tuple[float, dict[str, float], int]:
    """(plain step seconds, ms per step of each part, operations per step) for one-token steps after
    the model's prompt."""
    ids = torch.tensor([lm.encode(prompt_of(lm.key))], device=lm.device)
    token = torch.tensor([[int(ids[0, -1])]], device=lm.device)
    cache = lm.forward(ids).cache
    vocab = lm.forward(token, cache).logits.shape[-1]
    cache.crop(-1)

    def one() -> None:
        lm.forward(token, cache)
        cache.crop(-1)  # the next call is the same step again

    step = median_seconds(one, steps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            one()
    parts: dict[str, float] = defaultdict(float)
    for event in prof.key_averages(group_by_input_shape=True):
        part = part_of(event.key, list(event.input_shapes or []), vocab)
        if part is not None:
            parts[part] += event.self_cpu_time_total / 1e3 / steps
    parts[REST] = max(0.0, step * 1e3 - sum(parts.values()))
    operations = sum(1 for e in prof.events() if e.cpu_parent is None and e.name.startswith("aten::")) // steps
    return step, dict(parts), operations


def verify_profile(lm: Any, steps: int, tokens: int = 8) -> tuple[float, float, float]:
    """(seconds of one pass over ``tokens`` new tokens, of a one-token step, and the share of the
    pass in the matrix products): what a speculative round's verification costs, and where."""
    ids = torch.tensor([lm.encode(prompt_of(lm.key))], device=lm.device)
    cache = lm.forward(ids).cache

    def passes(n: int) -> Any:
        block = torch.full((1, n), int(ids[0, -1]), device=lm.device)

        def go() -> None:
            lm.forward(block, cache)
            cache.crop(-n)
        return go

    one, many = median_seconds(passes(1), steps), median_seconds(passes(tokens), steps)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            passes(tokens)()
    products = sum(e.self_cpu_time_total for e in prof.key_averages()
                   if e.key in ("aten::_weight_int4pack_mm_for_cpu", "aten::mm", "aten::addmm")) / 3e6
    return many, one, products / many


def median_seconds(fn: Any, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tiny_operation_seconds() -> float:
    """One operation on one-element tensors (a multiply into a new tensor): dispatch and little else."""
    a, b = torch.ones(1), torch.ones(1)
    return median_seconds(lambda: [a * b for _ in range(100)], 20) / 100


def decoder_step(store: ModelStore, key: str, dtype: str, repeats: int) -> float:
    """Seconds per token of the engine's greedy run (forward, chain and records), the prompt's pass cancelled."""
    def timed(n: int) -> tuple[float, int]:
        trace = run(store, Request(key, "greedy", prompt_of(key), {}, max_new_tokens=n, dtype=dtype))
        return trace.timing.seconds, len(trace.tokens)

    timed(4)  # warm-up
    per_token = []
    for _ in range(repeats):
        (short, n_short), (long, n_long) = timed(8), timed(40)
        # a run that ended early (an end of text) has no second point: its own seconds a token
        per_token.append((long - short) / (n_long - n_short) if n_long > n_short else long / n_long)
    return statistics.median(per_token)


def llamacpp_step(key: str, threads: int, isa: str) -> float:
    """llama.cpp's seconds per token on the model's GGUF file (bench_llamacpp's worker, greedy)."""
    from bench_llamacpp import LlamaCpp, llama_cpp_worker

    from playground import models
    cpp = LlamaCpp(models.gguf_path(key), threads, isa, llama_cpp_worker(isa))
    try:
        prompt_ids = models.ModelStore("cpu").get(key).encode(prompt_of(key))
        cpp.tokens_per_second(prompt_ids, 4, False)
        return 1 / statistics.median(cpp.tokens_per_second(prompt_ids, 64, False) for _ in range(3))
    finally:
        cpp.close()


def report(store: ModelStore, key: str, dtype: str, args: argparse.Namespace) -> None:
    lm = in_dtype(store.get(key), dtype)
    with torch.inference_mode():
        step, parts, operations = step_profile(lm, args.steps)
        tiny = tiny_operation_seconds()
    whole = max(step, decoder_step(store, key, dtype, 3))
    rows = [(part, parts.get(part, 0.0)) for part in (*PARTS, REST)]
    rows.append(("sampling chain and records (decoder's step - forward)", max(0.0, whole - step) * 1e3))
    print(f"\n{key} {lm.weights}, {args.threads} threads: forward step {step * 1e3:.1f} ms, decoder's step "
          f"{whole * 1e3:.1f} ms a token")
    for part, ms in rows:
        print(f"  {part:56s} {ms:7.2f} ms  {ms / (whole * 1e3):6.1%}")
    print(f"  ({operations} operations a step; as many on one-element tensors take {operations * tiny * 1e3:.2f} ms)")
    with torch.inference_mode():
        many, one, share = verify_profile(lm, args.steps)
    print(f"  verify 8 tokens in one pass: {many / one:.2f} steps, {share:.0%} of it in the matrix products")
    if args.llamacpp:
        theirs = llamacpp_step(key, args.threads, args.isa)
        print(f"  {'llama.cpp, a token (same file and threads)':56s} {theirs * 1e3:7.2f} ms  "
              f"ours / theirs {whole / theirs:.2f}")
    rest = parts[REST] / (step * 1e3)
    print(f"step profile {key} {lm.weights}: step {step * 1e3:.1f} ms, rest/step {rest:.3f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--dtypes", default="int4,float32")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llamacpp", action="store_true", help="also llama.cpp's time a token (builds it on first use)")
    ap.add_argument("--isa", choices=["native", "avx2"], default="native",
                    help="avx2: both sides as on a CPU with AVX2 only (bench_llamacpp's --isa)")
    ap.add_argument("--quick", action="store_true", help="the toy in float32, 4 steps")
    args = ap.parse_args()
    if args.isa == "avx2":
        from bench_llamacpp import as_on_avx2
        as_on_avx2()
    torch.set_num_threads(args.threads)
    store = ModelStore("cpu")
    if args.quick:
        args.steps, args.llamacpp = 4, False
        report(store, "toy", "float32", args)
        return
    for key in args.models.split(","):
        for dtype in args.dtypes.split(","):
            report(store, key, dtype, args)


if __name__ == "__main__":
    main()
