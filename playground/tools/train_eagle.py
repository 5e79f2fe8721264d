"""Train the EAGLE head of a model from scratch, reproducibly: ``python -m playground.tools.train_eagle --model toy``.

Data (all offline): the target's own sampled answers to varied prompts, plus, for a real model,
English text that ships in installed packages (docstrings and documents of the standard library
and site-packages). The target runs over every sequence once; its last hidden states f_t are the
features. The head learns f_{t+1} from (embedding of x_{t+1}, f_t + noise) with the paper's loss
(Li et al. 2024, EAGLE, section 4): SmoothL1(f̂_{t+1}, f_{t+1}) + 0.1 x cross-entropy between the
target's distribution at t+1 and the LM head's reading of f̂_{t+1}. Uniform noise U(-0.1, 0.1) on
the input features (as in the paper) makes the head robust to its own errors when it drafts on
predicted features. Fixed seed; a wall-clock cap stops training early and the record says so.

``--evaluate`` measures the head's held-out tau (tokens per target pass, greedy, on prompts the
training never saw) with the ``speculative`` strategy itself and writes it into ``head.json``.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from playground.engine import Request, run
from playground.models import ModelStore
from playground.models.dtypes import cpu_has_native_bf16
from playground.tools import eagle_data
from strategies.speculative.eagle.head import HEADS, EagleHead, load_head, save_head

NOISE = 0.1
CE_WEIGHT = 0.1
TOY_PROMPTS = [[15], [15, 1], [15, 1, 2], [15, 3], [15, 5], [15, 1, 2, 3], [15, 4], [15, 6], [15, 2]]
TOY_HELD_OUT = ["1 2", "3", "1 2 3 4", "5"]
CHAT_PROMPTS = [
    "Explain how a rainbow forms.", "Write a short poem about the sea.", "What is a prime number?",
    "Give three tips for learning to cook.", "Describe the water cycle.", "Why do cats purr?",
    "How does a bicycle stay upright?", "Summarise the plot of a fairy tale.", "What is gravity?",
    "List some uses of a paperclip.", "How do plants make food?", "Tell me about the moon.",
    "What makes a good friend?", "Explain what a computer program is.", "Why is the sky blue?",
    "Describe a busy market in the morning.", "How do bees make honey?", "What is democracy?",
    "Give advice for a job interview.", "Explain how vaccines work.", "What is a black hole?",
    "Write a recipe for pancakes.", "How do airplanes fly?", "What is the internet?",
]
CHAT_HELD_OUT = ["Why do leaves change colour in autumn?", "How does a refrigerator keep food cold?",
                 "What are the benefits of reading books?", "Explain how a compass works."]


def sampled_answers(lm: Any, prompts: list[list[int]], per_prompt: int, length: int, seed: int) -> list[list[int]]:
    """The target's own answers: prompt + ``length`` tokens sampled at temperature 1."""
    torch.manual_seed(seed)
    out: list[list[int]] = []
    for ids in prompts:
        batch = torch.tensor([ids] * per_prompt, device=lm.device)
        with torch.inference_mode():
            seqs = lm.model.generate(batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=length, min_new_tokens=length,
                                     pad_token_id=min(lm.eos_ids))
        out.extend(s.tolist() for s in seqs)
    return out


def sequences(lm: Any, quick: bool, seed: int, prompts: int = 1600, answer_tokens: int = 128,
              doc_chars: int = 3_000_000) -> tuple[list[list[int]], dict[str, Any]]:
    if lm.key == "toy":
        seqs = sampled_answers(lm, TOY_PROMPTS, 64, 24, seed)
        return seqs, {"sampled_answers": len(seqs), "prompts": len(TOY_PROMPTS), "tokens_each": 24}
    if quick:
        prompts, answer_tokens, doc_chars = 8, 16, 20_000
    return eagle_data.cached(lm, CHAT_HELD_OUT, prompts, answer_tokens, doc_chars, seed)


