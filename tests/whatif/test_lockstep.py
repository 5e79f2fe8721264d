"""Two models reading one text in lockstep (playground/whatif/lockstep.py, playground/charts/lockstep.py,
python -m playground diff): a model against itself is 0 everywhere; toy against toy-small equals the KL,
total variation, overlap and argmax computed here from both models' own forwards; SmolLM2 in float32
against int4 parts a little; a pair without one tokenizer is refused; the charts draw the record."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from playground.charts.lockstep import lockstep_figure, step_figure
from playground.errors import InvalidRequest
from playground.whatif import lockstep as lockstep_module
from playground.whatif.lockstep import lockstep

ROOT = Path(__file__).resolve().parents[2]


def test_a_model_against_itself_is_zero_everywhere(store):
    record = lockstep(store, "1 2 3 4 5 6", "toy", "toy")
    s = record["summary"]
    assert s["tokens"] == 5 and s["agreement"] == 1.0 and s["mean_overlap"] == 1.0
    assert all(st[k] == 0.0 for st in record["steps"] for k in ("kl_ab", "kl_ba", "tv"))
    assert all(st["p_a"] == st["p_b"] for st in record["steps"])


def test_toy_against_toy_small_by_hand(store, toy, toy_small):
    record = lockstep(store, "1 2 9 10 11", "toy", "toy-small", top_k=3)
    ids = torch.tensor([[1, 2, 9, 10, 11]])
    with torch.no_grad():
        la = toy.model(ids).logits[0, :-1].float().log_softmax(-1)
        lb = toy_small.model(ids).logits[0, :-1].float().log_softmax(-1)
    pa, pb = la.exp(), lb.exp()
    for t, st in enumerate(record["steps"]):  # the first token is the context: steps score ids 2..11
        assert st["id"] == int(ids[0, t + 1])
        assert st["kl_ab"] == pytest.approx(float((pa[t] * (la[t] - lb[t])).sum()), rel=1e-4, abs=1e-7)
        assert st["kl_ba"] == pytest.approx(float((pb[t] * (lb[t] - la[t])).sum()), rel=1e-4, abs=1e-7)
        assert st["tv"] == pytest.approx(float(0.5 * (pa[t] - pb[t]).abs().sum()), rel=1e-4, abs=1e-7)
        top_a, top_b = set(la[t].topk(3).indices.tolist()), set(lb[t].topk(3).indices.tolist())
        assert st["overlap"] == pytest.approx(len(top_a & top_b) / 3)
        assert st["agree"] == (int(la[t].argmax()) == int(lb[t].argmax()))
        assert st["p_b"] == pytest.approx(float(pb[t, ids[0, t + 1]]), rel=1e-5)
    kls = [st["kl_ab"] for st in record["steps"]]
    assert record["summary"]["max_kl_ab"] == max(kls) and record["summary"]["largest"][0] == kls.index(max(kls))


class Nudged:
    """``lm`` with a small fixed nudge added to its logits: a second model that nearly agrees with it."""

    def __init__(self, lm, nudge: torch.Tensor):
        self.lm, self.nudge = lm, nudge

    def __getattr__(self, name):
        return getattr(self.lm, name)

    def forward(self, ids):
        out = self.lm.forward(ids)
        return SimpleNamespace(logits=out.logits + self.nudge[:out.logits.shape[-1]])


def test_small_divergences_are_computed_in_float64(store, toy, monkeypatch):
    """Two models that part by a KL near 1e-7: every figure equals a float64 computation from the same float32
    logits to the record's six digits (in float32 the sums are wrong by half or more at this size)."""
    nudge = torch.randn(toy.vocab_size, generator=torch.Generator().manual_seed(5)) * 1e-2
    b = Nudged(toy, nudge)
    monkeypatch.setattr(lockstep_module, "_model", lambda store, key, dtype, progress: b if key == "toy-small" else toy)
    record = lockstep(store, "1 2 9 10 11 12 13", "toy", "toy-small")
    ids = torch.tensor([[1, 2, 9, 10, 11, 12, 13]])
    with torch.no_grad():
        logits = toy.forward(ids).logits[0, :-1].float()
    la, lb = logits.double().log_softmax(-1), (logits + nudge).double().log_softmax(-1)
    pa, pb = la.exp(), lb.exp()
    for t, st in enumerate(record["steps"]):
        assert 0 < st["kl_ab"] < 1e-4
        assert st["kl_ab"] == pytest.approx(float((pa[t] * (la[t] - lb[t])).sum()), rel=1e-5)
        assert st["kl_ba"] == pytest.approx(float((pb[t] * (lb[t] - la[t])).sum()), rel=1e-5)
        assert st["tv"] == pytest.approx(float(0.5 * (pa[t] - pb[t]).abs().sum()), rel=1e-5)


