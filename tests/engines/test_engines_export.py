"""playground/engines: value presets, exports to each engine and their importers, what each engine cannot
express (a run's thinking budget and answer chain included), and transformers' own logits processors against
recorded toy runs.

Fast by design: the property tests draw settings with a fixed seed and never load a model; the parity test
records a handful of toy runs once (the session's store) and replays their raw logits through transformers.
"""
from __future__ import annotations

import json
import random

import pytest
import torch

from playground.cli import main
from playground.cli.engine_flags import Start, params_for
from playground.engine import Request, run
from playground.engines import llamacpp, transformers_config
from playground.engines import settings as engine_settings
from playground.engines.facts import ENGINES, STAGE_WORDS
from playground.engines.formats import FORMATS, export, export_trace
from playground.engines.importing import import_file, import_text
from playground.engines.model_cards import OFFLINE_CARDS, card_of_config, gguf_sampling, model_card
from playground.engines.presets import PRESETS, preset
from playground.engines.settings import RunSettings, sampler_params, settings_for, settings_of_trace
from playground.errors import InvalidRequest
from playground.models import OFFLINE
from playground.models.lineup import gguf_path
from strategies.sampling.samplers import PRESETS as ORDERS
from strategies.sampling.samplers import SAMPLER_STAGES

STOPS = ["\n\n", "END", 'say "hi"', "a\\b", "é"]
GRAMMARS = [None, {"kind": "json", "text": '{"type": "object", "properties": {"a": {"type": "integer"}}}'},
            {"kind": "regex", "text": "[a-z]+"}, {"kind": "choices", "text": "yes | no | maybe so"},
            {"kind": "lark", "text": 'start: "a"+'}]


def stage_values(rng: random.Random, name: str) -> dict:
    """Values that turn the stage ``name`` on."""
    u = rng.uniform
    return {
        "penalty": {"repetition_penalty": u(0.7, 1.8)},
        "presence_frequency": {"presence_penalty": u(-1.5, 1.5), "frequency_penalty": u(-1, 1),
                               "penalty_last_n": rng.choice([-1, 0, 8, 64])},
        "no_repeat_ngram": {"no_repeat_ngram_size": rng.randint(2, 4)},
        "dry": {"dry_multiplier": u(0.1, 2), "dry_base": u(1.2, 2.5), "dry_allowed_length": rng.randint(1, 4),
                "dry_sequence_breakers": rng.choice(['"\\n", ":"', '"."'])},
        "temperature": {"temperature": rng.choice([0.0, u(0.3, 2.5), u(2.5, 4)])},
        "dynamic_temperature": {"dynatemp_min": u(0.3, 1), "dynatemp_max": u(1, 2), "dynatemp_exponent": u(0.5, 2)},
        "top_h": {"top_h": u(0.2, 0.9)}, "top_k": {"top_k": rng.randint(1, 30)}, "top_p": {"top_p": u(0.2, 0.99)},
        "min_p": {"min_p": u(0.01, 0.3)}, "p_less": {"p_less": True}, "typical_p": {"typical_p": u(0.2, 0.95)},
        "epsilon": {"epsilon_cutoff": u(0.0005, 0.05)}, "eta": {"eta_cutoff": u(0.0005, 0.05)},
        "top_nsigma": {"top_nsigma": u(0.5, 3)}, "xtc": {"xtc_probability": u(0.1, 1), "xtc_threshold": u(0.05, 0.5)},
        "mirostat": {"mirostat_tau": u(1, 8), "mirostat_eta": u(0.05, 0.5)},
        "adaptive_p": {"adaptive_p_target": u(0.1, 0.9), "adaptive_p_decay": u(0, 0.99)},
        "word_bias": {"word_bias": "the=-2, a"}, "watermark": {"watermark_delta": u(0.5, 4)},
        "synthid": {"synthid_keys": "1,2,3"},
    }[name]


def random_settings(rng: random.Random, stages=SAMPLER_STAGES, p_on: float = 0.35, orders=None,
                    shuffle: bool = True) -> RunSettings:
    values: dict = {}
    for name in stages:
        if rng.random() < p_on:
            values |= stage_values(rng, name)
    names = list(orders or SAMPLER_STAGES)
    if shuffle:
        rng.shuffle(names)
    values["order"] = rng.choice([",".join(names), *ORDERS]) if orders is None else ",".join(names)
    return settings_for(rng.choice(["sampling", "gumbel"]), values, rng.choice([None, rng.randint(0, 2**31 - 1)]),
                        rng.choice([None, rng.randint(1, 512)]), tuple(rng.sample(STOPS, rng.randint(0, 3))),
                        rng.choice(GRAMMARS))


