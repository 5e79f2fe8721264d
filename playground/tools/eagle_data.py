"""The EAGLE head's training text, all offline: the target's own answers to many chat prompts, plus
English docstrings of the standard library.

Prompts are every pairing of a question form with a topic (``chat_prompts``), in a seeded order;
none is a held-out prompt or names a held-out prompt's subject, so the held-out tau stays honest.
The target answers each in batches with greedy decoding (the setting the held-out tau is measured
at), so the head learns the text it will be asked to draft. Docstrings are cut into pieces of at
most ``DOC_TOKENS`` tokens: the target reads each piece once, which is cheap next to generating.

The token sequences are kept in a cache file (``data_file``) so training can be rerun without
generating again; the file records how it was made and is rebuilt when that differs.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from playground.models.lineup import cache_root

FORMS = [
    "Explain {}.", "What is {}?", "Write a short story about {}.", "Give three facts about {}.",
    "How does {} work?", "Why is {} important?", "Describe {} to a child.", "Write a poem about {}.",
    "What are the pros and cons of {}?", "Summarise the history of {}.", "Give me tips about {}.",
    "What should a beginner know about {}?", "Write a short letter to a friend about {}.",
    "What are common mistakes people make with {}?", "Compare {} with something similar.",
]
MORE_FORMS = [  # a second group, after every pairing of the first: a longer list keeps its first prompts
    "Tell me about {}.", "What would happen without {}?", "List five interesting things about {}.",
    "Write a short paragraph about {}.",
]
TOPICS = [
    "the ocean tides", "volcanoes", "the human heart", "photosynthesis", "electricity", "the Roman Empire",
    "a healthy breakfast", "recycling", "the solar system", "earthquakes", "honey bees", "the printing press",
    "mountain climbing", "a vegetable garden", "the stock market", "machine learning", "clouds", "friendship",
    "chess", "the piano", "learning a new language", "a job interview", "public speaking", "saving money",
    "dinosaurs", "the immune system", "electric cars", "coffee", "tea", "bread baking", "the moon landing",
    "the Great Wall of China", "penguins", "deserts", "rain forests", "a city park", "the internet",
    "smartphones", "sleep", "exercise", "meditation", "the water cycle", "glaciers", "sharks", "elephants",
    "wind power", "solar panels", "the Olympic Games", "football", "basketball", "a birthday party",
    "writing an essay", "time management", "a library", "museums", "trains", "ships", "bicycles",
    "airports", "bridges", "skyscrapers", "the Renaissance", "ancient Egypt", "the pyramids", "democracy",
    "taxes", "voting", "a small business", "cooking rice", "pasta", "chocolate", "ice cream", "the seasons",
    "snow", "thunderstorms", "rainbows", "stars", "black holes", "the speed of light", "magnets",
    "atoms", "DNA", "vaccines", "antibiotics", "a visit to the doctor", "dentists", "brushing teeth",
    "dogs", "cats", "horses", "birds migrating", "butterflies", "frogs", "whales", "coral reefs",
    "fishing", "farming", "wheat", "potatoes", "apples", "oranges", "a camping trip", "hiking",
    "maps", "clocks", "calendars", "the number zero", "fractions", "geometry", "prime numbers",
    "programming in Python", "databases", "passwords", "email", "video games", "movies", "music festivals",
    "painting", "photography", "poetry", "novels", "newspapers", "radio", "television", "advertising",
    "a first day at school", "homework", "teachers", "universities", "scholarships", "moving house",
    "a rainy day", "a road trip", "the night sky", "candles", "fire safety", "first aid", "clean water",
    "plastic pollution", "climate change", "forests", "rivers", "lakes", "islands", "the Arctic",
]
DOC_TOKENS = 256


def chat_prompts(held_out: list[str], seed: int) -> list[str]:
    """Every form with every topic, shuffled by ``seed``, then every pairing of ``MORE_FORMS`` shuffled
    the same way; none equals a held-out prompt. Asking for more prompts never changes the first ones."""
    out: list[str] = []
    for forms in (FORMS, MORE_FORMS):
        group = [p for p in (form.format(topic) for topic in TOPICS for form in forms) if p not in held_out]
        random.Random(seed).shuffle(group)
        out += group
    return out


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


def greedy_answers(lm: Any, prompts: list[list[int]], length: int, batch: int, log: Any = print
                   ) -> list[list[int]]:
    """prompt + the target's greedy answer (cut at its end of text), ``batch`` prompts a time, left-padded."""
    pad = min(lm.eos_ids)
    out: list[list[int]] = []
    start = time.perf_counter()
    for i in range(0, len(prompts), batch):
        group = prompts[i:i + batch]
        width = max(map(len, group))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in group], device=lm.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group], device=lm.device)
        with torch.inference_mode():
            seqs = lm.model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=length,
                                     pad_token_id=pad)
        for prompt, seq in zip(group, seqs.tolist()):
            answer = seq[width:]
            cut = next((j + 1 for j, t in enumerate(answer) if t in lm.eos_ids), len(answer))
            out.append(prompt + answer[:cut])
        log(f"answers {len(out)}/{len(prompts)} in {time.perf_counter() - start:.0f} s")
    return out


