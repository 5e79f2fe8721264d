"""Property: at any chain order and setting, every mark in the figures is the stage's own record.

For random (order, parameters) cases, the step is built by the decoder's own code
(``record_chain`` then ``make_step``) and the figures are read back from their plotly dicts. Every
expected value is computed here from the decoder's logits after each stage with plain torch:
- each threshold line sits at the value the stage recorded, and that value is the stage's decision
  on the distribution it received (min-p: min_p x its top probability; top-k: its k-th probability,
  or a cut after its kept bars; top-p: p, with its running mass in its own ranking);
- the points a line is read against are that received distribution (its own markers, or the bars
  when the bars are it), and the line separates the tokens the stage kept from those it cut;
- every bar's kept / cut colour, and every waterfall panel's, is the decoder's kept flag;
- the new stages likewise: epsilon, eta, top-nσ and mirostat lines at their recorded probability,
  equal to their formula on the received distribution; XTC's line with everything above it removed
  but the least probable, when its recorded coin acted; typical's running mass in its own ranking;
  DRY, n-gram and word-bias marks on exactly the tokens the stage changed;
- and this holds whichever distribution the bars show (the model's own, entering the cuts, final);
- the entropy map's point is the step's recorded entropy and varentropy, those of the raw logits,
  with the decoder's kept count;
- the grammar stage (half the cases: a random mask, placed anywhere in the chain): its recorded Z
  is the mass its received distribution gave the allowed tokens, the distribution crosses out
  exactly the shown tokens its record does not allow, and the Z chart draws the recorded Z.

200 cases on a 50-token vocabulary with random logits, and 30 on SmolLM2's real logits (49,152
tokens; fewer cases, each is a full-vocabulary chain plus two figures).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest
import torch
from figure_reading import (
    bar_points,
    fig_dict,
    is_horizontal,
    is_vertical,
    stage_points,
    stage_shapes,
    waterfall_panels,
)
from word_lm import WordLM

from playground.charts import entropy_map
from playground.charts import grammar as grammar_chart
from playground.charts.distribution import distribution_figure
from playground.charts.marks import STAGE_MARKS, described, stage_summary
from playground.charts.palette import CUT, KEPT
from playground.charts.waterfall import waterfall_figure
from playground.engine import Request, run
from playground.trace import Trace
from strategies.recording import make_step
from strategies.sampling.chain import Multinomial, accept_chosen, record_chain
from strategies.sampling.grammar import masked, with_grammar
from strategies.sampling.samplers import SAMPLER_STAGES, SamplerParams, build_sampler_chain
from strategies.stages import STAGES, TransformBase, on_values

TOL = 1e-5  # the trace keeps 6 significant digits


@dataclass
class Case:
    params: SamplerParams
    logits: torch.Tensor  # [vocab] float32, the model's raw logits
    context: list[int]  # token ids so far (what the penalty sees)
    top_n: int
    seed: int
    grammar: tuple[torch.Tensor, int] | None = None  # a random mask [vocab] and its place among the stages


class RandomGrammar(TransformBase):
    """The grammar stage's own decision (grammar.masked) on a fixed mask, as a matcher would give it."""

    name = "grammar"

    def __init__(self, allowed: torch.Tensor) -> None:
        self.allowed = allowed

    def decide(self, logits: torch.Tensor, context: torch.Tensor):
        return masked(logits, self.allowed[None].expand(logits.shape[0], -1), [False] * logits.shape[0], [0])