def features(lm: Any, seqs: list[list[int]], batch_tokens: int = 4096) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids [L], last hidden states [L, d]) per sequence, from one target pass each, kept in float32.

    Sequences of equal length share a pass. ``lm`` may be the target in bfloat16 (what a CPU with
    native bfloat16 runs fastest; the features then are those the head reads at run time there)."""
    out: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # sequence index -> its pair
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(seqs):
        by_length.setdefault(len(ids), []).append(i)
    for length, members in by_length.items():
        rows = max(1, batch_tokens // length)
        for j in range(0, len(members), rows):
            group = members[j:j + rows]
            batch = torch.tensor([seqs[i] for i in group], device=lm.device)
            with torch.inference_mode():  # the decoder alone: its last state is what the LM head reads
                hidden = lm.model.get_decoder()(input_ids=batch).last_hidden_state.float()
            for row, i in enumerate(group):  # cloned outside inference mode: trainable input
                out[i] = (torch.tensor(seqs[i]), hidden[row].clone())
    return [out[i] for i in range(len(seqs))]


def frequency_order(seqs: list[list[int]], vocab_size: int) -> tuple[list[int], torch.Tensor]:
    """Every token id, most frequent in ``seqs`` first (ties by id): the draft vocabulary's ranking;
    and the counts."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids in seqs:
        counts += torch.bincount(torch.tensor(ids), minlength=vocab_size)
    return sorted(range(vocab_size), key=lambda i: (-int(counts[i]), i)), counts


def batches(data: list[tuple[torch.Tensor, torch.Tensor]], batch_tokens: int, rng: random.Random
            ) -> list[list[int]]:
    """One epoch: indices shuffled, grouped by similar length into batches of about ``batch_tokens``."""
    order = list(range(len(data)))
    rng.shuffle(order)
    out: list[list[int]] = []
    for j in range(0, len(order), 512):
        chunk = sorted(order[j:j + 512], key=lambda i: len(data[i][0]))
        current: list[int] = []
        for i in chunk:
            if current and (len(current) + 1) * len(data[i][0]) > batch_tokens:
                out.append(current)
                current = []
            current.append(i)
        if current:
            out.append(current)
    rng.shuffle(out)
    return out


def unrolled(head: EagleHead, emb: torch.Tensor, feats: torch.Tensor, unroll: int) -> list[torch.Tensor]:
    """The head's predictions [B, W - s + 1, d] for each drafting step s = 1..``unroll`` over a batch of
    embeddings of x_{t+1} and features f_t [B, W, .]: step 1 reads ``feats``; step s > 1 at index t reads
    step s - 1's prediction at t and the embedding of x_{t+s}, sees the step-1 entries up to t and its
    own chain's entries at t (a 4D mask over one KV cache), at position t + s - 1, and predicts f_{t+s}:
    what the head computes when it drafts s deep after a cache of real features up to t."""
    width = emb.shape[1]
    cache = head.new_cache() if unroll > 1 else None
    pred, cache = head(emb, feats, cache)
    out = [pred]
    for step in range(2, unroll + 1):
        m = width - step + 1  # positions whose step-s target exists
        if m < 1:
            break
        keys = cache.get_seq_length()
        t = torch.arange(m)
        allowed = torch.zeros(m, keys + m, dtype=torch.bool)
        allowed[:, :width] = t[:, None] >= torch.arange(width)[None, :]
        for r in range(2, step + 1):  # step r's entry at t: this chain's ancestor (r < step), or itself
            allowed[t, width + sum(width - q + 1 for q in range(2, r)) + t] = True
        additive = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
        positions = (t + step - 1).unsqueeze(0).expand(emb.shape[0], m)
        pred, cache = head(emb[:, step - 1:step - 1 + m], pred[:, :m], cache,
                           additive[None, None].expand(emb.shape[0], 1, m, keys + m), positions)
        out.append(pred)
    return out


