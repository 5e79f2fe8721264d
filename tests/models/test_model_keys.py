"""Model keys: offline keys or hub repo ids, never paths; an operator's allow-list; the hub size cap."""
from __future__ import annotations

import pytest

from playground.engine import Request
from playground.errors import InvalidRequest
from playground.models import OFFLINE, ModelStore, ModelUnavailable
from playground.models import store as models
from playground.serving.hub_size import GB, ModelTooLarge, SizeCap, cap_from_env, weights_bytes
from playground.serving.model_keys import KeyPolicy, check_key
from playground.ui.controls import model_choices
from playground.ui.events import is_chat_model
from playground.ui.handlers import generate

HOSTILE = {
    "/etc": "namespace/name",
    "/root/.cache/huggingface": "namespace/name",
    "./assets/toy": "namespace/name",
    "../secrets": "namespace/name",
    "..": "namespace/name",
    "a/../b": "namespace/name",
    "a/..": "namespace/name",
    "~/models": "namespace/name",
    "C:\\models\\x": "namespace/name",
    "https://huggingface.co/gpt2": "namespace/name",
    "hf://org/model": "namespace/name",
    "file:///etc/passwd": "namespace/name",
    "": "not empty",
    "   ": "not empty",
    "gpt2": "namespace/name",  # a bare name could be a directory in the server's working directory
    "org/na..me": "no '--' or '..'",
    "org--x/name": "no '--' or '..'",
    "org/name.git": "no '--' or '..'",
    "orgé/naïve": "ASCII letters",
    "ｏｒｇ/ｍｏｄｅｌ": "ASCII letters",  # fullwidth letters
    "org/name\u200b": "ASCII letters",  # zero-width space
    "org/" + "x" * 95: "at most 96",
    "a/b/c": "namespace/name",
    "org/-name": "namespace/name",
}


@pytest.mark.parametrize("key", sorted(HOSTILE))
def test_paths_urls_and_odd_strings_are_refused_with_the_rule(key):
    with pytest.raises(InvalidRequest) as err:
        check_key(key, OFFLINE)
    message = str(err.value)
    assert HOSTILE[key] in message and "toy" in message and repr(key.strip()) in message


@pytest.mark.parametrize("key", ["toy", " smollm2-135m ", "HuggingFaceTB/SmolLM2-360M-Instruct", "gpt2-org/gpt2.5_x",
                                 "openai-community/gpt2"])
def test_offline_keys_and_hub_ids_pass(key):
    assert check_key(key, OFFLINE) == key.strip()


def test_a_hub_id_that_names_a_directory_here_is_refused(tmp_path, monkeypatch):
    (tmp_path / "org" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidRequest, match="not the name of a file or directory"):
        check_key("org/model", OFFLINE)
    assert check_key("org/other", OFFLINE) == "org/other"


def test_engine_and_page_refuse_a_path_before_loading_anything(store):
    before = store.loaded()
    with pytest.raises(ModelUnavailable, match="namespace/name"):
        next(generate(store, Request("/tmp", "greedy", "1 2")))
    with pytest.raises(ModelUnavailable, match="namespace/name"):
        store.get("../assets/toy")
    assert store.loaded() == before
    assert not is_chat_model("/etc")


def test_the_operator_list_restricts_the_keys(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODELS", "toy, HuggingFaceTB/SmolLM2-360M-Instruct")
    policy = KeyPolicy.from_env(OFFLINE)
    assert policy.check("toy") == "toy"
    with pytest.raises(InvalidRequest, match=r"one of HuggingFaceTB/SmolLM2-360M-Instruct, toy on this server, "
                                             r"got 'toy-small'"):
        policy.check("toy-small")
    with pytest.raises(ModelUnavailable, match="on this server"):
        ModelStore("cpu").get("gemma3-270m")
    assert [key for _, key in model_choices()] == ["toy"]


def test_a_bad_operator_list_stops_the_start(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MODELS", "toy,/srv/models/x")
    with pytest.raises(InvalidRequest, match=r"\$PLAYGROUND_MODELS: model must be .* got '/srv/models/x'"):
        KeyPolicy.from_env(OFFLINE)


# --- the size cap -----------------------------------------------------------------------------------

SEVENTY_B = {f"model-{i:05d}-of-00030.safetensors": int(4.7 * GB) for i in range(1, 31)} | {
    "config.json": 700, "pytorch_model.bin": int(140 * GB)}


def test_weights_bytes_counts_what_from_pretrained_fetches():
    assert weights_bytes(SEVENTY_B) == 30 * int(4.7 * GB)  # safetensors, not the .bin beside them
    assert weights_bytes({"pytorch_model.bin": 500, "config.json": 2}) == 500
    assert weights_bytes({"onnx/model.safetensors": 9, "model.bin": 3}) == 3


def test_the_cap_refuses_a_large_hub_entry_with_both_numbers():
    cap = SizeCap(4 * GB, metadata=lambda hub_id: SEVENTY_B)
    with pytest.raises(ModelTooLarge, match=r"'meta/huge' has 141\.00 GB of weights; .* at most 4\.00 GB"):
        cap.check("meta/huge")
    assert SizeCap(4 * GB, metadata=lambda h: {"model.safetensors": 538_000_000}).check("org/small") == 538_000_000


def test_an_unknown_size_is_refused():
    def offline(hub_id: str) -> dict[str, int]:
        raise ConnectionError("no route to host")

    with pytest.raises(InvalidRequest, match="size could not be read from the hub .*no route to host"):
        SizeCap(4 * GB, metadata=offline).check("org/x")
    with pytest.raises(InvalidRequest, match="lists no weight files"):
        SizeCap(4 * GB, metadata=lambda h: {}).check("org/x")


def test_the_cap_default_and_override(monkeypatch):
    monkeypatch.delenv("PLAYGROUND_MAX_MODEL_GB", raising=False)
    assert cap_from_env(gpu=False) < cap_from_env(gpu=True)
    monkeypatch.setenv("PLAYGROUND_MAX_MODEL_GB", "0.5")
    assert cap_from_env(gpu=True) == 0.5 * GB
    monkeypatch.setenv("PLAYGROUND_MAX_MODEL_GB", "-1")
    with pytest.raises(InvalidRequest, match="got '-1'"):
        cap_from_env(gpu=False)


def test_the_store_checks_the_size_before_downloading(monkeypatch):
    downloads = []

    def fake_load(path_or_id, device, **kw):
        if kw.get("local_files_only"):
            raise OSError("not in the local hub cache")
        downloads.append(path_or_id)
        raise AssertionError("must not download")

    monkeypatch.setattr(models, "_load_pretrained", fake_load)
    monkeypatch.setattr(models, "hub_reachable", lambda: True)
    store = ModelStore("cpu", size_cap=SizeCap(4 * GB, metadata=lambda hub_id: SEVENTY_B))
    with pytest.raises(ModelTooLarge, match="141.00 GB"):
        store.get("meta/huge")
    assert downloads == [] and store.loaded() == []