def random_params(rng: random.Random, vocab: int = 50) -> SamplerParams:
    """Each stage on at random settings (the basic ones often, the rest less), in a random order; a stage
    with no random settings here is on at its registration's ``on`` values, so that no stage goes unchecked."""
    order = list(SAMPLER_STAGES)
    rng.shuffle(order)
    on = lambda p=0.75: rng.random() < p  # noqa: E731  (the basic stages on three times in four)
    some = lambda: on(0.3)  # noqa: E731  (the others less often, so chains stay varied but not empty)
    t_min = round(rng.uniform(0.2, 2.0), 3)
    dynamic = some()
    words = ", ".join(f"t{rng.randrange(vocab)}" + rng.choice(["", f"={rng.uniform(-5, 5):.2f}"])
                      for _ in range(rng.randint(1, 4)))
    drawn = dict(
        temperature=(0.0 if rng.random() < 0.05 else round(rng.uniform(0.05, 3.0), 3)) if on() else 1.0,
        top_k=rng.randint(1, 70) if on() else 0,
        top_p=round(rng.uniform(0.05, 0.99), 3) if on() else 1.0,
        min_p=round(rng.uniform(0.001, 0.6), 3) if on() else 0.0,
        repetition_penalty=round(rng.uniform(0.3, 4.0), 3) if on() else 1.0,
        typical_p=round(rng.uniform(0.05, 0.99), 3) if some() else 1.0,
        epsilon_cutoff=round(rng.uniform(0.0005, 0.2), 4) if some() else 0.0,
        eta_cutoff=round(rng.uniform(0.0005, 0.2), 4) if some() else 0.0,
        top_nsigma=round(rng.uniform(0.1, 3.0), 3) if some() else 0.0,
        xtc_probability=round(rng.uniform(0.3, 1.0), 3) if some() else 0.0,
        xtc_threshold=round(rng.uniform(0.01, 0.5), 3),
        dry_multiplier=round(rng.uniform(0.1, 3.0), 3) if some() else 0.0,
        dry_allowed_length=rng.randint(1, 3),
        dynatemp_min=t_min if dynamic else 1.0,
        dynatemp_max=round(t_min + rng.uniform(0.0, 2.0), 3) if dynamic else 1.0,
        mirostat_tau=round(rng.uniform(0.5, 6.0), 3) if some() else 0.0,
        no_repeat_ngram_size=rng.randint(1, 3) if some() else 0,
        word_bias=words if some() else "",
        top_h=round(rng.uniform(0.05, 1.0), 3) if some() else 0.0,
        p_less=some(),
        adaptive_p_target=round(rng.uniform(0.0, 1.0), 3) if some() else -1.0)
    side = random.Random(",".join(order))  # its own draws: the stages drawn above stay as they were
    for declared in on_values(SAMPLER_STAGES).values():  # a stage drawn nowhere above: on at its declared values
        if not declared.keys() & drawn.keys() and side.random() < 0.3:
            drawn.update(declared)
    return SamplerParams(**drawn, order=",".join(order))


def build(case: Case) -> tuple[dict, list[torch.Tensor], list[str]]:
    """The step as the decoder records it: (trace dict, [vocab] logits after each stage, stage names)."""
    generator = torch.Generator().manual_seed(case.seed)
    chain = build_sampler_chain(case.params, generator, WordLM("t{}"))
    context = torch.tensor([case.context], dtype=torch.long)
    if case.grammar is not None:
        mask, at = case.grammar
        # the mask holds every token the chain keeps without it, so the grammar is never left with none
        # (a run ends there, "grammar: no token allowed", before anything is drawn)
        alone = record_chain(build_sampler_chain(case.params, torch.Generator().manual_seed(case.seed),
                                                 WordLM("t{}")), case.logits[None], context).logits[-1][0]
        order = [t.name for t in chain]
        order.insert(min(at, len(order)), "grammar")
        chain = with_grammar(chain, RandomGrammar(mask | torch.isfinite(alone)), ",".join(order))
    record = record_chain(chain, case.logits[None], context)
    chosen, _ = Multinomial(generator).select(record.logits[-1])
    accept_chosen(chain, record, chosen, forced=False)  # what the stateful stages learn joins their record
    stages, decisions = record.row(0)
    names = [t.name for t in chain]
    step, token = make_step(WordLM("t{}"), len(case.context), stages, names, int(chosen[0]), case.top_n, None,
                            decisions)
    trace = Trace("random", "sampling", case.params.to_dict(), case.seed, "", case.context,
                  chain=[*names, "multinomial"], steps=[step], tokens=[token])
    return trace.to_dict(), stages, names


