"""The toy models: tiny GPT-2s trained on data whose ground truth is known.

``toy`` and ``toy-small`` learn the course notes' two-path data. Rows are
``1 2 3 4 5 6 7 8 <eos>`` (70%) or ``1 2 9 10 11 12 7 8 <eos>`` (30%), so after the prompt
``1 2`` the true next-token distribution is 0.7 on token 3 and 0.3 on token 9, and everything
after the branch is determined. That known ground truth is what tests and demos lean on.

``toy-think`` learns to think before it answers: after ``a + b =`` (a and b in 0..9) it counts
up from a, b steps, between ``<think>`` and ``</think>``, then writes the last number it counted,
which is the sum: ``3 + 4 = <think> 4 5 6 7 </think> 7 <eos>``. Its answer is read off its
thinking, so a thinking cut short (``</think>`` forced early) gives the wrong sum: cut after k of
the b counts, it mostly answers ``a + k``. Its numbers are words whose token ids are the numbers
themselves (id 7 is ``7``); ``<think>`` and ``</think>`` are one token each.

    python -m playground.tools.toy                    # retrains all three into assets/
    python -m playground.tools.toy --only toy-think   # one of them

Training is seeded and takes seconds on a CPU: a rerun on the same torch writes the same bytes; another
torch can differ in the last bits (toy and toy-small as committed came from an earlier torch, so
``--only`` retrains one toy without touching the others).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from playground import ASSETS

# Readable names for the 16 ids, so charts read as words. Index = token id.
WORDS = ["<eos>", "once", "upon", "a", "time", "there", "lived", "happily", "ever",
         "the", "hill", "rose", "high", "<pad>", "<unk>", "<bos>"]
PATH_A = [1, 2, 3, 4, 5, 6, 7, 8, 0]
PATH_B = [1, 2, 9, 10, 11, 12, 7, 8, 0]

SIZES = {
    # key: (d_model, layers, heads, training steps)
    "toy": (32, 2, 2, 400),
    "toy-small": (8, 1, 1, 40),
}

# toy-think: a and b in 0..9, so the numbers run to 18; a number's token id is the number.
THINK_OPERANDS = range(10)
THINK_WORDS = [str(n) for n in range(2 * THINK_OPERANDS[-1] + 1)] + [
    "+", "=", "<think>", "</think>", "<eos>", "<pad>", "<unk>", "<bos>"]
THINK_TAGS = ("<think>", "</think>")  # one token each, kept in the decoded text
THINK_SIZE = (32, 2, 2, 300)  # d_model, layers, heads, training steps
THINK_ID = {w: i for i, w in enumerate(THINK_WORDS)}
THINK_LENGTH = 4 + 1 + THINK_OPERANDS[-1] + 1 + 2  # the longest row: a + b = <think> b counts </think> sum <eos>


def two_path_rows(n: int = 800) -> torch.Tensor:
    """The notes' data: row i takes path A when i % 10 < 7 (70%), else path B."""
    return torch.tensor([PATH_A if i % 10 < 7 else PATH_B for i in range(n)])


def think_prompt(a: int, b: int) -> list[int]:
    """The ids of ``a + b =``."""
    return [a, THINK_ID["+"], b, THINK_ID["="]]


def think_row(a: int, b: int, counts: int | None = None) -> list[int]:
    """``a + b = <think> a+1 ... a+b </think> a+b <eos>`` as ids. ``counts`` cuts the thinking after that
    many numbers; the answer is then the last number counted (a when none), as toy-think answers."""
    counted = [a + i for i in range(1, b + 1)][:counts]
    answer = counted[-1] if counted else a
    return [*think_prompt(a, b), THINK_ID["<think>"], *counted, THINK_ID["</think>"], answer, THINK_ID["<eos>"]]


def think_rows() -> tuple[torch.Tensor, torch.Tensor]:
    """Every pair's row, padded with <pad>, and its labels: the prompt and the padding are not learned."""
    ids, labels = [], []
    for a in THINK_OPERANDS:
        for b in THINK_OPERANDS:
            row = think_row(a, b)
            pad = THINK_LENGTH - len(row)
            ids.append(row + [THINK_ID["<pad>"]] * pad)
            labels.append([-100] * 4 + row[4:] + [-100] * pad)
    return torch.tensor(ids), torch.tensor(labels)


