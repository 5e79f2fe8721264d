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


def package_text(limit_chars: int) -> list[str]:
    """English paragraphs from the docstrings of installed Python modules, in a fixed order."""
    import ast
    import sysconfig
    texts: list[str] = []
    total = 0
    for folder in (Path(sysconfig.get_paths()["stdlib"]),):
        for path in sorted(folder.rglob("*.py")):
            if "test" in path.parts or total >= limit_chars:
                continue
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, OSError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                    doc = ast.get_docstring(node)
                    if doc and len(doc) > 300 and doc.isascii():
                        texts.append(" ".join(doc.split()))
                        total += len(texts[-1])
    return texts


def sampled_answers(lm: Any, prompts: list[list[int]], per_prompt: int, length: int, seed: int) -> list[list[int]]:
    """The target's own answers: prompt + ``length`` tokens sampled at temperature 1."""
    torch.manual_seed(seed)
    out = []
    for ids in prompts:
        batch = torch.tensor([ids] * per_prompt, device=lm.device)
        with torch.inference_mode():
            seqs = lm.model.generate(batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=length, min_new_tokens=length,
                                     pad_token_id=min(lm.eos_ids))
        out.extend(s.tolist() for s in seqs)
    return out


def sequences(lm: Any, quick: bool, seed: int, answers_per_prompt: int = 4, doc_chars: int = 200_000
              ) -> tuple[list[list[int]], dict[str, Any]]:
    if lm.key == "toy":
        seqs = sampled_answers(lm, TOY_PROMPTS, 64, 24, seed)
        return seqs, {"sampled_answers": len(seqs), "prompts": len(TOY_PROMPTS), "tokens_each": 24}
    prompts = [lm.encode(p) for p in CHAT_PROMPTS[: 4 if quick else None]]
    answers = sampled_answers(lm, prompts, 2 if quick else answers_per_prompt, 64, seed)
    texts = package_text(20_000 if quick else doc_chars)
    docs = [lm.tokenizer(t)["input_ids"][:128] for t in texts]
    return answers + docs, {"sampled_answers": len(answers), "chat_prompts": len(prompts), "answer_tokens": 64,
                            "stdlib_docstrings": len(docs), "max_doc_tokens": 128}


def features(lm: Any, seqs: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(ids [L], last hidden states [L, d]) per sequence, from one target pass each."""
    out = []
    for ids in seqs:
        hidden = lm.forward(torch.tensor([ids], device=lm.device), hidden=True).hidden_states[-1][0]
        out.append((torch.tensor(ids), hidden.float().clone()))  # cloned outside inference mode: trainable input
    return out


def loss_terms(head: EagleHead, lm: Any, ids: torch.Tensor, feats: torch.Tensor, g: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """SmoothL1 on the feature and cross-entropy against the target's distribution, one sequence."""
    embed, lm_head = lm.model.get_input_embeddings(), lm.model.get_output_embeddings()
    with torch.no_grad():
        emb = embed(ids[1:].to(lm.device)).float()
        target_logp = lm_head(feats[1:]).float().log_softmax(-1)
    noisy = feats[:-1] + (torch.rand(feats[:-1].shape, generator=g) * 2 - 1) * NOISE
    pred, _ = head(emb.unsqueeze(0), noisy.unsqueeze(0))
    pred = pred[0]
    reg = nn.functional.smooth_l1_loss(pred, feats[1:])
    ce = -(target_logp.exp() * lm_head(pred).float().log_softmax(-1)).sum(-1).mean()
    return reg, ce


def train(lm: Any, data: list[tuple[torch.Tensor, torch.Tensor]], steps: int, lr: float, cap_seconds: float,
          seed: int) -> tuple[EagleHead, dict[str, Any]]:
    torch.manual_seed(seed)
    head = EagleHead(lm.model.config).float().train()
    for p in lm.model.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW(head.parameters(), lr=lr)
    order = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    start, done, history = time.perf_counter(), 0, []
    for step in range(steps):
        if time.perf_counter() - start > cap_seconds:
            break
        ids, feats = data[order.randrange(len(data))]
        reg, ce = loss_terms(head, lm, ids, feats, g)
        loss = reg + CE_WEIGHT * ce
        opt.zero_grad()
        loss.backward()
        opt.step()
        done = step + 1
        history.append((float(reg.detach()), float(ce.detach())))
    tail = history[-50:]
    seconds = round(time.perf_counter() - start, 1)
    return head.eval(), {"steps": done, "steps_planned": steps, "lr": lr, "seconds": seconds,
                         "capped": done < steps, "final_smooth_l1": round(sum(r for r, _ in tail) / len(tail), 5),
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="toy")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--cap-minutes", type=float, default=55.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a few sequences and steps (a smoke test)")
    ap.add_argument("--answers-per-prompt", type=int, default=4, help="sampled answers per chat prompt")
    ap.add_argument("--doc-chars", type=int, default=200_000, help="characters of standard-library docstrings")
    ap.add_argument("--evaluate", action="store_true", help="only measure held-out tau into head.json")
    ap.add_argument("--out", type=Path, default=HEADS)
    args = ap.parse_args(argv)
    store = ModelStore("cpu")
    lm = store.get(args.model)
    held_out = TOY_HELD_OUT if args.model == "toy" else CHAT_HELD_OUT
    tokens = 16 if args.model == "toy" else 48
    if args.evaluate:
        _, record = load_head(lm, args.out)
        record["held_out"] = {"prompts": held_out, "max_new_tokens": tokens, "temperature": 0.0,
                              "tree": "static depth 4 branching 2",
                              "tau": held_out_tau(store, lm.key, held_out, tokens, eagle_depth=4, eagle_branching=2)}
        (args.out / lm.key / "head.json").write_text(json.dumps(record, indent=1) + "\n")
        print(json.dumps(record["held_out"]))
        return
    seqs, data_record = sequences(lm, args.quick, args.seed, args.answers_per_prompt, args.doc_chars)
    t0 = time.perf_counter()
    data = features(lm, seqs)
    data_record.update(sequences=len(data), tokens=sum(len(i) for i, _ in data),
                       feature_seconds=round(time.perf_counter() - t0, 1))
    steps = args.steps or (20 if args.quick else 1500 if args.model == "toy" else 20000)
    lr = args.lr or (3e-3 if args.model == "toy" else 5e-4)
    head, fit = train(lm, data, steps, lr, args.cap_minutes * 60, args.seed)
    record = {"model": lm.key, "seed": args.seed, "data": data_record, "training": fit,
              "loss": f"smooth_l1(feature) + {CE_WEIGHT} x cross_entropy(target distribution), "
                      f"noise U(-{NOISE}, {NOISE})",
              "draft_vocabulary": "full (the target's own LM head)",
              "command": f"python -m playground.tools.train_eagle --model {lm.key} --steps {steps} --lr {lr} "
                         f"--cap-minutes {args.cap_minutes} --answers-per-prompt {args.answers_per_prompt} "
                         f"--doc-chars {args.doc_chars} --seed {args.seed}"}
    folder = save_head(head, lm.key, record, args.out)
    print(json.dumps(record))
    print(f"saved to {folder}")


if __name__ == "__main__":
    main()