EVERY_STAGE = settings_for("sampling", {k: v for name in SAMPLER_STAGES
                                        for k, v in stage_values(random.Random(5), name).items()}
                           | {"temperature": 0.8, "dynatemp_min": 0.5, "dynatemp_max": 1.5, "penalty_last_n": -1},
                           seed=7, max_new_tokens=64, stop=("\n\n",), grammar=GRAMMARS[1])


# --- presets -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", sorted(OFFLINE))
def test_each_offline_model_has_a_model_card_preset_with_its_source(model):
    card = model_card(model)
    assert card is OFFLINE_CARDS[model] and card.said
    if OFFLINE[model].source == "gguf":
        assert card.source.startswith(f"https://huggingface.co/{OFFLINE[model].hub_id}")
        # the card says the GGUF the package ships sets no sampler value (else the card would be its keys)
        assert "no general.sampling.* keys" in card.said and gguf_sampling(gguf_path(model)) == {}
    else:
        assert card.source.startswith("playground/tools/toy.py")
    chosen = preset("model card", model)
    assert chosen.source == card.source and chosen.sentence.startswith("model card: set ")
    sampler_params(chosen.values)  # the values make a valid run


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_sets_values_and_order_and_says_so(name):
    chosen = preset(name, "toy")
    assert chosen.sentence.startswith(f"{name}: ") and chosen.source
    if chosen.strategy == "greedy":
        assert chosen.values == {} and name == "transformers"
        return
    params = sampler_params(chosen.values)
    assert "order" in chosen.values
    for key, value in chosen.values.items():
        if key != "order":
            assert f"{key} {value:g}" in chosen.sentence or key == "temperature"
    facts = ENGINES.get(name)
    if facts is not None:  # an engine's preset is its row of defaults
        for key, value in facts.defaults.items():
            if key != "order" and key in chosen.values:
                assert getattr(params, key) == value


def test_flags_given_beside_a_preset_win():
    chosen = preset("llama.cpp", "toy")
    start = Start(chosen.strategy, dict(chosen.values))
    params = params_for("sampling", start, {"top_k": "7"})
    assert params["top_k"] == "7" and params["min_p"] == 0.05


@pytest.mark.parametrize("bad", ["creative", "", "llama"])
def test_an_unknown_preset_is_refused_with_the_names(bad):
    with pytest.raises(InvalidRequest, match="preset must be one of model card, neutral, universal"):
        preset(bad, "toy")


def test_a_hub_generation_config_becomes_a_card():
    card = card_of_config("google/gemma-3-270m", {"do_sample": True, "top_k": 64, "top_p": 0.95,
                                                  "bos_token_id": 2}, "hub")
    assert card.values == {"top_k": 64, "top_p": 0.95} and "do_sample True" in card.said
    assert card_of_config("x", {"do_sample": False}, "hub").values == {"temperature": 0.0}