def check(case: Case, basis: str = "chain") -> None:
    d, logits, names = build(case)
    s = d["steps"][0]
    ids = [c["id"] for c in s["candidates"]]
    alive = [torch.isfinite(x) for x in logits]  # after each stage: the decoder's kept flags
    probs = [x.float().softmax(-1) for x in logits]
    fd = fig_dict(distribution_figure(d, 0, basis=basis))
    bars = bar_points(fd)

    # bars: by default the distribution that entered the first truncation; or the model's own, or the
    # final one; coloured by the decoder's final flag
    first_cut = next((k for k, n in enumerate(names, start=1) if STAGES[n].truncates), None)
    chain_index = 0 if not names else (first_cut - 1 if first_cut else len(names))
    bar_dist = probs[{"model": 0, "final": len(names)}.get(basis, chain_index)]
    for tok, bar in bars.items():
        assert bar["y"] == pytest.approx(float(bar_dist[tok]), abs=TOL)
        assert bar["color"] == (KEPT if alive[-1][tok] else CUT)

    for k, name in enumerate(names, start=1):
        rec = s["stages"][k]
        entering, kept_in, kept_out = probs[k - 1], alive[k - 1], alive[k]
        assert rec["kept"] == kept_out[ids].tolist() and rec["kept_count"] == int(kept_out.sum())
        assert s["stages"][k - 1]["probs"] == pytest.approx(entering[ids].tolist(), abs=TOL)
        if STAGES[name].truncates:  # every registered truncation has its check in CHECKS
            points = _received(fd, name, bars, entering, kept_in, kept_out)
            if name == "top_nsigma":  # read from the logits: float32 probabilities underflow to 0
                _check_top_nsigma(rec, fd, points, entering, logits[k - 1], kept_in, kept_out, case)
            else:
                CHECKS[name](rec, fd, points, bars, entering, kept_in, kept_out, case)
        elif name == "penalty":
            marked = stage_points(fd, "penalty", "ids") or {}
            assert set(marked) == set(bars) & set(case.context)
        elif name == "adaptive_p":  # a reshaping: the first step aims at the target itself
            d_ = rec["decision"]
            assert d_["average"] == pytest.approx(case.params.adaptive_p_target, abs=1e-6)
            assert d_["adapted"] == pytest.approx(case.params.adaptive_p_target, abs=1e-6)
        elif name == "dry":
            marked = stage_points(fd, "dry", "ids") or {}
            changed = (logits[k] != logits[k - 1]) & kept_in
            assert set(marked) == {tok for tok in bars if changed[tok]}
            assert rec["decision"]["ids"] == [i for i in ids if changed[i]]

    # the entropy map: the step's recorded entropy and varentropy of the model's own distribution, which
    # are those of the raw logits, coloured by the decoder's kept count
    raw = logits[0].double().log_softmax(-1)
    p_raw = raw.exp()
    h = float(-(p_raw * raw.nan_to_num(neginf=0.0)).sum())
    v = float((p_raw * (raw.nan_to_num(neginf=0.0) + h) ** 2).sum())
    if "grammar" in names:  # the Z chart: the recorded Z and allowed count, as they are
        rec = s["stages"][names.index("grammar") + 1]["decision"]
        [z] = [t for t in fig_dict(grammar_chart.z_figure(d))["data"] if (t.get("meta") or {}).get("role") == "z"]
        assert (z["y"][0], z["customdata"][0][0], z["customdata"][0][1]) == (rec["z"], rec["z"], rec["allowed_count"])
    [dots] = entropy_map.entropy_map_figure(d).data
    assert (dots.x[0], dots.y[0], dots.customdata[0][2]) == (s["raw_entropy"], s["raw_varentropy"], s["kept_count"])
    assert s["raw_entropy"] == pytest.approx(h, rel=1e-4, abs=1e-6)
    assert s["raw_varentropy"] == pytest.approx(v, rel=1e-3, abs=1e-5)
    assert s["kept_count"] == int(alive[-1].sum())

    panels = waterfall_panels(fig_dict(waterfall_figure(d, 0)))
    assert [p["name"] for p in panels] == ["raw", *names] if names else len(panels) == 1
    for panel, flags in zip(panels, alive):
        assert panel["colors"] == [KEPT if flags[tok] else CUT for tok in panel["ids"]]


