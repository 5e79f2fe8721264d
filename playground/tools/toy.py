"""The toy models: tiny GPT-2s trained on the course notes' two-path data.

Rows are ``1 2 3 4 5 6 7 8 <eos>`` (70%) or ``1 2 9 10 11 12 7 8 <eos>``
(30%), so after the prompt ``1 2`` the true next-token distribution is 0.7 on
token 3 and 0.3 on token 9, and everything after the branch is determined.
That known ground truth is what tests and demos lean on.

    python -m playground.tools.toy      # retrains both and writes assets/toy, assets/toy-small

Training is seeded and takes a few seconds on a CPU.
"""
from __future__ import annotations

import sys
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


def two_path_rows(n: int = 800) -> torch.Tensor:
    """The notes' data: row i takes path A when i % 10 < 7 (70%), else path B."""
    return torch.tensor([PATH_A if i % 10 < 7 else PATH_B for i in range(n)])


def make_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {("▁" + w if not w.startswith("<") else w): i for i, w in enumerate(WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    core.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>", bos_token="<bos>")


def train(key: str, seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel

    d_model, layers, heads, steps = SIZES[key]
    torch.manual_seed(seed)  # a training script, not a strategy: seeding here makes the weights reproducible
    config = GPT2Config(vocab_size=len(WORDS), n_positions=64, n_embd=d_model, n_layer=layers, n_head=heads,
                        bos_token_id=15, eos_token_id=0, pad_token_id=13, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, tie_word_embeddings=False)
    model = GPT2LMHeadModel(config)
    data = two_path_rows()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=data, labels=data).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    model.generation_config.eos_token_id = 0
    model.generation_config.pad_token_id = 13
    return model, float(loss.detach())


def main(out: Path) -> None:
    tokenizer = make_tokenizer()
    for key in SIZES:
        model, loss = train(key)
        with torch.no_grad():
            probs = model(torch.tensor([[1, 2]])).logits[0, -1].softmax(-1)
        print(f"{key}: final loss {loss:.4f}; after '1 2': P(3)={probs[3]:.3f} P(9)={probs[9]:.3f}")
        model.save_pretrained(out / key)
        tokenizer.save_pretrained(out / key)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ASSETS)