def make_tokenizer(words: list[str] = WORDS, kept_tags: tuple[str, ...] = ()):
    """A word-level tokenizer over ``words`` (id = index). ``kept_tags``: words like ``</think>`` that
    are one token wherever they appear in a text, and that decoding keeps and spaces like a word."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {("▁" + w if not w.startswith("<") else w): i for i, w in enumerate(words)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    metaspace = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    if kept_tags:
        core.decoder = decoders.Sequence([*(decoders.Replace(t, "▁" + t) for t in kept_tags), metaspace])
        core.add_tokens([AddedToken(t, lstrip=True, rstrip=True, special=False, normalized=False) for t in kept_tags])
    else:
        core.decoder = metaspace
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", bos_token="<bos>")


def _gpt2(words: list[str], d_model: int, layers: int, heads: int, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)  # a training script, not a strategy: seeding here makes the weights reproducible
    ids = {w: i for i, w in enumerate(words)}
    config = GPT2Config(vocab_size=len(words), n_positions=64, n_embd=d_model, n_layer=layers, n_head=heads,
                        bos_token_id=ids["<bos>"], eos_token_id=ids["<eos>"], pad_token_id=ids["<pad>"],
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False)
    return GPT2LMHeadModel(config)


def _fit(model, data: torch.Tensor, labels: torch.Tensor, steps: int, eos: int, pad: int):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=data, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    return model, float(loss.detach())


def train(key: str, seed: int = 0):
    """``toy`` or ``toy-small`` on the two-path data -> (model, final loss)."""
    d_model, layers, heads, steps = SIZES[key]
    model = _gpt2(WORDS, d_model, layers, heads, seed)
    data = two_path_rows()
    return _fit(model, data, data, steps, eos=0, pad=13)


def train_think(seed: int = 0):
    """``toy-think`` on every pair's row -> (model, final loss). Padding needs no attention mask: it
    only ever follows a row's <eos>, and a causal model never looks ahead. On one thread, so that the
    weights do not depend on how many cores the machine has (and two busy cores do not spin)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _gpt2(THINK_WORDS, *THINK_SIZE[:3], seed)
        data, labels = think_rows()
        return _fit(model, data, labels, THINK_SIZE[3], eos=THINK_ID["<eos>"], pad=THINK_ID["<pad>"])
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def think_answers(model, counts: int | None) -> list[bool]:
    """For every pair (a, b): is the answer right, teacher-forced after ``<think>``, the first ``counts``
    numbers of the counting (all b where ``counts`` is None or more) and a forced ``</think>``?"""
    right = []
    for a in THINK_OPERANDS:
        for b in THINK_OPERANDS:
            row = think_row(a, b, counts)
            logits = model(torch.tensor([row[:-2]])).logits[0, -1]
            right.append(int(logits.argmax()) == a + b)
    return right


def main(out: Path, keys: list[str]) -> None:
    for key in keys:
        start = time.perf_counter()
        if key == "toy-think":
            model, loss = train_think()
            tokenizer = make_tokenizer(THINK_WORDS, THINK_TAGS)
            seconds = time.perf_counter() - start
            cut = " ".join(f"{n}:{sum(think_answers(model, n)) / len(THINK_OPERANDS) ** 2:.2f}"
                           for n in range(len(THINK_OPERANDS)))
            print(f"{key}: final loss {loss:.4f} in {seconds:.1f} s; answers right with the whole thinking "
                  f"{sum(think_answers(model, None))}/{len(THINK_OPERANDS) ** 2}; cut after k counts, k:accuracy {cut}")
        else:
            model, loss = train(key)
            tokenizer = make_tokenizer()
            with torch.no_grad():
                probs = model(torch.tensor([[1, 2]])).logits[0, -1].softmax(-1)
            print(f"{key}: final loss {loss:.4f} in {time.perf_counter() - start:.1f} s; "
                  f"after '1 2': P(3)={probs[3]:.3f} P(9)={probs[9]:.3f}")
        model.save_pretrained(out / key)
        tokenizer.save_pretrained(out / key)


KEYS = [*SIZES, "toy-think"]

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Train the toy models (seeded, seconds on a CPU).")
    parser.add_argument("out", nargs="?", type=Path, default=ASSETS, help="where to write them (default: assets/)")
    parser.add_argument("--only", nargs="+", choices=KEYS, default=KEYS, help="train these only")
    args = parser.parse_args()
    main(args.out, args.only)