def test_a_gguf_general_sampling_keys_are_read(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_float32("general.sampling.temp", 0.6)
    writer.add_int32("general.sampling.top_k", 20)
    writer.add_float32("general.sampling.top_p", 0.95)
    writer.add_string("general.sampling.sequence", "penalties;top_k;top_p;temperature")
    writer.add_float32("general.sampling.unknown_knob", 1.5)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    imported = import_file(str(path))
    p = imported.settings.params
    assert (p.temperature, p.top_k, p.top_p, p.min_p) == (0.6, 20, 0.95, 0.0)  # min-p: not in the sequence
    assert imported.settings.on() == ["top_k", "top_p", "temperature"]
    assert any("unknown_knob" in line for line in imported.not_carried)


# --- exports and importers ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FORMATS)
def test_every_export_round_trips_through_its_importer(name):
    """Property: for random settings (every stage, random orders, seeds, limits, stops, grammars), the engine
    is told the same thing by the export and by the export of what its importer read back."""
    f, rng = FORMATS[name], random.Random(60)
    for _ in range(60):
        s = random_settings(rng)
        text = f.text(s)
        back, _ = f.read(text)
        assert f.fields(back) == f.fields(s), text
        assert import_text(text).settings == back  # the importer finds the format by itself
        if f.engine == "llama.cpp":  # llama.cpp 0c1e570 refuses a negative window
            windows = [v for k, v in llamacpp.flags(s) if k.endswith("-last-n")]
            assert windows and all(v >= 0 for v in windows), text


@pytest.mark.parametrize("given, read", [("-1", -1), (str(llamacpp.WHOLE_TEXT), -1), ("100000", -1), ("100", 100),
                                         ("0", 0)])
def test_a_window_as_long_as_any_text_reads_as_the_whole_text(given, read):
    imported = import_text(f"llama-server --presence-penalty 0.5 --repeat-last-n {given} --dry-multiplier 0.8 "
                           f"--dry-penalty-last-n {given}")
    assert imported.settings.params.penalty_last_n == read
    assert any("--dry-penalty-last-n" in line for line in imported.not_carried) == (read >= 0)


def test_an_import_lists_what_it_could_not_carry():
    imported = import_text("llama-server -m m.gguf --port 8080 --temp 0.7 --logit-bias 15043+1 "
                           "--samplers 'top_k;temperature;infill' --top-p 0.5 --mirostat 1")
    p, left = imported.settings.params, " | ".join(imported.not_carried)
    assert imported.kind == "llama.cpp command line"
    assert (p.temperature, p.top_k, p.top_p, p.min_p) == (0.7, 40, 1.0, 0.0)  # defaults; top-p/min-p not listed
    assert "--logit-bias" in left and "'infill'" in left and "mirostat v1" in left and "top_p is set" in left
    modelfile = import_text('FROM llama3\nTEMPLATE """{{ .Prompt }}\n"""\nPARAMETER temperature 0.3\n'
                            'PARAMETER mirostat 2\nPARAMETER num_ctx 4096\nPARAMETER stop "<|eot_id|>"\n')
    assert modelfile.settings.params.temperature == 0.3 and modelfile.settings.params.top_k == 40
    assert modelfile.settings.stop == ("<|eot_id|>",) and modelfile.not_carried == [
        "PARAMETER mirostat 2: not a setting the playground has"]
    config = import_text(json.dumps({"bos_token_id": 1, "top_k": 64, "top_p": 0.95, "guidance_scale": 2}))
    assert config.settings.params.temperature == 0.0  # do_sample unset: greedy
    assert any("do_sample is false" in line for line in config.not_carried)
    assert any("guidance_scale" in line for line in config.not_carried)
    body = import_text(json.dumps({"model": "m", "messages": [], "temperature": 0.5, "min_p": 0.1,
                                   "logit_bias": {"1": 2}, "guided_regex": "[0-9]+"}))
    assert body.kind == "vLLM request body" and body.settings.grammar == {"kind": "regex", "text": "[0-9]+"}
    assert [line.split(" ")[0] for line in body.not_carried] == ["logit_bias"]


@pytest.mark.parametrize("text, message", [
    ("", "must not be empty"), ("hello world", "must be a llama-server"), ("[1, 2]", "must be a llama-server"),
    ('{"temperature": -1}', "temperature must be in"), ("{nope", "does not parse"),
    ("PARAMETER temperature 0.5\nWHAT now", "must start with an instruction"),
    ("PARAMETER seed abc", "seed must be an integer in .-inf, inf., got 'abc'"),
    ("llama-server --mirostat 3", "--mirostat must be an integer in .0, 2., got '3'"),
    ("llama-server --top-k lots", "--top-k must be a number, got 'lots'"),
    ('{"temperature": 0.5, "max_tokens": 0}', "max_new_tokens must be an integer in .1, 1000000000., got 0"),
])
def test_a_bad_import_is_refused_with_the_value(text, message):
    with pytest.raises(InvalidRequest, match=message):
        import_text(text)


# --- what an engine cannot express ------------------------------------------------------------------------


@pytest.mark.parametrize("name", FORMATS)
def test_the_cannot_express_list_on_a_run_that_uses_every_stage(name):
    f = FORMATS[name]
    facts, lines = ENGINES[f.engine], export(name, EVERY_STAGE).cannot_express
    text = "\n".join(lines)
    written_elsewhere = ("word_bias", "watermark", "synthid") if f.engine == "transformers" else ()
    for stage in EVERY_STAGE.on():
        missing = f"{facts.title} has no {STAGE_WORDS[stage]}:" in text
        assert missing == (stage not in facts.stages and stage not in written_elsewhere), stage
    for stage in written_elsewhere:
        assert f"transformers takes the run's {STAGE_WORDS[stage]}" in text
    if facts.order is not None:  # the run's transformers order against the engine's fixed one
        assert ("fixed order" in text) == (f.engine != "transformers")
    assert "the seed 7 fixes" in text
    expected = {
        "llama.cpp": ["one temperature stage", "with mirostat llama.cpp runs only temperature"],
        "vllm": [], "transformers": ["takes no json grammar"], "ollama": ["takes no json grammar", "prompt's tokens"],
        "openai": ["does not say whether top_p"],
    }[f.engine]
    for phrase in expected:
        assert phrase in text, (phrase, text)
    assert ("stop strings per request" in text) == (name == "llama-server")
    assert ("window before the first draw" in text) == (f.engine == "llama.cpp")


def test_a_fixed_order_is_named_only_where_the_run_differs():
    vllm_order = settings_for("sampling", {"temperature": 0.7, "min_p": 0.1, "top_k": 20,
                                           "order": "temperature,min_p,top_k"})
    assert not any("fixed order" in line for line in export("vllm", vllm_order).cannot_express)
    flipped = settings_for("sampling", {"temperature": 0.7, "min_p": 0.1, "top_k": 20, "order": "top_k,min_p,temperature"})
    line = next(line for line in export("vllm", flipped).cannot_express if "fixed order" in line)
    assert "temperature → min-p → top-k" in line and "top-k → min-p → temperature" in line
    assert any("in [0, 2]" in line for line in export("openai", settings_for("sampling", {"temperature": 3})).cannot_express)


# --- a run in two phases: the thinking budget, its message, the marker, the answer's chain -------------------

PHASED = {"temperature": 0.6, "thinking_budget": 64, "budget_message": "Time is up.",
          "answer_params": '{"temperature": 0.7, "top_p": 0.8}'}
BUDGET_CARRIED = {"llama-server": ("--reasoning-budget 64", "--reasoning-budget-message 'Time is up.'"),
                  "llama-cli": ("--reasoning-budget 64", "--reasoning-budget-message 'Time is up.'"),
                  "vllm": ("thinking_token_budget=64",), "vllm-json": ('"thinking_token_budget": 64',)}
SECOND_CHAIN_REFS = {"llama.cpp": ("#27123", "#25709"), "ollama": ("#27123", "#25709"), "vllm": ("#52876",),
                     "transformers": ("second generate()",), "openai": ("one set of sampling fields",)}


def phased(**changes) -> RunSettings:
    return settings_for("sampling", {**PHASED, **changes}, seed=None, max_new_tokens=256)


@pytest.mark.parametrize("name", FORMATS)
def test_each_export_carries_the_thinking_budget_or_says_it_cannot(name):
    e = export(name, phased())
    lines = "\n".join(e.cannot_express)
    if name in BUDGET_CARRIED:
        for flag in BUDGET_CARRIED[name]:
            assert flag in e.text, e.text
        assert "thinking_budget 64" not in lines
        assert ("budget message 'Time is up.' is left out" in lines) == name.startswith("vllm")
    else:
        assert "has no thinking" in lines and "thinking_budget 64 and budget message 'Time is up.' are left out" in lines
        assert "reasoning" not in e.text and "think" not in e.text
    if name == "openai":
        assert "reasoning_effort is a level, not a count of tokens" in lines
    zero = export(name, phased(budget_message="", answer_params=""))
    assert ("64" in zero.text) == (name in BUDGET_CARRIED)
    none = export(name, settings_for("greedy", {"thinking_budget": 0}))
    if name in BUDGET_CARRIED:  # 0 = no thinking: llama.cpp's "immediate end", vLLM's 0
        assert BUDGET_CARRIED[name][0].replace("64", "0") in none.text and not none.cannot_express
    else:
        assert any("thinking_budget 0 is left out" in line for line in none.cannot_express)
    assert ('"think": false' in "\n".join(none.cannot_express)) == (name == "ollama")


@pytest.mark.parametrize("name", FORMATS)
def test_the_answers_own_chain_is_said_to_be_left_out_with_what_asks_for_it(name):
    f = FORMATS[name]
    line = next(line for line in export(name, phased()).cannot_express if "answer's own values" in line)
    assert line.startswith(f"{ENGINES[f.engine].title} runs one sampler chain for the thinking and the answer")
    assert "(temperature 0.7, top_p 0.8)" in line
    for ref in SECOND_CHAIN_REFS[f.engine]:
        assert ref in line
    assert not any("answer's own" in line for line in export(name, phased(answer_params="")).cannot_express)


def test_a_runs_own_marker_is_said_where_the_engine_finds_the_models():
    marker = phased(phase_marker="ever")
    llama = "\n".join(export("llama-server", marker).cannot_express)
    assert "the run's marker 'ever' cannot be set" in llama
    vllm = export("vllm", marker)
    assert "--reasoning-config" in vllm.text and '"reasoning_end_str": "ever"' in vllm.text
    assert any("reasoning_end_str" in line for line in vllm.cannot_express)
    assert "--reasoning-parser" in export("vllm", phased()).text
    for name in ("llama-server", "vllm"):  # the tokenizer's own </think> is what the engines find too
        assert not any("marker" in line for line in export(name, phased(phase_marker="</think>")).cannot_express)
        assert not any("marker" in line for line in export(name, phased(phase_marker="ever", thinking_budget=-1))
                       .cannot_express)


@pytest.mark.parametrize("name", [n for n in FORMATS if n in BUDGET_CARRIED])
def test_the_budget_round_trips_through_llama_cpp_and_vllm(name):
    f, rng = FORMATS[name], random.Random(61)
    for _ in range(40):
        s = random_settings(rng)
        values = {**s.params.to_dict(), "thinking_budget": rng.choice([-1, 0, 1, 64, 4096]),
                  "budget_message": rng.choice(["", "Time is up.", "--- stop -", "é \"quoted\" 'x'"])}
        s = RunSettings(sampler_params(values), s.strategy, s.seed, s.max_new_tokens, s.stop, s.grammar)
        back, _ = f.read(f.text(s))
        assert f.fields(back) == f.fields(s), f.text(s)
        assert back.params.thinking_budget == s.params.thinking_budget
        if name.startswith("llama") and s.params.thinking_budget >= 0:
            assert back.params.budget_message == s.params.budget_message


def test_an_imported_reasoning_budget_sets_the_thinking_budget():
    imported = import_text("llama-server -m m.gguf --temp 0.6 --reasoning-budget 64 "
                           "--reasoning-budget-message 'Time is up.'")
    p = imported.settings.params
    assert (p.temperature, p.thinking_budget, p.budget_message) == (0.6, 64, "Time is up.")
    assert imported.not_carried == []
    assert import_text("llama-cli --reasoning-budget=0").settings.params.thinking_budget == 0
    capped = import_text("llama-server --reasoning-budget 9000")
    assert capped.settings.params.thinking_budget == 4096 and "goes up to 4096" in capped.not_carried[0]
    body = import_text(json.dumps({"model": "m", "temperature": 0.6, "thinking_token_budget": 12}))
    assert body.kind == "vLLM request body" and body.settings.params.thinking_budget == 12
    assert import_text('{"temperature": 1, "top_k": 5, "thinking_token_budget": null}').settings.params.thinking_budget == -1
    with pytest.raises(InvalidRequest, match="--reasoning-budget must be an integer in .-1, inf., got '-2'"):
        import_text("llama-server --reasoning-budget -2")
    s = import_text(export("llama-server", phased()).text).settings  # the export read back
    assert engine_settings.phase_values(s.params) == {"thinking_budget": 64, "budget_message": "Time is up."}


def test_the_phases_are_not_changed_chain_values_and_greedy_keeps_them():
    s = phased(phase_marker="ever")
    assert engine_settings.changed_values(s.params) == {"temperature": 0.6}
    assert engine_settings.phase_values(s.params) == {"phase_marker": "ever", "thinking_budget": 64, "budget_message": "Time is up.",
                                      "answer_params": '{"temperature": 0.7, "top_p": 0.8}'}
    greedy = settings_for("greedy", {"thinking_budget": 5, "phase_marker": "ever", "top_k": 3})
    assert greedy.params.temperature == 0 and greedy.params.top_k == 0
    assert engine_settings.phase_values(greedy.params) == {"thinking_budget": 5, "phase_marker": "ever"}


def test_export_config_carries_the_phases_of_the_runs_flags(capsys):
    assert main(["export-config", "--engine", "all", "--strategy", "sampling", "--temperature", "0.6",
                 "--thinking-budget", "64", "--budget-message", "Time is up.", "--answer-params",
                 '{"temperature":0.7,"top_p":0.8}']) == 0
    out, _ = capsys.readouterr()
    assert out.count("--reasoning-budget 64") == 2 and out.count("thinking_token_budget") >= 2
    assert out.count("thinking_budget 64 and budget message 'Time is up.' are left out") == 3
    assert out.count("answer's own values (temperature 0.7, top_p 0.8)") == len(FORMATS)
    assert main(["export-config", "--facts"]) == 0
    facts = capsys.readouterr()[0]
    assert facts.count("  thinking budget: ") == len(ENGINES) and facts.count("a second chain for the answer") == len(ENGINES)
    assert "--reasoning-budget N" in facts and "thinking_token_budget" in facts


# --- transformers parity on recorded toy runs ---------------------------------------------------------------

TRANSFORMERS_STAGES = tuple(ENGINES["transformers"].stages)


@pytest.fixture(scope="module")
def tiny_generator():
    """A 16-token transformers model: only its generate() machinery is used, to build the processors."""
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                      num_attention_heads=1, num_key_value_heads=1)
    return transformers.LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def recorded_runs(store):
    """Toy runs with random settings of the stages transformers has, each with every token's probabilities
    recorded (toy's vocabulary is 16: top_n 16 is all of it)."""
    rng, runs = random.Random(11), []
    for i in range(18):
        s = random_settings(rng, TRANSFORMERS_STAGES, p_on=0.45, orders=ENGINES["transformers"].order,
                            shuffle=i % 3 == 0)
        s = settings_for("sampling", {**s.params.to_dict(), "loop_repeats": 0}, seed=i, max_new_tokens=10)
        values = {k: v for k, v in s.params.to_dict().items() if k in SAMPLER_FIELDS}
        trace = run(store, Request(model="toy", strategy="sampling", prompt="1 2", params=values, seed=i,
                                   max_new_tokens=10, top_n=16)).to_dict()
        runs.append((s, trace))
    return runs


