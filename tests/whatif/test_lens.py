"""The logit lens (strategies/lens.py, playground/whatif/lens.py, playground/charts/lens.py): the record on
hand-made rows (its buffers, the floor under subnormal probabilities), the head it reads int4's inner rows
through, the embeddings' row of the toy by hand from its weights, the last row equal to the run's
recorded raw distribution on SmolLM2 in float32 and Gemma 3 in int4, the chart drawn from the record,
the CLI's --lens, and bad steps refused."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from playground.charts.lens import FLOOR, decade, lens_figure, views
from playground.engine import Request, run
from playground.errors import InvalidRequest
from playground.whatif.lens import lens
from strategies.lens import BLOCK, lens_record, top_of_rows

ROOT = Path(__file__).resolve().parents[2]


def test_the_record_of_hand_made_rows():
    # three rows over a 4-token vocabulary; the chosen token is 2
    logits = torch.tensor([[3.0, 1.0, 0.0, 2.0],   # token 2 is last: rank 4
                           [0.0, 2.0, 2.0, 1.0],   # tied with token 1: rank 1 (none strictly above)
                           [1.0, 0.0, 4.0, 3.0]])  # the last row: 2 on top, then 3, 0, 1
    rec = lens_record(logits, 2, lambda i: f"t{i}", columns=2, row_top=1)
    assert [c["id"] for c in rec["columns"]] == [2, 3] and rec["top_columns"] == 2
    assert [r["chosen_rank"] for r in rec["rows"]] == [4, 1, 1]
    assert rec["first_top_layer"] == 1
    probs = logits.softmax(-1)
    for r, row in zip(rec["rows"], probs):
        # the record keeps 6 significant digits
        assert r["probs"] == pytest.approx([float(row[2]), float(row[3])], rel=5e-6)
        assert r["chosen_prob"] == pytest.approx(float(row[2]), rel=5e-6)
        assert r["entropy"] == pytest.approx(float(-(row * row.log()).sum()), rel=5e-6)
        assert r["top"][0]["id"] == int(row.argmax())
    # a chosen token outside the last row's top columns is added after them
    rec = lens_record(logits, 1, str, columns=2)
    assert [c["id"] for c in rec["columns"]] == [2, 3, 1] and rec["top_columns"] == 2
    assert [r["chosen_rank"] for r in rec["rows"]] == [3, 1, 4]  # tied at the top of row 1
    assert rec["first_top_layer"] == 1
    assert lens_record(logits[:1], 2, str)["first_top_layer"] is None  # no row ranks it first


@pytest.mark.parametrize("width", [4 * BLOCK * 10, 262_144, 49_152 + 517, 300])
def test_the_blocked_selection_is_each_rows_top(width):
    gen = torch.Generator().manual_seed(width)
    x = torch.randn(19, width, generator=gen)
    x[3, -5:] += 10  # a row whose top is in the columns after the last whole block
    x[4, 7 * BLOCK:8 * BLOCK] += 10  # a row whose top ten are all in one block
    x[5] = x[5].to(torch.bfloat16).float()  # ties, as bfloat16 logits have them
    x[6, :] = 1.0  # all tied
    values, index = top_of_rows(x, 10)
    want = x.topk(10, dim=-1).values
    assert torch.equal(values, want)
    assert torch.equal(x.gather(1, index), values)  # each index holds its value
    assert all(len(set(row)) == 10 for row in index.tolist())  # ten distinct tokens a row
    untied = [r for r in range(19) if r not in (5, 6)]
    assert torch.equal(index[untied].sort(-1).values, x.topk(10, dim=-1).indices[untied].sort(-1).values)


def test_the_toys_embedding_row_by_hand(store, toy):
    trace = run(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=4)).to_dict()
    rec = lens(store, trace, 2)
    ids = trace["prompt_ids"] + [t["id"] for t in trace["tokens"][:2]]
    gpt = toy.model.transformer
    with torch.no_grad():
        x = gpt.wte.weight[ids[-1]] + gpt.wpe.weight[len(ids) - 1]  # the embeddings at the last position
        probs = toy.model.lm_head(gpt.ln_f(x)).softmax(-1)
    assert rec["rows"][0]["layer"] == 0 and len(rec["rows"]) == toy.num_layers + 1
    cols = [c["id"] for c in rec["columns"]]
    assert rec["rows"][0]["probs"] == pytest.approx([float(probs[i]) for i in cols], rel=1e-5)
    assert rec["step"] == 2 and rec["position"] == len(ids) and rec["chosen"]["id"] == trace["tokens"][2]["id"]


def test_the_record_leaves_its_rows_unless_told_to_spend_them():
    logits = torch.tensor([[3.0, 1.0, 0.0, 2.0], [1.0, 0.0, 4.0, 3.0]])
    kept = logits.clone()
    first = lens_record(logits, 2, str)
    assert torch.equal(logits, kept)
    assert lens_record(logits, 2, str, spend=True) == first
    assert not torch.equal(logits, kept)  # its buffer held the probabilities


def test_a_probability_under_the_smallest_normal_float_is_zero():
    # token 1 is 100 nats below token 0: p = e^-100 = 3.7e-44, a subnormal float32, recorded as 0;
    # token 2 at 80 nats below is 1.8e-35, a normal float, recorded as it is
    logits = torch.tensor([[0.0, -100.0, -80.0], [0.0, -100.0, -80.0]])
    rec = lens_record(logits, 1, str, columns=3)
    row = rec["rows"][-1]
    assert row["chosen_prob"] == 0.0 and row["chosen_rank"] == 3
    assert row["probs"] == pytest.approx([1.0, 0.0, math.exp(-80)], rel=1e-5)
    assert row["entropy"] == pytest.approx(80 * math.exp(-80), rel=1e-3) and math.isfinite(row["entropy"])


@pytest.mark.parametrize("native", [True, False])
def test_the_lens_reads_int4_inner_rows_through_the_dense_head_only_where_bfloat16_is_native(monkeypatch, native):
    from playground.models import dtypes
    from playground.models.fast.layers import lens_head
    monkeypatch.setattr(dtypes, "cpu_has_native_bf16", lambda *a: native)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    dense = torch.zeros(4, 2, dtype=torch.bfloat16)
    blocks = object()  # stands for the file's 4-bit head (an Int4Linear)
    assert lens_head(blocks, dense) is (dense if native else blocks)
    assert lens_head(dense, dense) is dense  # a dense head is read as it is
    assert lens_head(blocks, dense.float()) is blocks  # a float32 head is the model's own: kept
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")  # held to AVX2's kernels
    assert lens_head(blocks, dense) is blocks

# transformers' float32 forward over the whole context in one pass sums in another order than the run's
# cached steps did (30 layers: about 1e-5 relative on a probability); a lean forward's one pass is its
# steps bit for bit, so the int4 row equals the record to its last digit.
@pytest.mark.parametrize("model, dtype, prompt, rel", [
    ("smollm2-135m", "float32", "Name a colour of the sky.", 1e-4),
    ("gemma3-270m", "int4", "The capital of France is", 0.0)])
def test_the_last_row_is_the_recorded_raw_distribution(store, model, dtype, prompt, rel):
    trace = run(store, Request(model, "sampling", prompt, {"temperature": 0.8}, seed=3, max_new_tokens=5,
                               dtype=dtype)).to_dict()
    assert trace["dtype"] == dtype
    for step in (0, 4):
        rec = lens(store, trace, step)
        raw = {c["id"]: c["raw_prob"] for c in trace["steps"][step]["candidates"]}
        last = rec["rows"][-1]
        shared = [(raw[c["id"]], p) for c, p in zip(rec["columns"], last["probs"]) if c["id"] in raw]
        assert len(shared) >= 5
        for recorded, read in shared:  # both rounded to the trace's 6 digits
            assert read == pytest.approx(recorded, rel=rel, abs=0)
        ranked = sorted(raw, key=raw.get, reverse=True)
        assert last["chosen_rank"] == ranked.index(trace["steps"][step]["chosen"]) + 1
        assert len(rec["rows"]) == trace_layers(store, model) + 1
        assert rec["model"] == model and rec["dtype"] == dtype


def trace_layers(store, model):
    return store.get(model).num_layers


def test_bad_steps_are_refused_with_the_range(store, toy):
    trace = run(store, Request("toy", "greedy", "1 2", {}, max_new_tokens=3)).to_dict()
    for bad in (3, -1, "x", 1.5):
        with pytest.raises(InvalidRequest, match=r"step must be an integer in \[0, 2\]"):
            lens(store, trace, bad)
    with pytest.raises(InvalidRequest, match="generate a run first"):
        lens(store, {**trace, "tokens": []}, 0)


def test_the_chart_draws_the_record(store, toy):
    trace = run(store, Request("toy", "sampling", "1 2", {}, seed=1, max_new_tokens=4)).to_dict()
    trace["lens"] = [lens(store, trace, 1)]
    assert views(trace, 0) == [] and len(views(trace, 1)) == 1
    rec = trace["lens"][0]
    fig = lens_figure(rec)
    heat = next(t for t in fig.data if t.type == "heatmap")
    assert [list(row) for row in heat.z] == [[decade(p) for p in r["probs"]] for r in rec["rows"]]
    assert list(heat.y) == [r["layer"] for r in rec["rows"]]
    rank = next(t for t in fig.data if t.type == "scatter")
    assert list(rank.x) == [r["chosen_rank"] for r in rec["rows"]]
    first = rec["first_top_layer"]
    assert (f"layer {first}" if first else "embeddings" if first == 0 else "no layer") in fig.layout.title.text
    assert decade(0.0) == FLOOR and decade(0.01) == pytest.approx(math.log10(0.01))


@pytest.mark.slow  # subprocesses
def test_the_cli_prints_the_lens_and_puts_it_in_the_json():
    cmd = [sys.executable, "-m", "playground", "run", "--model", "toy", "--prompt", "1 2", "--max-new-tokens", "3",
           "--lens", "1", "--lens", "2"]
    out = subprocess.run(cmd + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert [r["step"] for r in data["lens"]] == [1, 2]
    text = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "logit lens at step 2" in text.stdout and text.stdout.count("\n") > 8
    bad = subprocess.run(cmd[:-1] + ["7"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "a lens step must be an integer in [0, 2], got 7" in bad.stderr


# --- read in the run: the step's own forward's hidden states, no second pass ----------------------------

@pytest.mark.parametrize("model, dtype", [("smollm2-135m", "float32"), ("gemma3-270m", "int4")])
def test_the_run_reads_its_steps_layers_as_it_decodes(store, model, dtype):
    req = dict(model=model, strategy="sampling", prompt="The capital of France is", params={"temperature": 0.8},
               seed=5, max_new_tokens=6, dtype=dtype)
    plain = run(store, Request(**req)).to_dict()
    read = run(store, Request(**req, lens=(4, 0))).to_dict()
    assert [r["step"] for r in read["lens"]] == [0, 4]
    # reading the layers changes nothing else in the run
    without = {k: v for k, v in read.items() if k not in ("lens", "timing")}
    assert without == {k: v for k, v in plain.items() if k != "timing"}
    for rec in read["lens"]:
        step = read["steps"][rec["step"]]
        raw = {c["id"]: c["raw_prob"] for c in step["candidates"]}
        last = rec["rows"][-1]
        shared = [(raw[c["id"]], p) for c, p in zip(rec["columns"], last["probs"]) if c["id"] in raw]
        assert len(shared) >= 5 and all(recorded == p for recorded, p in shared)  # the step's own forward
        assert rec["chosen"]["id"] == step["chosen"] and rec["position"] == len(read["prompt_ids"]) + rec["step"]
    if dtype == "int4":  # a lean forward's one pass is its steps: the what-if reads the same rows
        after = lens(store, plain, 4)
        assert [r["probs"] for r in after["rows"]] == [r["probs"] for r in read["lens"][1]["rows"]]


def test_lens_steps_out_of_range_are_refused():
    for bad in ((6,), (-1,), ("2",)):
        with pytest.raises(InvalidRequest, match=r"a lens step must be an integer in \[0, 5\]"):
            Request("toy", "greedy", "1 2", {}, max_new_tokens=6, lens=bad)
