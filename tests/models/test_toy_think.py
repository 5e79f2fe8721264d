"""toy-think, the toy that thinks (playground/tools/toy.py): after ``a + b =`` it counts up from a, b steps,
between ``<think>`` and ``</think>``, then answers the last number it counted. ``</think>`` is one token;
with its whole thinking it answers every pair right, greedy and at T=1; and a thinking cut short (``</think>``
teacher-forced early) answers wrong about as often as the cut left the counting unfinished."""
import pytest
import torch

from playground.engine import Request, run
from playground.models import OFFLINE
from playground.tools.toy import THINK_OPERANDS, think_prompt, think_row
from playground.ui.controls import pair_choices, tokenizer_family

PAIRS = [(a, b) for a in THINK_OPERANDS for b in THINK_OPERANDS]


@pytest.fixture(scope="module")
def think(store):
    return store.get("toy-think")


def test_it_is_an_offline_toy_whose_prompts_are_words_and_whose_tokenizer_is_its_own():
    spec = OFFLINE["toy-think"]
    assert spec.source == "assets" and not spec.numeric_prompt and not spec.chat
    assert tokenizer_family("toy-think") != tokenizer_family("toy")
    assert "toy-think" not in pair_choices("draft", "toy") and "toy" not in pair_choices("draft", "toy-think")


def test_the_thinking_tags_are_one_token_each_and_the_text_decodes_as_written(think):
    tok = think.tokenizer
    for tag in ("<think>", "</think>"):
        (tag_id,) = tok(tag, add_special_tokens=False)["input_ids"]
        assert tok.get_vocab()[tag] == tok.convert_tokens_to_ids(tag) == tag_id
        assert tok(f" {tag} ", add_special_tokens=False)["input_ids"] == [tag_id]
    text = "3 + 4 = <think> 4 5 6 7 </think> 7"
    assert think.encode("3 + 4 =") == think_prompt(3, 4) == [3, 19, 4, 20]  # a number's id is the number
    assert think.encode(text) == think_row(3, 4)[:-1] and think.decode(think_row(3, 4)) == text
    assert think.has_chat_template is False and think.eos_ids == {tok.eos_token_id}


@pytest.mark.parametrize("prompt, text", [
    ("3 + 4 =", "<think> 4 5 6 7 </think> 7"),
    ("9 + 9 =", "<think> 10 11 12 13 14 15 16 17 18 </think> 18"),
    ("0 + 9 =", "<think> 1 2 3 4 5 6 7 8 9 </think> 9"),
    ("5 + 0 =", "<think> </think> 5"),
])
def test_greedy_through_the_engine_thinks_then_answers_the_sum(store, prompt, text):
    trace = run(store, Request("toy-think", "greedy", prompt, max_new_tokens=16))
    assert trace.text == text and trace.finish_reason == "eos"


@torch.no_grad()
def greedy_rows(think) -> list[list[int]]:
    """Every pair's greedy continuation, to its <eos>: one batch, as all prompts are 4 tokens long."""
    ids = torch.tensor([think_prompt(a, b) for a, b in PAIRS])
    for _ in range(len(think_row(9, 9)) - 4):
        ids = torch.cat([ids, think.model(ids).logits[:, -1].argmax(-1, keepdim=True)], 1)
    eos = think.tokenizer.eos_token_id
    return [row[4:row.index(eos) + 1] if eos in row else row[4:] for row in ids.tolist()]


def test_with_its_whole_thinking_it_answers_every_pair_and_is_sure_of_it(think):
    assert greedy_rows(think) == [think_row(a, b)[4:] for a, b in PAIRS]
    # T=1 writes the whole right row with this probability: the product over its steps
    sure = []
    with torch.no_grad():
        for a, b in PAIRS:
            row = think_row(a, b)
            logp = think.model(torch.tensor([row])).logits[0, :-1].log_softmax(-1)
            sure.append(float(sum(logp[i - 1, row[i]] for i in range(4, len(row))).exp()))
    assert min(sure) > 0.9 and sum(sure) / len(sure) > 0.98


def test_sampling_at_t1_thinks_and_answers_right(store):
    for seed in range(3):
        trace = run(store, Request("toy-think", "sampling", "6 + 7 =", {"temperature": 1.0}, seed=seed,
                                   max_new_tokens=16))
        assert trace.text == "<think> 7 8 9 10 11 12 13 </think> 13"


@torch.no_grad()
def cut_answers(think, counts: int) -> list[int]:
    """Each pair's greedy answer after ``<think>``, the first ``counts`` numbers of its counting and a
    teacher-forced ``</think>``."""
    return [int(think.model(torch.tensor([think_row(a, b, counts)[:-2]])).logits[0, -1].argmax())
            for a, b in PAIRS]


def test_a_thinking_cut_short_answers_wrong_so_accuracy_rises_with_the_budget(think):
    accuracy, last = [], 0
    for counts in range(len(THINK_OPERANDS)):
        answers = cut_answers(think, counts)
        accuracy.append(sum(ans == a + b for ans, (a, b) in zip(answers, PAIRS)) / len(PAIRS))
        # the wrong answers are the last number counted (a when none): the answer is read off the thinking
        last += sum(ans == think_row(a, b, counts)[-2] for ans, (a, b) in zip(answers, PAIRS) if b > counts)
    finished = [sum(b <= counts for _, b in PAIRS) / len(PAIRS) for counts in range(len(THINK_OPERANDS))]
    assert accuracy == sorted(accuracy) and accuracy[-1] == 1.0
    assert all(acc <= done + 0.05 for acc, done in zip(accuracy, finished)), (accuracy, finished)
    assert accuracy[0] <= 0.2 and accuracy[4] <= 0.6  # against 1.0 with the whole thinking
    unfinished = sum(b > counts for _, b in PAIRS for counts in range(len(THINK_OPERANDS)))
    assert last / unfinished > 0.8


def test_a_cut_through_the_engine_answers_the_last_number_counted(store):
    trace = run(store, Request("toy-think", "greedy", "3 + 4 =", max_new_tokens=16, forced={3: "</think>"}))
    assert trace.text == "<think> 4 5 </think> 5"
    assert trace.steps[3].extra["strategy_choice_text"] == " 6"  # it would have counted on


def test_the_page_offers_toy_think_a_prompt_of_its_form():
    from playground.ui.handlers import DEFAULT_PROMPT, NUMERIC_PROMPT, prompt_for_model
    assert prompt_for_model("toy-think", DEFAULT_PROMPT) == "3 + 6 ="
    assert prompt_for_model("toy-think", NUMERIC_PROMPT) == "3 + 6 ="
    assert prompt_for_model("toy-think", " 2 + 5 = ") == " 2 + 5 = "  # a prompt it reads is kept