def doc_pieces(lm: Any, texts: list[str], max_tokens: int) -> list[list[int]]:
    pieces: list[Any] = []
    for text in texts:
        ids = lm.tokenizer(text)["input_ids"]
        pieces.extend(ids[j:j + max_tokens] for j in range(0, len(ids), max_tokens) if len(ids[j:j + max_tokens]) > 8)
    return pieces


def build(lm: Any, held_out: list[str], prompts: int, answer_tokens: int, doc_chars: int, seed: int,
          batch: int = 48, log: Any = print, known: tuple[list[list[int]], float] = ([], 0.0)
          ) -> tuple[list[list[int]], dict[str, Any]]:
    """The sequences and their record (counts, seconds). ``known``: answers already generated for the
    first prompts (a smaller cached recipe) and the seconds they took; only the rest are generated."""
    chosen = chat_prompts(held_out, seed)[:prompts]
    done, earlier = known
    t0 = time.perf_counter()
    fast = lm.with_weights("bfloat16") if lm.device.type == "cpu" else lm  # generation only; features stay float32
    answers = done + greedy_answers(fast, [lm.encode(p) for p in chosen[len(done):]], answer_tokens, batch, log)
    t1 = time.perf_counter()
    docs = doc_pieces(lm, package_text(doc_chars), DOC_TOKENS)
    forms = len(FORMS) + (len(MORE_FORMS) if len(chosen) > len(FORMS) * len(TOPICS) else 0)
    record = {"chat_prompts": len(chosen), "prompt_forms": forms, "topics": len(TOPICS),
              "answers": "greedy, bfloat16 weights", "answer_max_tokens": answer_tokens,
              "answer_tokens": sum(len(a) for a in answers), "answer_seconds": round(earlier + t1 - t0, 1),
              "stdlib_docstring_chars": doc_chars, "doc_pieces": len(docs), "doc_piece_max_tokens": DOC_TOKENS,
              "doc_tokens": sum(len(d) for d in docs)}
    return answers + docs, record


def cache_dir() -> Path:
    """Where built data is kept: the playground's cache ($PLAYGROUND_CACHE), under eagle/."""
    return cache_root() / "eagle"


def data_file(key: str, recipe: dict[str, Any]) -> Path:
    name = "-".join(f"{k}{v}" for k, v in sorted(recipe.items()))
    return cache_dir() / key / f"sequences-{name}.json"


def cached(lm: Any, held_out: list[str], prompts: int, answer_tokens: int, doc_chars: int, seed: int,
           log: Any = print) -> tuple[list[list[int]], dict[str, Any]]:
    """``build``, kept in the cache file for this recipe."""
    recipe = {"p": prompts, "a": answer_tokens, "d": doc_chars, "s": seed}
    path = data_file(lm.key, recipe)
    if path.exists():
        saved = json.loads(path.read_text())
        log(f"sequences from {path}")
        return saved["sequences"], saved["record"]
    seqs, record = build(lm, held_out, prompts, answer_tokens, doc_chars, seed, log=log,
                         known=_known_answers(lm.key, prompts, answer_tokens, seed, log))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"record": record, "sequences": seqs}))
    return seqs, record


def _known_answers(key: str, prompts: int, answer_tokens: int, seed: int, log: Any
                   ) -> tuple[list[list[int]], float]:
    """The answers of the largest cached recipe with fewer prompts (same answer length and seed), which
    are the answers to the first prompts of this one, and the seconds they took."""
    best: tuple[list[list[int]], float] = ([], 0.0)
    for path in sorted((cache_dir() / key).glob("sequences-*.json")):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        record = saved.get("record", {})
        n = record.get("chat_prompts", 0)
        if (record.get("answer_max_tokens") == answer_tokens and f"-s{seed}." in path.name
                and len(best[0]) < n < prompts):
            best = (saved["sequences"][:n], float(record.get("answer_seconds", 0.0)))
            log(f"{n} answers from {path}")
    return best