def loss_terms(head: EagleHead, lm: Any, data: list[tuple[torch.Tensor, torch.Tensor]], batch: list[int],
               vocab: torch.Tensor | None, g: torch.Generator, unroll: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """SmoothL1 on the feature and cross-entropy against the target's distribution over the draft
    vocabulary (``vocab``; None is the whole one), for a right-padded batch of sequences; each the
    mean over the ``unroll`` drafting steps.

    Step 1 reads the target's features (with noise), as the head does for the first draft. Step s > 1
    reads the head's own prediction of step s - 1 at each position, as it does deeper in a tree (the
    "training-time test" of EAGLE-3, Li et al. 2025): its query at index t sees the step-1 entries up to
    t (the head's cache of real features when it drafts) and its own chain's entries at t, through a 4D
    mask over the step-1 cache, at position t + s - 1; it predicts f_{t+s}.
    Right padding is exact for the causal head: a real position never sees a later one."""
    embed, lm_head = lm.model.get_input_embeddings(), lm.model.get_output_embeddings()
    weight = lm_head.weight if vocab is None else lm_head.weight[vocab]
    width = max(len(data[i][0]) for i in batch) - 1
    d = data[batch[0]][1].shape[-1]
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    inputs = torch.zeros(len(batch), width, d)
    targets = torch.zeros(len(batch), width, d)
    mask = torch.zeros(len(batch), width, dtype=torch.bool)
    for row, i in enumerate(batch):
        seq, feats = data[i]
        n = len(seq) - 1
        ids[row, :n], inputs[row, :n], targets[row, :n], mask[row, :n] = seq[1:], feats[:-1], feats[1:], True
    with torch.no_grad():
        emb = embed(ids.to(lm.device)).float()
    noisy = inputs + (torch.rand(inputs.shape, generator=g) * 2 - 1) * NOISE
    regs, ces = [], []
    for step, pred in enumerate(unrolled(head, emb, noisy, unroll), start=1):
        here = mask[:, step - 1:]
        goal = targets[:, step - 1:][here]
        with torch.no_grad():
            target_p = (goal @ weight.float().T).softmax(-1)
        got = pred[here]
        regs.append(nn.functional.smooth_l1_loss(got, goal))
        ces.append(-(target_p * (got @ weight.float().T).log_softmax(-1)).sum(-1).mean())
    reg, ce = sum(regs) / len(regs), sum(ces) / len(ces)
    assert isinstance(reg, torch.Tensor) and isinstance(ce, torch.Tensor)  # sums of at least one step's losses
    return reg, ce


def train(lm: Any, data: list[tuple[torch.Tensor, torch.Tensor]], epochs: int, lr: float, cap_seconds: float,
          seed: int, vocab: torch.Tensor | None, batch_tokens: int, autocast: bool = False, log: Any = print,
          init: dict[str, torch.Tensor] | None = None, unroll: int = 1) -> tuple[EagleHead, dict[str, Any]]:
    """AdamW, linear warm-up then cosine decay to a tenth over the planned steps; stops at the cap.
    ``autocast``: matrix products in bfloat16 (weights and optimiser stay float32). ``init``: the
    weights to start from (a head trained before), else a fresh head."""
    import math
    torch.manual_seed(seed)
    head = EagleHead(lm.model.config).float().train()
    if init is not None:
        head.load_state_dict({k: v for k, v in init.items() if k != "draft_ids"}, strict=False)
    for p in lm.model.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(head.parameters(), lr=lr)
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    plan = [batches(data, batch_tokens, rng) for _ in range(epochs)]
    planned = sum(map(len, plan))
    warm = min(200, planned // 10 + 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, s / planned)))))
    start, done, history = time.perf_counter(), 0, []
    for batch in (b for epoch in plan for b in epoch):
        if time.perf_counter() - start > cap_seconds:
            break
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            reg, ce = loss_terms(head, lm, data, batch, vocab, g, unroll)
            loss = reg + CE_WEIGHT * ce
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        done += 1
        history.append((float(reg.detach()), float(ce.detach())))
        if done % 50 == 0:
            tail = history[-50:]
            log(f"step {done}/{planned} {time.perf_counter() - start:.0f} s smooth_l1 "
                f"{sum(r for r, _ in tail) / 50:.4f} ce {sum(c for _, c in tail) / 50:.3f}")
    tail = history[-50:]
    seconds = round(time.perf_counter() - start, 1)
    return head.eval(), {"epochs": epochs, "steps": done, "steps_planned": planned, "batch_tokens": batch_tokens,
                         "lr": lr, "autocast_bfloat16": autocast, "unroll": unroll, "schedule": f"linear warm-up {warm} steps, cosine to 0.1 x lr",
                         "seconds": seconds, "capped": done < planned,
                         "final_smooth_l1": round(sum(r for r, _ in tail) / len(tail), 5),
                         "final_ce": round(sum(c for _, c in tail) / len(tail), 4),
                         "losses_averaged_over_last": len(tail)}


def held_out_tau(store: Any, key: str, prompts: list[str], tokens: int, **params: Any) -> float:
    """Mean tokens per target verification pass of greedy EAGLE on prompts the training never saw."""
    produced = rounds = 0
    for prompt in prompts:
        trace = run(store, Request(key, "speculative", prompt, {"draft": "eagle", "temperature": 0.0,
                                                                "measure_baseline": False, **params},
                                   seed=0, max_new_tokens=tokens))
        produced += len(trace.tokens)
        rounds += trace.extra["speculative"]["rounds"]
    return round(produced / rounds, 4)


ACCEPTANCE_TREE = (5, 3)  # static depth x branching whose rounds measure acceptance by depth and rank


def acceptance_by_depth(traces: list[Any], depth: int, branching: int) -> dict[str, Any]:
    """From greedy static-tree rounds: at each depth, how often it was reached (its parent accepted)
    and at which sibling rank the target's token was found (children are drafted most probable first)."""
    reached = [0] * depth
    hits = [[0] * branching for _ in range(depth)]
    for trace in traces:
        for r in trace.rounds:
            nodes = r["tree"]
            for d in range(1, depth + 1):
                parent = r["path"][d - 1] if d - 1 < len(r["path"]) else None
                if parent is None:
                    break
                kids = [n["node"] for n in nodes if n["parent"] == parent]
                if not kids:
                    break
                reached[d - 1] += 1
                chosen = r["path"][d] if d < len(r["path"]) else None
                if chosen in kids:
                    hits[d - 1][kids.index(chosen)] += 1
    return {"tree": f"static depth {depth} branching {branching}", "reached": reached, "rank_hits": hits}


def evaluate(store: Any, lm: Any, root: Path) -> None:
    """Held-out tau (static 4 x 2, the record the guard test reads), tau by draft vocabulary size, and
    acceptance by depth and rank, all greedy on the held-out prompts, into ``head.json``."""
    head, record = load_head(lm, root)
    toy = lm.key == "toy"
    held_out, tokens = (TOY_HELD_OUT, 16) if toy else (CHAT_HELD_OUT, 48)
    record["held_out"] = {"prompts": held_out, "max_new_tokens": tokens, "temperature": 0.0,
                          "tree": "static depth 4 branching 2",
                          "tau": held_out_tau(store, lm.key, held_out, tokens, eagle_depth=4, eagle_branching=2)}
    if head.draft_ids is not None:
        sizes = [n for n in (8192, 16384, 32768) if n < head.draft_ids.numel()] + [0, -1]
        record["held_out"]["tau_by_draft_vocab"] = {
            str(n): held_out_tau(store, lm.key, held_out, tokens, eagle_depth=4, eagle_branching=2, eagle_vocab=n)
            for n in sizes}
    depth, branching = ACCEPTANCE_TREE
    traces = [run(store, Request(lm.key, "speculative", p, {"draft": "eagle", "temperature": 0.0,
                                                            "measure_baseline": False, "eagle_depth": depth,
                                                            "eagle_branching": branching}, seed=0,
                                 max_new_tokens=tokens)) for p in held_out]
    record["held_out"]["acceptance"] = acceptance_by_depth(traces, depth, branching)
    (root / lm.key / "head.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["held_out"]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="toy")
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--cap-minutes", type=float, default=55.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a few sequences and steps (a smoke test)")
    ap.add_argument("--prompts", type=int, default=1600, help="chat prompts the target answers")
    ap.add_argument("--answer-tokens", type=int, default=128, help="most tokens of each answer")
    ap.add_argument("--doc-chars", type=int, default=3_000_000, help="characters of standard-library docstrings")
    ap.add_argument("--draft-vocab", type=int, default=None,
                    help="the head drafts only the N most frequent tokens of its training data (0: all)")
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--init", type=Path, default=None,
                    help="start from the head under this folder (a first stage), keeping its draft vocabulary")
    ap.add_argument("--only-answers", action="store_true", help="train on the chat answers alone")
    ap.add_argument("--unroll", type=int, default=1,
                    help="drafting steps each position trains (2+: later steps read the head's own predictions)")
    ap.add_argument("--evaluate", action="store_true", help="only measure held-out tau into head.json")
    ap.add_argument("--out", type=Path, default=HEADS)
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    store = ModelStore("cpu")
    lm = store.get(args.model)
    toy = args.model == "toy"
    if args.evaluate:
        evaluate(store, lm, args.out)
        return
    seqs, data_record = sequences(lm, args.quick, args.seed, args.prompts, args.answer_tokens, args.doc_chars)
    if args.only_answers:  # a second stage: the chat answers alone, after a head trained on all the data
        seqs = seqs[:data_record["chat_prompts"]]
        data_record = {**data_record, "used": "the chat answers only"}
    init, before = None, None
    if args.init:
        from safetensors.torch import load_file
        init = load_file(str(args.init / lm.key / "head.safetensors"))
        before = json.loads((args.init / lm.key / "head.json").read_text())
    t0 = time.perf_counter()
    fast = not toy and cpu_has_native_bf16()
    data = features(lm.with_weights("bfloat16") if fast else lm, seqs, 2048)
    data_record.update(sequences=len(data), tokens=sum(len(i) for i, _ in data),
                       feature_weights="bfloat16" if fast else lm.weights,
                       feature_seconds=round(time.perf_counter() - t0, 1))
    order, counts = frequency_order(seqs, lm.vocab_size)
    size = args.draft_vocab if args.draft_vocab is not None else (0 if toy else 32768)
    vocab = torch.tensor(order[:size]) if 0 < size < lm.vocab_size else None
    if init is not None and "draft_ids" in init:  # the first stage's map stays: the head drafts what it learnt
        vocab, size = init["draft_ids"], int(init["draft_ids"].numel())
    epochs = args.epochs or (1 if args.quick else 60 if toy else 3)
    lr = args.lr or (3e-3 if toy else 5e-4)
    log = lambda m: print(m, flush=True)  # noqa: E731
    log(f"{len(data)} sequences, {data_record['tokens']} tokens; training {epochs} epochs")
    head, fit = train(lm, data, epochs, lr, args.cap_minutes * 60, args.seed, vocab, args.batch_tokens, fast, log,
                      init, args.unroll)
    seen = int((counts > 0).sum())
    draft_vocabulary = ({"size": lm.vocab_size, "kind": "full (the target's own LM head)"} if vocab is None else
                        {"size": size, "kind": "the most frequent tokens of the training data, most frequent first",
                         "map": "draft_ids in head.safetensors: draft index -> target id",
                         "distinct_tokens_in_data": seen,
                         "data_mass_covered": round(float(counts[vocab].sum() / counts.sum()), 5)})
    if vocab is not None:
        head.set_draft_ids(vocab)
    if before is not None:  # the first stage's map and counts describe the vocabulary
        draft_vocabulary = before["draft_vocabulary"]
    record = {"model": lm.key, "seed": args.seed, "data": data_record, "training": fit,
              "loss": f"smooth_l1(feature) + {CE_WEIGHT} x cross_entropy(target distribution over the draft "
                      f"vocabulary), noise U(-{NOISE}, {NOISE})"
                      + (f"; each the mean over {args.unroll} drafting steps, steps after the first reading "
                         "the head's own predicted features" if args.unroll > 1 else ""),
              "draft_vocabulary": draft_vocabulary,
              "command": f"python -m playground.tools.train_eagle --model {lm.key} --epochs {epochs} --lr {lr} "
                         f"--cap-minutes {args.cap_minutes} --prompts {args.prompts} "
                         f"--answer-tokens {args.answer_tokens} --doc-chars {args.doc_chars} "
                         f"--draft-vocab {size} --batch-tokens {args.batch_tokens} --seed {args.seed}"
                         + (f" --unroll {args.unroll}" if args.unroll > 1 else "")
                         + (" --quick" if args.quick else "")
                         + (f" --init {args.init} --only-answers" if args.init and args.only_answers else
                            f" --init {args.init}" if args.init else "")}
    if before is not None:  # every earlier stage, first to last, with its data, training and command
        stage = {k: before[k] for k in ("data", "training", "command") if k in before}
        earlier = before.get("earlier_stages") or ([before["first_stage"]] if "first_stage" in before else [])
        record["first_stage"] = earlier[0] if earlier else stage
        record["earlier_stages"] = earlier + [stage]
    folder = save_head(head, lm.key, record, args.out)
    print(json.dumps(record))
    print(f"saved to {folder}")


if __name__ == "__main__":
    main()
