"""The new stages inside a real run on the toy model: the chosen token fed back to mirostat, XTC on
the toy's 70/30 branch, each stage's record in the trace, the views drawn from those records, and
the CLI's flags for them."""
import pytest

from playground.charts import samplers as charts_samplers
from playground.cli import main
from playground.engine import Request, run


def trace_of(store, params, seed=4, n=12, prompt="1 2"):
    return run(store, Request(model="toy", strategy="sampling", prompt=prompt, params=params, seed=seed,
                              max_new_tokens=n)).to_dict()


def stage(step, name):
    return next(st for st in step["stages"] if st["name"] == name)


def test_mirostat_mu_before_each_step_is_mu_after_the_last(store):
    t = trace_of(store, {"mirostat_tau": 1.5, "mirostat_eta": 0.2, "temperature": 1.5})
    records = [stage(s, "mirostat")["decision"] for s in t["steps"]]
    assert records[0]["mu"] == pytest.approx(3.0)
    for before, after in zip(records, records[1:]):
        assert after["mu"] == pytest.approx(before["mu_after"], rel=1e-5)
        assert before["mu_after"] == pytest.approx(before["mu"] - 0.2 * (before["surprise"] - 1.5), abs=1e-5)
    fig = charts_samplers.mirostat_figure(t)
    mu_line = next(tr for tr in fig.data if tr.name == "μ (cap)")
    assert list(mu_line.y) == [r["mu"] for r in records]


def test_xtc_on_the_70_30_branch_removes_a_so_the_wins(store):
    plain = trace_of(store, {"temperature": 0.0})
    # llama.cpp order: XTC before temperature (T = 0 first would leave it one token)
    xtc = trace_of(store, {"temperature": 0.0, "xtc_probability": 1.0, "xtc_threshold": 0.2, "order": "llama.cpp"})
    assert plain["tokens"][0]["text"] == " a"
    first = xtc["steps"][0]
    record = stage(first, "xtc")["decision"]
    assert record["acted"] and record["removed"] == 1 and xtc["tokens"][0]["text"] == " the"
    raw = {c["text"]: c["raw_prob"] for c in first["candidates"]}
    assert raw[" a"] == pytest.approx(0.7, abs=0.06) and raw[" the"] == pytest.approx(0.3, abs=0.06)


def test_every_new_stage_records_its_decision_in_a_run(store):
    params = dict(typical_p=0.95, epsilon_cutoff=0.001, eta_cutoff=0.001, top_nsigma=2.0, xtc_probability=0.5,
                  dry_multiplier=0.8, dynatemp_min=0.5, dynatemp_max=1.5, mirostat_tau=4.0,
                  no_repeat_ngram_size=4, word_bias="hill=-1", order="llama.cpp")
    t = trace_of(store, params)
    names = [st["name"] for st in t["steps"][0]["stages"]][1:]
    assert names == t["chain"][:-1]
    assert set(names) == {"word_bias", "no_repeat_ngram", "dry", "top_nsigma", "typical_p", "xtc", "epsilon", "eta",
                          "dynamic_temperature", "mirostat"}
    for s in t["steps"]:
        assert all(st.get("decision") for st in s["stages"][1:])
    temps = [stage(s, "dynamic_temperature")["decision"]["t"] for s in t["steps"]]
    assert all(0.5 <= x <= 1.5 for x in temps)
    views = {v.title for v in charts_samplers.views(t)}
    assert views == {"Mirostat μ", "Adaptive stages"}


def test_cli_takes_kebab_case_flags_for_the_new_stages(capsys):
    code = main(["run", "--model", "toy", "--prompt", "1 2", "--strategy", "sampling", "--xtc-probability", "1",
                 "--xtc-threshold", "0.2", "--temperature", "0", "--order", "llama.cpp", "--max-new-tokens", "3"])
    assert code == 0 and capsys.readouterr().out.startswith("the")


@pytest.mark.parametrize("args, message", [
    (["--typical-p", "0"], "typical_p must be in (0, 1], got 0"),
    (["--epsilon-cutoff", "1"], "epsilon_cutoff must be in [0, 1), got 1"),
    (["--top-nsigma", "-2"], "top_nsigma must be in [0, 100], got -2"),
    (["--xtc-threshold", "1.5"], "xtc_threshold must be in [0, 1], got 1.5"),
    (["--dry-allowed-length", "0"], "dry_allowed_length must be in [1, 1000], got 0"),
    (["--dry-sequence-breakers", "oops"], "dry_sequence_breakers must be comma-separated quoted strings"),
    (["--dynatemp-exponent", "0"], "dynatemp_exponent must be in (0, 100], got 0"),
    (["--mirostat-eta", "2"], "mirostat_eta must be in (0, 1], got 2"),
    (["--no-repeat-ngram-size", "1.5"], "no_repeat_ngram_size must be an integer, got '1.5'"),
    (["--word-bias", "the=9000"], "word_bias entries must be word or word=bias with bias in [-100, 100] or -inf"),
    (["--order", "top_k,bogus"], "order must be transformers or llama.cpp, or stage names"),
])
def test_cli_refuses_bad_values_with_exit_2(capsys, args, message):
    assert main(["run", "--model", "toy", "--prompt", "1 2", "--strategy", "sampling"] + args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and message in err


def test_dry_span_is_underlined_in_the_text(store):
    from playground.charts.text import dry_span, token_html
    t = trace_of(store, {"temperature": 0.0, "dry_multiplier": 0.5, "dry_allowed_length": 1},
                 prompt="1 2 3 4 1 2 3", n=3)
    d = stage(t["steps"][0], "dry")["decision"]
    assert d["match_length"] == 3 and (d["span_start"], d["span_end"], d["repeat_start"]) == (0, 3, 4)
    # a repeat inside the generated text: prompt of 2 tokens, generated x y z x y, at step 5 DRY found
    # "x y": its earlier copy at context positions [2, 4), the repeat from 5 to the end of the context
    toks = [{"id": i, "text": w, "logprob": -0.1, "raw_logprob": -0.1} for i, w in enumerate("xyzxyq")]
    dry = {"name": "dry", "probs": [], "kept": [], "kept_count": 1,
           "decision": {"match_length": 2, "span_start": 2, "span_end": 4, "repeat_start": 5}}
    synthetic = {"prompt_ids": [0, 1], "tokens": toks, "steps": [{"stages": [dry], "candidates": []} for _ in toks]}
    assert dry_span(synthetic, 5) == {0: "dotted", 1: "dotted", 3: "solid", 4: "solid"}
    assert dry_span(synthetic, 4) == {0: "dotted", 1: "dotted", 3: "solid"}
    assert token_html(synthetic, 5).count("underline solid") == 2


def test_every_new_stage_runs_on_a_device_without_float64(store):
    from test_no_float64 import RefuseFloat64
    params = dict(typical_p=0.95, epsilon_cutoff=0.001, eta_cutoff=0.001, top_nsigma=2.0, xtc_probability=0.5,
                  dry_multiplier=0.8, dynatemp_min=0.5, dynatemp_max=1.5, mirostat_tau=4.0,
                  no_repeat_ngram_size=4, word_bias="hill=-1", top_h=0.9, p_less=True, adaptive_p_target=0.3)
    store.get("toy")
    with RefuseFloat64():
        t = trace_of(store, params, n=6)
    assert len(t["tokens"]) >= 1 and len(t["steps"][0]["stages"]) == 14