SAMPLER_FIELDS = set(sampler_params({}).to_dict())


def transformers_probs(model, kwargs: dict, trace: dict) -> list[torch.Tensor]:
    """Per step, transformers' own processors (as generate() builds them from the exported config) applied to
    the recorded raw logits, as probabilities over the 16 tokens."""
    from transformers import GenerationConfig
    config, _ = model._prepare_generation_config(GenerationConfig(**kwargs))
    ids = list(trace["prompt_ids"])
    out = []
    for step, token in zip(trace["steps"], trace["tokens"]):
        raw = torch.full((1, 16), float("-inf"))
        for c in step["candidates"]:
            raw[0, c["id"]] = torch.tensor(c["raw_prob"]).log()
        processors = model._get_logits_processor(config, input_ids_seq_length=len(trace["prompt_ids"]), device="cpu")
        out.append(processors(torch.tensor([ids]), raw).softmax(-1)[0])
        ids.append(token["id"])
    return out


def test_transformers_own_processors_give_the_recorded_distribution(tiny_generator, recorded_runs):
    """Property: for every run whose stages transformers has, the exported GenerationConfig through
    generate()'s processors gives the run's recorded final distribution at every step; where the run's order
    is not transformers' the export says so instead."""
    checked = said = 0
    for s, trace in recorded_runs:
        gaps = export("transformers", s).cannot_express
        if any("fixed order" in line for line in gaps):
            said += 1
            continue
        assert not any("has no" in line for line in gaps)
        kwargs = transformers_config.kwargs(s)
        assert transformers_config.read_python(transformers_config.text(s))[0].params.temperature == (
            s.params.temperature if s.samples else 0.0)
        for step, probs in zip(trace["steps"], transformers_probs(tiny_generator, kwargs, trace)):
            want = torch.zeros(16)
            for c in step["candidates"]:
                want[c["id"]] = c["prob"]
            if not s.samples:  # greedy: the same argmax
                assert int(probs.argmax()) == step["chosen"]
            else:
                assert torch.allclose(probs, want, atol=2e-4), (s.on(), probs, want)
        checked += 1
    assert checked >= 8 and said >= 3, (checked, said)


