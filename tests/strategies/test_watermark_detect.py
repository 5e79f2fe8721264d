"""The watermark detector (strategies/watermark_detect.py, playground/whatif/watermark.py, the CLI's
``detect``): the same counts, z and p-value as transformers' WatermarkDetector (toy, SmolLM2 and Gemma vocabularies); a watermarked SmolLM2
text is found (z > 4) and the same prompt unwatermarked is not (z < 2); the CLI's JSON and refusals."""
from __future__ import annotations

import json
import random
import re

import pytest
import torch
from transformers.generation.watermarking import WatermarkDetector

from playground.cli import main
from playground.cli.flags import strategy_parser
from playground.engine import MAX_TEXT_CHARS, Request, run
from playground.errors import InvalidRequest
from playground.whatif.watermark import detect_synthid_text, detect_text
from strategies.green_lists import DEFAULT_KEY
from strategies.watermark_detect import detect

PROMPT = "Write a long story about a lighthouse keeper who finds a message in a bottle."
WATERMARK = {"watermark_delta": 2.0, "watermark_gamma": 0.25}


def theirs(config, ids: list[int], gamma: float, key: int, scheme: str, ignore: bool):
    detector = WatermarkDetector(config, "cpu", {"greenlist_ratio": gamma, "bias": 2.0, "hashing_key": key,
                                                 "seeding_scheme": scheme, "context_width": 1},
                                 ignore_repeated_ngrams=ignore)
    return detector(torch.tensor([ids]), return_dict=True)


def assert_same(config, ids: list[int], gamma: float, key: int, scheme: str, ignore: bool) -> None:
    expected = theirs(config, ids, gamma, key, scheme, ignore)
    ours = detect(ids[1:] if ids[0] == config.bos_token_id else ids, config.vocab_size, gamma, key, scheme,
                  ignore_repeated_ngrams=ignore)
    assert (ours.scored, ours.green) == (expected.num_tokens_scored[0], expected.num_green_tokens[0])
    assert ours.z == expected.z_score[0] and ours.p_value == expected.p_value[0]  # bit for bit


@pytest.fixture(scope="module")
def smollm_texts(store, smollm):
    """(prompt ids, watermarked ids, plain ids): one prompt, one seed, with and without the watermark."""
    out = []
    for params in (WATERMARK, {}):
        trace = run(store, Request("smollm2-135m", "sampling", PROMPT, params, seed=11, max_new_tokens=160)).to_dict()
        out.append(trace)
    return out


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
@pytest.mark.parametrize("ignore", [False, True])
def test_parity_with_transformers_detector_on_toy(toy, scheme, ignore):
    rng = random.Random(3)
    config = toy.model.config
    for n in (2, 5, 40):
        ids = [rng.randrange(toy.vocab_size) for _ in range(n)]
        for gamma, key in ((0.25, DEFAULT_KEY), (0.5, 99)):
            assert_same(config, ids, gamma, key, scheme, ignore)
    assert_same(config, [config.bos_token_id, 3, 4, 3, 4, 3, 4], 0.5, DEFAULT_KEY, scheme, ignore)  # BOS dropped


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
@pytest.mark.parametrize("ignore", [False, True])
def test_parity_with_transformers_detector_on_smollm2_texts(smollm, smollm_texts, scheme, ignore):
    config = smollm.model.config
    for trace in smollm_texts:
        prompt, text = trace["prompt_ids"], [t["id"] for t in trace["tokens"]]
        assert prompt[0] == config.bos_token_id  # the chat template's first token is SmolLM2's BOS
        assert_same(config, prompt + text, 0.25, DEFAULT_KEY, scheme, ignore)
        assert_same(config, text, 0.25, DEFAULT_KEY, scheme, ignore)
        assert_same(config, text, 0.5, 7, scheme, ignore)
        if scheme == "lefthash":  # a prompt as context: the windows from its last token on
            ours = detect(prompt + text, config.vocab_size, 0.25, context=len(prompt), ignore_repeated_ngrams=ignore)
            expected = theirs(config, prompt[-1:] + text, 0.25, DEFAULT_KEY, scheme, ignore)
            assert (ours.scored, ours.green, ours.z) == (expected.num_tokens_scored[0],
                                                         expected.num_green_tokens[0], expected.z_score[0])


def test_watermarked_text_is_found_and_plain_text_is_not(store, smollm_texts, capsys):
    marked, plain = smollm_texts
    zs = []
    for trace in (marked, plain):
        prompt, text = trace["prompt_ids"], [t["id"] for t in trace["tokens"]]
        assert 100 <= len(text) <= 160
        found = detect(prompt + text, 49152, 0.25, context=len(prompt))
        assert found.scored == len(text)
        # the stage's own record of each chosen token is what the detector counts
        if trace is marked:
            recorded = [next(st for st in s["stages"] if st["name"] == "watermark")["decision"]["chosen_green"]
                        for s in trace["steps"]]
            assert recorded == [m.green for m in found.marks[len(prompt):]]
        # the same through the text, tokenized afresh (what the CLI's detect reads)
        again = detect_text(store, "smollm2-135m", trace["text"], PROMPT, gamma=0.25)
        zs.append((len(text), found.z, found.p_value, again["scored"], again["z"]))
    with capsys.disabled():
        print(f"\nwatermarked: {zs[0]}\nplain: {zs[1]}  (tokens, z, p, re-tokenized scored, re-tokenized z)")
    assert zs[0][1] > 4 and zs[0][4] > 4
    assert zs[1][1] < 2 and zs[1][4] < 2