def test_smollm2_float32_against_int4(store, smollm):
    text = "The lighthouse keeper climbed the stairs every evening to light the lamp for the ships."
    record = lockstep(store, text, "smollm2-135m", "smollm2-135m", "float32", "int4",
                      prompt="Write one sentence about a lighthouse.")
    s = record["summary"]
    assert record["a"]["dtype"] == "float32" and record["b"]["dtype"] == "int4"
    assert s["tokens"] >= 15
    assert 0 < s["mean_kl_ab"] < 0.05 and 0 < s["max_kl_ab"] < 0.5  # the same GGUF blocks, another arithmetic
    assert s["agreement"] >= 0.8


def test_a_pair_without_one_tokenizer_is_refused(store, smollm):
    with pytest.raises(InvalidRequest, match="does not share the tokenizer"):
        lockstep(store, "1 2 3", "toy", "smollm2-135m")
    with pytest.raises(InvalidRequest, match="text must not be empty"):
        lockstep(store, "  ", "toy", "toy")
    with pytest.raises(InvalidRequest, match=r"top_k must be an integer in \[1, 100\], got 0"):
        lockstep(store, "1 2 3", "toy", "toy", top_k=0)


def test_the_charts_draw_the_record(store):
    record = lockstep(store, "1 2 9 10 11 12", "toy", "toy-small")
    fig = lockstep_figure(record, selected=2)
    ab = next(t for t in fig.data if t.name == "KL(A‖B)")
    assert list(ab.y) == [st["kl_ab"] for st in record["steps"]]
    ba = next(t for t in fig.data if t.name == "KL(B‖A)")
    assert list(ba.y) == [st["kl_ba"] for st in record["steps"]]
    parted = next(t for t in fig.data if t.name == "argmax differs")
    assert list(parted.x) == [st["step"] for st in record["steps"] if not st["agree"]]
    # the selected step is a band around it, in no trace's colour (it must not read as a value)
    (band,) = [sh for sh in fig.layout.shapes if sh.name == "selected step"]
    assert band.type == "rect" and band.x0 < 2 < band.x1
    assert band.fillcolor not in {t.line.color for t in fig.data if t.line} | {t.marker.color for t in fig.data}
    side = step_figure(record, 2)
    cands = record["steps"][2]["candidates"]
    assert [list(t.y) for t in side.data] == [[c["p_a"] for c in cands], [c["p_b"] for c in cands]]


@pytest.mark.slow  # subprocesses
def test_the_cli_diff(tmp_path):
    html = tmp_path / "diff.html"
    out = subprocess.run([sys.executable, "-m", "playground", "diff", "--model-a", "toy", "--model-b", "toy-small",
                          "--prompt", "1 2", "--generate", "5", "--json", "--html", str(html)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout)
    assert record["a"]["model"] == "toy" and record["b"]["model"] == "toy-small" and record["summary"]["tokens"] >= 1
    assert html.read_text().count("KL(A") >= 1
    bad = subprocess.run([sys.executable, "-m", "playground", "diff", "--model-a", "toy", "--text", "1 2",
                          "--top-k", "500"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "top_k must be an integer in [1, 100], got 500" in bad.stderr