# --- the CLI and the trace's export -----------------------------------------------------------------------


def test_export_config_from_flags_and_from_a_trace(capsys, tmp_path, recorded_runs):
    assert main(["export-config", "--engine", "llama-server", "--strategy", "sampling", "--temperature", "0.7",
                 "--min-p", "0.05", "--xtc-probability", "0.5", "--order", "llama.cpp"]) == 0
    out, err = capsys.readouterr()
    assert "--temp 0.7" in out and "--samplers 'penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature'" in out
    assert "cannot express: the seed 0" in err
    path = tmp_path / "run.json"
    s, trace = recorded_runs[0]
    path.write_text(json.dumps(trace))
    assert main(["export-config", "--engine", "all", "--trace", str(path)]) == 0
    out, _ = capsys.readouterr()
    assert out.count("# ---- ") == len(FORMATS)
    texts = export_trace(trace)
    assert set(texts) == set(FORMATS) and settings_of_trace(trace).params == s.params
    assert main(["export-config", "--facts"]) == 0
    out, _ = capsys.readouterr()
    assert out.count("source: ") >= 3 * len(ENGINES) and "vLLM: vLLM main at 3e342658" in out
    assert main(["export-config", "--engine", "nope"]) == 2
    assert "--engine must be one of llama-server" in capsys.readouterr().err