def test_cli_detect_json_matches_the_detector_on_a_watermarked_toy_run(capsys):
    assert main(["run", "--model", "toy", "--strategy", "sampling", "--prompt", "1 2", "--seed", "5",
                 "--max-new-tokens", "20", "--watermark-delta", "4", "--watermark-gamma", "0.5", "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["params"]["watermark_delta"] == 4.0
    ids = [t["id"] for t in trace["tokens"]]
    text = " ".join(str(i) for i in ids)
    assert main(["detect", "--model", "toy", "--prompt", "1 2", "--text", text, "--watermark-gamma", "0.5",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    expected = detect(trace["prompt_ids"] + ids, 16, 0.5, context=len(trace["prompt_ids"]))
    assert (result["z"], result["p_value"], result["green"], result["scored"]) == (
        expected.z, expected.p_value, expected.green, expected.scored)
    assert [m["id"] for m in result["marks"]] == ids
    assert [m["green"] for m in result["marks"]] == [m.green for m in expected.marks[2:]]
    assert all(m["text"] for m in result["marks"])
    assert main(["detect", "--model", "toy", "--prompt", "1 2", "--text", text, "--watermark-gamma", "0.5"]) == 0
    plain = capsys.readouterr().out
    assert f"z = {expected.z:.2f}" in plain and f"{expected.green} green of {expected.scored} scored" in plain


@pytest.mark.parametrize("args, message", [
    (["--watermark-gamma", "1.5"], "watermark_gamma must be in (0, 1), got 1.5"),
    (["--watermark-gamma", "0"], "watermark_gamma must be in (0, 1), got 0"),
    (["--watermark-scheme", "minhash"], "watermark_scheme must be one of lefthash, selfhash, got 'minhash'"),
    (["--watermark-key", "-1"], "watermark_key must be in [0, 2147483647], got -1"),
    (["--watermark-key", "2147483648"], "watermark_key must be in [0, 2147483647], got 2147483648"),
    (["--watermark-key", "1.5"], "watermark_key must be an integer, got '1.5'"),
    (["--text", "x" * (MAX_TEXT_CHARS + 1)], f"text must be at most {MAX_TEXT_CHARS} characters, got "
                                             f"{MAX_TEXT_CHARS + 1}"),
    (["--text", "  "], "text must not be empty"),
    (["--model", "no-such-model"], "model must be one of toy, toy-small, toy-think, smollm2-135m, gemma3-270m"),
    (["--prompt", "", "--text", "3"], "text must hold at least two tokens when there is no prompt"),
])
def test_cli_detect_bad_input_exits_2_with_one_line(capsys, args, message):
    assert main(["detect", "--model", "toy", "--prompt", "1 2", "--text", "3 4 5", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and message in err


@pytest.mark.parametrize("kwargs, message", [
    ({"key": True}, "watermark_key must be an integer, got True"),
    ({"gamma": False}, "watermark_gamma must be a number, got False"),
    ({"text": 123}, "text must be a string, got int"),
    ({"text": "1 " * (MAX_TEXT_CHARS // 2 + 1)}, f"text must be at most {MAX_TEXT_CHARS} characters"),
    ({"prompt": None}, "prompt must be a string, got NoneType"),
])
def test_detect_text_refuses_what_is_not_its_type_or_too_long(store, kwargs, message):
    """A bool is not a key, a number is not a text, and a text from outside has the one length limit
    every reader of outside texts has (engine.MAX_TEXT_CHARS: lockstep's and score's too)."""
    with pytest.raises(InvalidRequest, match=f"^{re.escape(message)}"):
        detect_text(store, "toy", **{"text": "3 4 5", "prompt": "1 2", **kwargs})


def test_detect_synthid_text_refuses_a_text_over_the_limit(store):
    with pytest.raises(InvalidRequest, match=f"text must be at most {MAX_TEXT_CHARS} characters"):
        detect_synthid_text(store, "toy", "1 " * (MAX_TEXT_CHARS // 2 + 1), "5,6")


def test_run_flags_include_the_watermark_by_themselves():
    text = strategy_parser("sampling").format_help()
    for name in ("--watermark-delta", "--watermark-gamma", "--watermark-scheme", "--watermark-key"):
        assert name in text


@pytest.mark.parametrize("scheme", ["lefthash", "selfhash"])
def test_parity_with_transformers_detector_on_gemmas_vocabulary(gemma, scheme):
    rng = random.Random(5)
    config = gemma.model.config
    ids = [rng.randrange(gemma.vocab_size) for _ in range(60)]
    for ignore in (False, True):
        assert_same(config, ids, 0.25, DEFAULT_KEY, scheme, ignore)
        assert_same(config, ids + ids[:10], 0.5, 11, scheme, ignore)  # repeats
