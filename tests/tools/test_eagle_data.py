"""The EAGLE head's offline training text: held-out prompts never asked, more prompts keep the first
ones, and answers already generated for a smaller recipe are reused, never regenerated."""
from __future__ import annotations

import json

from playground.tools import eagle_data
from playground.tools.train_eagle import CHAT_HELD_OUT


def test_no_held_out_prompt_is_asked_and_no_prompt_twice():
    prompts = eagle_data.chat_prompts(CHAT_HELD_OUT, 0)
    assert not set(prompts) & set(CHAT_HELD_OUT)
    assert len(prompts) == len(set(prompts)) == len(eagle_data.TOPICS) * (
        len(eagle_data.FORMS) + len(eagle_data.MORE_FORMS))
    subjects = ["leaves", "refrigerator", "reading books", "compass"]
    assert not [p for p in prompts if any(s in p for s in subjects)]


def test_the_first_group_comes_first_in_its_own_seeded_order():
    prompts = eagle_data.chat_prompts(CHAT_HELD_OUT, 0)
    first = len(eagle_data.FORMS) * len(eagle_data.TOPICS)
    assert set(prompts[:first]) == {f.format(t) for t in eagle_data.TOPICS for f in eagle_data.FORMS}
    assert prompts[:first] != eagle_data.chat_prompts(CHAT_HELD_OUT, 1)[:first]


class FakeLM:
    """Answers by echoing: enough for ``build`` to show which prompts it generated."""
    key = "fake"
    eos_ids = [0]
    device = type("Device", (), {"type": "cuda"})()  # not a CPU: build keeps the weights as they are

    def encode(self, text):
        return [len(text)]

    def with_weights(self, _):
        return self


def test_answers_of_a_smaller_recipe_are_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("PLAYGROUND_CACHE", str(tmp_path))
    lm = FakeLM()
    generated: list[list[int]] = []

    def answers(_lm, prompts, length, batch, log):
        generated.extend(prompts)
        return [p + [7] for p in prompts]

    monkeypatch.setattr(eagle_data, "greedy_answers", answers)
    monkeypatch.setattr(eagle_data, "package_text", lambda limit: [])
    monkeypatch.setattr(eagle_data, "doc_pieces", lambda lm, texts, n: [[1, 2, 3]])
    small, _ = eagle_data.cached(lm, CHAT_HELD_OUT, 5, 16, 0, 0, log=lambda m: None)
    assert len(generated) == 5
    generated.clear()
    big, record = eagle_data.cached(lm, CHAT_HELD_OUT, 8, 16, 0, 0, log=lambda m: None)
    assert len(generated) == 3  # only the new prompts
    assert big[:5] == small[:5] and record["chat_prompts"] == 8
    prompts = eagle_data.chat_prompts(CHAT_HELD_OUT, 0)[:8]
    assert [s[0] for s in big[:8]] == [len(p) for p in prompts]
    saved = json.loads(next(tmp_path.glob("eagle/fake/sequences-*p8*.json")).read_text())
    assert saved["record"]["chat_prompts"] == 8
    generated.clear()
    eagle_data.cached(lm, CHAT_HELD_OUT, 8, 32, 0, 0, log=lambda m: None)  # other answer length: all anew
    assert len(generated) == 8