def test_a_run_that_ends_early_exports_the_limit_it_asked_for(store):
    trace = run(store, Request("toy", "sampling", "1 2", {"temperature": 1.0}, seed=4, max_new_tokens=40)).to_dict()
    assert trace["finish_reason"] == "eos" and len(trace["tokens"]) == 7 and trace["max_new_tokens"] == 40
    texts = export_trace(trace)
    assert "--n-predict 40" in texts["llama-server"] and "max_tokens=40" in texts["vllm"]
    assert settings_of_trace({k: v for k, v in trace.items() if k != "max_new_tokens"}).max_new_tokens == 7


def test_run_takes_a_preset_and_an_import(capsys, tmp_path, store):
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--preset", "universal", "--max-new-tokens", "3",
                 "--json", "--min-p", "0.2"]) == 0
    out, err = capsys.readouterr()
    trace = json.loads(out)
    assert trace["strategy"] == "sampling" and trace["params"]["min_p"] == 0.2  # the flag beside it wins
    assert "[preset] universal: set temperature 1, min_p 0.1" in err
    path = tmp_path / "Modelfile"
    path.write_text("PARAMETER temperature 0.5\nPARAMETER top_k 3\nPARAMETER seed 9\nPARAMETER stop END\n")
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--import", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    trace = json.loads(out)
    assert trace["params"]["temperature"] == 0.5 and trace["params"]["top_k"] == 3 and trace["seed"] == 9
    assert "not carried: stop strings ['END']" in err


