"""Score a text: teacher-forced probabilities equal a plain transformers forward; perplexity by hand."""
import math

import pytest
import torch

from playground.errors import InvalidRequest
from playground.whatif.score import score, summary


def _forward_probs(lm, ids):
    with torch.no_grad():
        return lm.model(torch.tensor([ids])).logits[0].float().softmax(-1)


def test_toy_third_token_and_perplexity_by_hand(store, toy):
    result = summary(score(store, "toy", "1 2 3"))
    probs = [t["prob"] for t in result["tokens"]]
    assert [t["id"] for t in result["tokens"]] == [1, 2, 3] and probs[0] is None  # nothing predicts the first
    assert probs[2] == pytest.approx(0.70, abs=0.03)
    forward = _forward_probs(toy, [1, 2, 3])
    assert probs[1] == pytest.approx(float(forward[0, 2]), rel=1e-5)
    assert probs[2] == pytest.approx(float(forward[1, 3]), rel=1e-5)
    by_hand = math.exp(-(math.log(forward[0, 2]) + math.log(forward[1, 3])) / 2)
    assert result["perplexity"] == pytest.approx(by_hand, rel=1e-5)
    assert result["total_logprob"] == pytest.approx(math.log(forward[0, 2]) + math.log(forward[1, 3]), rel=1e-5)


def test_rank_surprisal_entropy_and_greedy_on_the_30_percent_path(store, toy):
    trace = score(store, "toy", "once upon the hill")
    third = trace.steps[1]  # " the" after "once upon"
    forward = _forward_probs(toy, [1, 2, 9, 10])[1]
    assert third.chosen == 9 and third.extra["rank"] == 2 and third.extra["greedy_text"] == " a"
    assert third.extra["surprisal"] == pytest.approx(-math.log2(float(forward[9])), rel=1e-5)
    assert third.entropy == pytest.approx(float(-(forward * forward.log()).sum()), rel=1e-4)
    assert trace.to_dict()["steps"][1]["candidates"][0]["id"] == 3  # the step chart's data, most probable first


def test_chat_model_scores_the_text_as_the_answer(store, smollm):
    prompt, text = "Why is the sky blue?", "Because of Rayleigh scattering."
    trace = score(store, "smollm2-135m", text, prompt=prompt)
    assert trace.params["mode"] == "chat" and trace.prompt_ids == smollm.encode(prompt)
    ids = trace.prompt_ids + trace.token_ids
    forward = _forward_probs(smollm, ids)
    n = len(trace.prompt_ids)
    for i, token in enumerate(trace.tokens):
        assert math.exp(token.logprob) == pytest.approx(float(forward[n - 1 + i, token.id]), rel=1e-3, abs=1e-6)
    raw = score(store, "smollm2-135m", text, prompt=prompt, chat=False)
    assert raw.params["mode"] == "raw" and raw.extra["score"]["perplexity"] != trace.extra["score"]["perplexity"]


@pytest.mark.parametrize("kwargs, message", [
    ({"text": "  "}, "text must not be empty"),
    ({"text": "1"}, "text must hold at least two tokens"),
    ({"text": "dragons fly"}, "toy prompts are token numbers"),
    ({"text": "1 " * 70}, "toy accepts at most 64 in all"),
])
def test_bad_texts_say_why(store, kwargs, message):
    with pytest.raises(InvalidRequest) as err:
        score(store, "toy", **kwargs)
    assert message in str(err.value)