def _received(fd, name, bars, entering, kept_in, kept_out) -> dict[int, float]:
    """token -> the height the stage's mark is read against: its own markers, or the bars when the
    figure draws none (then the bars must be exactly what the stage received)."""
    points = stage_points(fd, name, "input")
    if points is None:
        for tok, bar in bars.items():
            assert bar["y"] == pytest.approx(float(entering[tok]), abs=TOL)
        return {tok: bar["y"] for tok, bar in bars.items() if kept_in[tok]}
    assert set(points) == {tok for tok in bars if kept_in[tok]}  # every token the stage received
    for tok, pt in points.items():
        assert pt["y"] == pytest.approx(float(entering[tok]), abs=TOL)
        assert pt["symbol"] == ("circle" if kept_out[tok] else "circle-open")
    return {tok: pt["y"] for tok, pt in points.items()}


def _separates(line: float, heights: dict[int, float], kept_out: torch.Tensor) -> None:
    for tok, y in heights.items():
        if abs(y - line) > TOL * max(line, 1e-3):
            assert (y > line) == bool(kept_out[tok]), (tok, y, line)


def _check_min_p(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    [line] = stage_shapes(fd, "min_p")
    threshold = rec["decision"]["threshold"]
    assert is_horizontal(line) and line["y0"] == threshold
    assert threshold == pytest.approx(case.params.min_p * float(entering.max()), rel=TOL)
    _separates(threshold, heights, kept_out)


def _check_top_k(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    shapes = stage_shapes(fd, "top_k")
    kth = float(torch.topk(entering, min(case.params.top_k, entering.numel())).values[-1])
    assert rec["decision"]["cut_prob"] == pytest.approx(kth, rel=TOL, abs=1e-12)
    if not shapes:  # a cut beyond the last bar: every bar the stage received, it kept
        assert all(kept_out[tok] for tok in heights)
        return
    [line] = shapes
    if is_vertical(line):
        assert line["x0"] == int(kept_out.sum()) - 0.5
        for tok, bar in bars.items():
            assert (bar["x"] < line["x0"]) == bool(kept_out[tok])
    else:
        assert is_horizontal(line) and line["y0"] == rec["decision"]["cut_prob"]
        _separates(line["y0"], heights, kept_out)


def _check_top_p(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    [line] = stage_shapes(fd, "top_p")
    assert is_horizontal(line) and line["yref"] == "y2" and line["y0"] == case.params.top_p
    curve = stage_points(fd, "top_p", "cumulative")
    assert curve is not None and set(curve) <= set(heights)
    ranked, order = torch.sort(entering, descending=True)
    running = torch.empty_like(entering).scatter(0, order, ranked.cumsum(0))
    assert rec["decision"]["mass"] == pytest.approx(float(entering[kept_out].sum()), rel=TOL)
    for tok, pt in curve.items():
        assert pt["y"] == pytest.approx(float(running[tok]), abs=TOL)
        before = pt["y"] - float(entering[tok])
        if abs(before - case.params.top_p) > TOL:
            assert (before < case.params.top_p) == bool(kept_out[tok])


def _top_kept(kept_out: torch.Tensor, entering: torch.Tensor, heights: dict[int, float]) -> dict[int, float]:
    """``heights`` without the stage's most probable token, which every stage keeps whatever its line."""
    top = float(entering.max())
    return {tok: y for tok, y in heights.items() if float(entering[tok]) < top}


def _level(name: str, rec, fd, heights, entering, kept_out, want: float, key: str = "threshold") -> None:
    [line] = stage_shapes(fd, name)
    value = rec["decision"][key]
    assert is_horizontal(line) and line["y0"] == value
    assert value == pytest.approx(want, rel=1e-4, abs=1e-12)
    _separates(value, _top_kept(kept_out, entering, heights), kept_out)


def _entropy(p: torch.Tensor) -> float:
    p = p.double()
    return float(-(p[p > 0] * p[p > 0].log()).sum())


def _check_epsilon(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    _level("epsilon", rec, fd, heights, entering, kept_out, case.params.epsilon_cutoff)


def _check_eta(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    eta = case.params.eta_cutoff
    _level("eta", rec, fd, heights, entering, kept_out, min(eta, math.sqrt(eta) * math.exp(-_entropy(entering))))


def _check_top_nsigma(rec, fd, heights, entering, logits_in, kept_in, kept_out, case) -> None:
    live = logits_in.double()[kept_in]
    threshold = float(live.max()) - case.params.top_nsigma * float(live.std(unbiased=False))
    want = math.exp(threshold - float(live.logsumexp(0)))  # the probability at the threshold logit
    _level("top_nsigma", rec, fd, heights, entering, kept_out, want, "threshold_prob")


def _check_mirostat(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    assert rec["decision"]["mu"] == pytest.approx(2 * case.params.mirostat_tau)
    _level("mirostat", rec, fd, heights, entering, kept_out, 2 ** (-2 * case.params.mirostat_tau))


def _check_xtc(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    [line] = stage_shapes(fd, "xtc")
    d = rec["decision"]
    assert is_horizontal(line) and line["y0"] == d["threshold"] == case.params.xtc_threshold
    coin = float(torch.rand(1, generator=torch.Generator().manual_seed(case.seed)))  # the first draw of the run
    assert d["coin"] == pytest.approx(coin, rel=1e-5)
    above = [tok for tok, y in heights.items() if y >= d["threshold"] + TOL]
    below = [tok for tok, y in heights.items() if y < d["threshold"] - TOL]
    assert all(kept_out[tok] for tok in below)
    passing = int((entering >= case.params.xtc_threshold).sum())
    assert d["acted"] == (coin < case.params.xtc_probability and passing >= 2)
    least = min((float(entering[t]) for t in range(entering.numel()) if entering[t] >= d["threshold"]), default=1)
    for tok in above:  # removed when it acted, except the least probable of those above the line
        assert bool(kept_out[tok]) == (not d["acted"] or float(entering[tok]) <= least + 1e-7)


def _check_typical(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    """Typical's running mass in its own ranking (by distance from the entropy). Tokens at one distance
    (equal probabilities, or equal within float32's rounding of the distance, which the stage sorts
    on) may come in any order among themselves, so each token's running mass lies between its tie
    group's first and last; the group is kept or cut as one, by the mass before it."""
    [line] = stage_shapes(fd, "typical_p")
    assert is_horizontal(line) and line["yref"] == "y2" and line["y0"] == case.params.typical_p
    p = entering.double()
    distance = ((-p.log()) - _entropy(entering)).abs()
    distance[p == 0] = math.inf
    order = torch.sort(distance, stable=True).indices
    cumulative = p[order].cumsum(0)
    ranked = distance[order]
    tied = (ranked[1:] - ranked[:-1]).abs() <= 2e-5 * ranked[1:].abs().clamp(min=1.0)
    group = torch.cat([torch.zeros(1, dtype=torch.long), (~tied).long().cumsum(0)])
    first = torch.zeros(int(group[-1]) + 1, dtype=p.dtype).scatter_reduce(0, group, cumulative - p[order], "amin",
                                                                         include_self=False)
    last = torch.zeros_like(first).scatter_reduce(0, group, cumulative, "amax", include_self=False)
    low = torch.empty_like(p).scatter(0, order, first[group] + p[order])  # the least running mass it can have
    high = torch.empty_like(p).scatter(0, order, last[group])
    before_group = torch.empty_like(p).scatter(0, order, first[group])
    assert rec["decision"]["mass"] == pytest.approx(float(p[kept_out].sum()), rel=1e-4)
    curve = stage_points(fd, "typical_p", "cumulative")
    assert curve is not None
    for tok, pt in curve.items():
        assert float(low[tok]) - 1e-4 <= pt["y"] <= float(high[tok]) + 1e-4
        if abs(float(before_group[tok]) - case.params.typical_p) > 1e-4:
            assert (float(before_group[tok]) < case.params.typical_p) == bool(kept_out[tok])


def _check_top_h(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    from transformers.generation.logits_process import TopHLogitsWarper
    logits_in = torch.where(kept_in, entering.log(), torch.tensor(-math.inf))
    theirs = TopHLogitsWarper(case.params.top_h)(torch.zeros(1, 1, dtype=torch.long), logits_in[None].clone())[0]
    assert rec["kept_count"] == int(torch.isfinite(theirs).sum()) == rec["decision"]["rank"]
    kept_probs = entering[kept_out]
    assert rec["decision"]["cut_prob"] == pytest.approx(float(kept_probs.min()), rel=1e-4, abs=1e-12)
    shapes = stage_shapes(fd, "top_h")
    if not shapes:  # a cut beyond the last bar: every bar the stage received, it kept
        assert all(kept_out[tok] for tok in heights)
        return
    [line] = shapes
    if is_vertical(line):
        assert line["x0"] == int(kept_out.sum()) - 0.5
        for tok, bar in bars.items():
            assert (bar["x"] < line["x0"]) == bool(kept_out[tok])
    else:
        assert is_horizontal(line) and line["y0"] == rec["decision"]["cut_prob"]
        for tok, y in heights.items():
            if y > line["y0"] * (1 + TOL):
                assert kept_out[tok], (tok, y)
            elif y < line["y0"] * (1 - TOL):
                assert not kept_out[tok], (tok, y)


def _check_p_less(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    _level("p_less", rec, fd, heights, entering, kept_out, float(entering.double().square().sum()))


def _check_ban(name: str):
    def check_ban(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
        marked = set(stage_points(fd, name, "ids") or {})
        listed = set(rec["decision"]["ids"])
        if name == "no_repeat_ngram":
            assert listed == {i for i in listed if kept_in[i] and not kept_out[i]}
        assert marked == {tok for tok in bars if tok in listed}
        for tok in heights:
            if not kept_out[tok]:
                assert tok in listed
    return check_ban


def _check_grammar(rec, fd, heights, bars, entering, kept_in, kept_out, case) -> None:
    d = rec["decision"]
    allowed = kept_out  # what the grammar allows of what it received: its output's live tokens
    assert d["z"] == pytest.approx(float(entering[allowed].sum()), rel=1e-4, abs=1e-7)
    assert d["allowed_count"] == int(allowed.sum()) and d["forced"] == (d["allowed_count"] == 1)
    assert set(d["allowed"]) & set(bars) == {tok for tok in bars if allowed[tok]}
    crossed = set(stage_points(fd, "grammar", "disallowed") or {})
    assert crossed == {tok for tok in bars if tok not in d["allowed"]}
    assert all(not allowed[tok] for tok in crossed)
    ticks = fd["layout"]["xaxis"]["ticktext"]
    assert {tok for tok, bar in bars.items() if ticks[bar["x"]].startswith("<s>")} == crossed


CHECKS = {"min_p": _check_min_p, "top_k": _check_top_k, "top_p": _check_top_p, "epsilon": _check_epsilon,
          "eta": _check_eta, "mirostat": _check_mirostat, "xtc": _check_xtc,
          "typical_p": _check_typical, "no_repeat_ngram": _check_ban("no_repeat_ngram"),
          "word_bias": _check_ban("word_bias"), "top_h": _check_top_h, "p_less": _check_p_less,
          "grammar": _check_grammar}


def test_every_truncation_has_its_check():
    """A stage registered as truncating is switched on in the random cases by its declared values
    (``random_params``), and ``check`` reads its marks through CHECKS: a new one without a check fails here."""
    assert sorted(n for n in SAMPLER_STAGES if STAGES[n].truncates and n not in CHECKS) == ["top_nsigma"]


def test_every_stage_text_is_filled_from_its_own_record(store):
    """Each stage's line label, caption and waterfall title, formatted from the record the stage wrote in a
    real run (the toy, switched on by the stage's declared values; the grammar by a grammar): a text that
    names a key the stage does not record raises (``described``), and none comes out blank."""
    runs = {name: Request("toy", "sampling", "once upon", on, seed=7, max_new_tokens=4)
            for name, on in on_values(SAMPLER_STAGES).items()}
    runs["grammar"] = Request("toy", "sampling", "once upon", {}, seed=7, max_new_tokens=4,
                              grammar={"kind": "regex", "text": r"( \w+)+"})
    assert set(runs) == set(STAGES)
    for name, req in runs.items():
        trace = run(store, req).to_dict()
        records = [st for step in trace["steps"] for st in step["stages"] if st["name"] == name]
        assert records, name
        for rec in records:
            texts = [stage_summary(rec), stage_summary(rec, panel=True)]
            if name in STAGE_MARKS:
                texts.append(described(STAGE_MARKS[name].label, rec["decision"], name))
            assert all(texts), (name, texts, rec["decision"])


def test_a_text_that_names_an_unrecorded_key_fails_loudly():
    with pytest.raises(KeyError, match="names threshold"):
        described("p ≥ {threshold:.3g}", {"min_p": 0.1}, "min_p")
    assert described("p ≥ {threshold:.3g}", {}, "min_p") == ""  # no decision recorded: nothing said
    assert described("p ≥ {threshold:.3g}", {"threshold": None}, "min_p") == ""  # recorded as -inf or NaN


def random_cases(n: int, seed: int, vocab: int) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        g = torch.Generator().manual_seed(seed * 1000 + i)
        logits = torch.randn(vocab, generator=g) * rng.uniform(0.5, 4.0)
        context = [rng.randrange(vocab) for _ in range(rng.randint(0, 20))]
        if rng.random() < 0.4:  # a looping text, so that DRY and the n-gram ban find repeats
            context += [rng.randrange(vocab) for _ in range(rng.randint(2, 4))] * rng.randint(2, 4)
        case = Case(random_params(rng, vocab), logits, context, rng.choice([10, 20, 50]), i)
        side = random.Random(seed * 7919 + i)  # its own draws: the cases without a grammar stay as they were
        if side.random() < 0.5:
            mask = torch.rand(vocab, generator=torch.Generator().manual_seed(seed * 31 + i)) < side.uniform(0.05, 0.9)
            case.grammar = (mask, side.randrange(len(SAMPLER_STAGES) + 1))
        cases.append(case)
    return cases


@pytest.mark.slow  # 200 random chains, each drawn: a minute in all
@pytest.mark.parametrize("case", random_cases(200, seed=9, vocab=50), ids=lambda c: c.params.order)
def test_every_mark_is_the_stage_record_on_random_logits(case):
    check(case)


@pytest.mark.slow
@pytest.mark.parametrize("basis", ["model", "final"])
@pytest.mark.parametrize("case", random_cases(60, seed=10, vocab=50), ids=lambda c: c.params.order)
def test_every_mark_is_the_stage_record_whatever_the_bars_show(case, basis):
    check(case, basis)


SMOLLM_PROMPTS = ["Name three colours of the rainbow.", "Once upon a time", "The capital of France is",
                  "def fibonacci(n):"]


@pytest.fixture(scope="module")
def smollm_logits(smollm) -> list[tuple[torch.Tensor, list[int]]]:
    out = []
    with torch.no_grad():
        for prompt in SMOLLM_PROMPTS:
            ids = smollm.encode(prompt)
            out.append((smollm.forward(torch.tensor([ids])).logits[0, -1].float(), ids))
    return out


def test_every_mark_is_the_stage_record_on_smollm2(smollm_logits):
    rng = random.Random(17)
    for i in range(30):
        logits, ids = smollm_logits[i % len(smollm_logits)]
        check(Case(random_params(rng, logits.numel()), logits, ids, 20, i))