def test_settings_refuse_what_no_engine_config_holds():
    with pytest.raises(InvalidRequest, match="greedy, sampling or gumbel run, got strategy 'beam'"):
        settings_for("beam", {})
    with pytest.raises(InvalidRequest, match="stop must be at most 16"):
        RunSettings(stop=("x",) * 17)
    with pytest.raises(InvalidRequest, match="a trace must be the JSON object"):
        settings_of_trace({"text": "hi"})
    assert llamacpp.gbnf_choices('root ::= "a" | "b"') == ["a", "b"] and llamacpp.gbnf_choices("root ::= x") is None


def test_a_hub_model_card_reads_the_hubs_generation_config(monkeypatch, tmp_path):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    path = tmp_path / "generation_config.json"
    path.write_text(json.dumps({"do_sample": True, "temperature": 0.7, "top_p": 0.8, "eos_token_id": 2}))
    asked = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo, name: asked.append((repo, name)) or path)
    chosen = preset("model card", "someorg/some-model")
    assert asked == [("someorg/some-model", "generation_config.json")]
    assert chosen.values["temperature"] == 0.7 and chosen.values["top_p"] == 0.8
    assert chosen.source == "https://huggingface.co/someorg/some-model/blob/main/generation_config.json"

    def offline(repo, name):
        raise OSError("no network")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(InvalidRequest, match="could not be had here .OSError.; offline models: toy"):
        preset("model card", "someorg/some-model")
