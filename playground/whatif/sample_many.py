"""Sample many: N draws with one run's settings (seeds s, s + 1, ...), their frequencies next to the
exact probabilities under the strategy's distribution, a chi-square test and the total variation.

An outcome is the first ``max_new_tokens`` tokens of a run, or fewer when it ends at an EOS (with a
budget as long as the run's, that is the whole text). With loop detection on (``loop_repeats``), each
outcome lists the loops of its tokens (strategies/loops.py); ``loop_stop`` is refused, as it would end
some runs early where the batched draw and the exact reference do not.

How the samples are drawn (each strategy's registration says how, in its ``Draws``: strategies/registry.py):

- greedy, sampling, gumbel: batched, ``ROWS_PER_PASS`` samples at a time. The prompt is run once;
  then each forward pass takes one row per distinct text so far (samples that drew the same
  tokens share a row and its KV cache). Sample r has its own ``torch.Generator`` seeded s + r and
  its own selector object, called on its row's [1, vocab] logits exactly as the single run with
  seed s + r calls it, so it draws what that run draws whenever the batched logits equal the
  single run's bit for bit. They can differ in the last bits (a matrix
  product over N rows may sum in another order than over one), which can flip a draw only when
  the uniform lands within that rounding of a boundary of the cumulative distribution;
  ``replay_mismatches`` counts how often that happens.
- every other strategy: one run per seed, through the engine (speculative without its
  wall-clock baseline run, which changes no token).

The exact reference ("where defined"):

- sampling family: the chained distribution the selector draws from (greedy: the one-hot argmax);
- speculative: the *target's* chained distribution, which rejection sampling reproduces exactly
  (Leviathan et al. 2022, Chen et al. 2023) and top-K verification does not;
- stochastic beam search: each sample is a set of k sequences; an outcome's count is how many of
  the N sets include it (inclusion frequency) and its probability is the sequence's own. With k = 1
  the set is one exact sample (Kool et al. 2019), so the test applies; with k > 1 the inclusion
  probability has no closed form and no test is made;
- contrastive, sample_beam: the sampled outcomes carry their probability under the distribution
  each token was drawn from (the trace's log-probabilities), but no enumeration, so no test.

Every outcome whose exact probability is at least ``tau = 5 / N`` (an expected count of 5, the
usual floor for the chi-square approximation) is found by enumeration: a prefix is at least as
probable as any of its continuations, so expanding only prefixes at or above tau misses none, and
at most 1 / tau prefixes are expanded per step. The chi-square bins are those outcomes plus one bin
for everything else; the total variation distance is taken over the same bins.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, cast

import torch

from playground.engine import MAX_SEED, Request, prepare, run
from playground.errors import InvalidRequest
from playground.models import LM, ModelStore, Progress
from playground.whatif.step_record import TOP_LOGPROBS, StepRecord
from strategies.loops import find_loops
from strategies.phases import PhaseParams
from strategies.registry import StrategySpec, all_strategies, get_strategy
from strategies.sampling.chain import apply_chain
from strategies.sampling.grammar import CompiledGrammar, Grammar, with_grammar

MAX_SAMPLES = 1000
MAX_TOKENS = 64
ROWS_PER_PASS = 256  # bounds the KV cache of one pass (about 0.5 GB for SmolLM2 and a short prompt)
MIN_EXPECTED = 5.0
GAP_MEANING = ("Masked sampling picks each token among those the grammar allows in proportion to what the "
               "model gives it now, blind to how likely the model finds the rest of the text; so it does not "
               "draw from the model's own distribution restricted to valid texts, and the gap between the "
               "sampled and the conditional bars is that bias (Park et al. 2024).")
MAX_VALID = 200  # valid texts enumerated for P(y | y valid); a grammar that allows more has no conditional
# the strategies whose runs go as rows of one batched decode: name -> a row's selector (``Draws.selector``)
BATCHED = {spec.name: spec.draws.selector for spec in all_strategies() if spec.draws.selector is not None}

Outcome = tuple[int, ...]


@dataclass
class Sample:
    """One seed's draw: the outcomes it holds (one; k for stochastic beam) and their log-probabilities
    under the reference distribution (None where it has none); ``steps``, when the draw was asked to
    record them, what each step saw (playground/whatif/step_record.py)."""

    seed: int
    outcomes: list[Outcome]
    logprobs: list[float | None]
    steps: list[StepRecord] = field(default_factory=list)


@dataclass
class Tally:
    counts: dict[Outcome, int] = field(default_factory=dict)
    seeds: dict[Outcome, list[int]] = field(default_factory=dict)
    logprobs: dict[Outcome, float | None] = field(default_factory=dict)

    def add(self, sample: Sample) -> None:
        for outcome, logprob in zip(sample.outcomes, sample.logprobs):
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            self.seeds.setdefault(outcome, []).append(sample.seed)
            self.logprobs.setdefault(outcome, logprob)


def check_size(n: Any, max_new_tokens: int, seed: int) -> int:
    try:
        ok = float(n).is_integer() and 1 <= int(n) <= MAX_SAMPLES
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidRequest(f"n must be an integer in [1, {MAX_SAMPLES}], got {n}")
    if max_new_tokens > MAX_TOKENS:
        raise InvalidRequest(f"tokens must be an integer in [1, {MAX_TOKENS}] for sample many, got {max_new_tokens}")
    if seed + int(n) - 1 > MAX_SEED:
        raise InvalidRequest(f"seed must be in [0, {MAX_SEED - int(n) + 1}] for {int(n)} samples, got {seed}")
    return int(n)


def reference_chain(strategy: str, params: Any) -> list | None:
    """The transforms whose chained distribution is the exact reference, or None when there is none (the
    strategy's ``Draws.reference``). A run in phases with a budget or an answer chain has none: its
    tokens are not drawn from one chain (strategies/phases.py), so its samples go one by one."""
    if isinstance(params, PhaseParams) and params.phased():
        return None
    return get_strategy(strategy).draws.reference(params)


# --- drawing ---------------------------------------------------------------------------------------


@torch.inference_mode()
def draw_rows(lm: Any, chain: list, make_selector: Callable[[torch.Generator], Any], prompt_ids: list[int],
              seeds: list[int], max_new_tokens: int, grammar: CompiledGrammar | None = None, order: str = "",
              record: bool = False) -> list[Sample]:
    """One batched decode: sample r is the run with seed ``seeds[r]`` (see the module docstring).

    The rows of each forward pass are the distinct texts so far, not the samples: samples that
    drew the same tokens share a row (and its KV cache row), so the first steps, where most samples
    agree, cost a few rows instead of N. Finished samples leave the batch.

    With a ``grammar``, one grammar stage (placed by ``order``) holds a matcher per row, moved on
    with the rows; a sample ends, as its single run does, when its text is whole and the grammar
    allows nothing more, or when the grammar allows no token (that step draws nothing).

    With ``record``, each sample's ``steps`` hold what its row's step saw (``step_records``).
    """
    stage = None if grammar is None else Grammar(grammar, 1)
    chain = with_grammar(chain, stage, order)
    selectors = [make_selector(_generator(lm, s)) for s in seeds]
    out = lm.forward(torch.tensor([prompt_ids], device=lm.device), last=True)
    logits, cache = out.logits[:, -1], out.cache  # one row: every sample starts from the prompt
    context = torch.tensor([prompt_ids], device=lm.device)
    row_of = [0] * len(seeds)  # sample -> its row in the current batch
    drawn: list[list[int]] = [[] for _ in seeds]
    logprobs = [0.0] * len(seeds)
    steps: list[list[StepRecord]] = [[] for _ in seeds]
    alive = list(range(len(seeds)))
    for i in range(max_new_tokens):
        final, dead = chain_with_dead(chain, stage, logits, context)
        final_logp = final.log_softmax(-1)
        alive = [r for r in alive if not dead[row_of[r]]]
        for r in alive:
            token = int(selectors[r].select(final[row_of[r]:row_of[r] + 1])[0][0])
            drawn[r].append(token)
            logprobs[r] += float(final_logp[row_of[r], token])
        if record and alive:
            for r, rec in zip(alive, step_records(logits, final_logp, [row_of[r] for r in alive],
                                                  [drawn[r][-1] for r in alive])):
                steps[r].append(rec)
        alive = [r for r in alive if drawn[r][-1] not in lm.eos_ids]
        if not alive or i + 1 == max_new_tokens:
            break
        rows: dict[tuple[int, int], int] = {}  # (parent row, token) -> new row
        for r in alive:
            row_of[r] = rows.setdefault((row_of[r], drawn[r][-1]), len(rows))
        if stage is not None:  # texts the grammar now holds whole and closed end here, as a run does
            stage.advance([p for p, _ in rows], [t for _, t in rows])
            stopped = [stage.stopped(j) for j in range(len(rows))]
            alive = [r for r in alive if not stopped[row_of[r]]]
            if not alive:
                break
            kept = sorted({row_of[r] for r in alive})
            stage.keep(kept)
            renumber = {old: new for new, old in enumerate(kept)}
            rows = {k: renumber[v] for k, v in rows.items() if v in renumber}
            for r in alive:
                row_of[r] = renumber[row_of[r]]
        parents = torch.tensor([p for p, _ in rows], device=lm.device)
        new = torch.tensor([[t] for _, t in rows], device=lm.device)
        cache.reorder_cache(parents)
        context = torch.cat([context[parents], new], dim=1)
        logits = lm.forward(new, cache).logits[:, -1]
    return [Sample(s, [tuple(d)], [lp], st) for s, d, lp, st in zip(seeds, drawn, logprobs, steps)]


def step_records(logits: torch.Tensor, final_logp: torch.Tensor, rows: list[int], tokens: list[int]
                 ) -> list[StepRecord]:
    """The records of one step (step_record.py): sample i drew ``tokens[i]`` on row ``rows[i]``;
    ``logits`` [rows, vocab] are the model's, ``final_logp`` [rows, vocab] the log-probabilities after
    the chain."""
    raw_logp = logits.float().log_softmax(-1)
    raw_entropy = torch.special.entr(raw_logp.exp()).sum(-1).tolist()
    entropy = torch.special.entr(final_logp.float().exp()).sum(-1).tolist()
    top = raw_logp.topk(min(TOP_LOGPROBS, raw_logp.shape[-1]), dim=-1).values.tolist()
    at_rows, at_tokens = torch.tensor(rows, device=logits.device), torch.tensor(tokens, device=logits.device)
    chosen = final_logp.float()[at_rows, at_tokens].tolist()
    raw_chosen = raw_logp[at_rows, at_tokens].tolist()
    return [StepRecord(t, lp, raw, entropy[r], raw_entropy[r], top[r])
            for r, t, lp, raw in zip(rows, tokens, chosen, raw_chosen)]


def chain_with_dead(chain: list, stage: Grammar | None, logits: torch.Tensor, context: torch.Tensor
                    ) -> tuple[torch.Tensor, list[bool]]:
    """The chained logits, and per row whether the grammar stage left it nowhere to go (no grammar:
    never)."""
    if stage is None:
        return apply_chain(chain, logits, context), [False] * logits.shape[0]
    at = chain.index(stage)
    x = apply_chain(chain[:at], logits, context)
    x, decision = stage.decide(x, context)
    return apply_chain(chain[at + 1:], x, context), [bool(d) for d in decision["dead"].tolist()]


def _generator(lm: Any, seed: int) -> torch.Generator:
    """The generator the single run with ``seed`` draws from (DecodeContext.generator, offset 0)."""
    g = torch.Generator(device=lm.device)
    g.manual_seed(seed)
    return g


def draw_batched(lm: Any, chain: list, strategy: str, prompt_ids: list[int], seeds: list[int],
                 max_new_tokens: int, progress: Progress, grammar: CompiledGrammar | None = None,
                 order: str = "", record: bool = False) -> list[Sample]:
    samples: list[Sample] = []
    for start in range(0, len(seeds), ROWS_PER_PASS):
        progress(start / len(seeds), f"sampling rows {start} to {min(len(seeds), start + ROWS_PER_PASS) - 1}")
        samples += draw_rows(lm, chain, BATCHED[strategy], prompt_ids, seeds[start:start + ROWS_PER_PASS],
                             max_new_tokens, grammar, order, record)
    return samples


def draw_one_by_one(store: ModelStore, req: Request, seeds: list[int], progress: Progress) -> list[Sample]:
    params = {**req.params, **get_strategy(req.strategy).draws.run_params}
    samples = []
    for i, seed in enumerate(seeds):
        if i % 50 == 0:
            progress(i / len(seeds), f"run {i + 1} of {len(seeds)}")
        trace = run(store, dataclasses.replace(req, seed=seed, params=params))
        samples.append(_sample_of(trace, seed))
    return samples


def _sample_of(trace: Any, seed: int) -> Sample:
    if get_strategy(trace.strategy).draws.finished_set:
        finished = trace.beam["finished"]
        return Sample(seed, [tuple(h["token_ids"]) for h in finished], [h["score"] for h in finished])
    logprob = sum(t.logprob for t in trace.tokens)
    return Sample(seed, [tuple(trace.token_ids)], [logprob if math.isfinite(logprob) else None])


# --- the exact reference --------------------------------------------------------------------------


@torch.inference_mode()
def enumerate_outcomes(lm: Any, prompt_ids: list[int], chain: list, max_new_tokens: int, tau: float,
                       grammar: CompiledGrammar | None = None, order: str = "") -> dict[Outcome, float]:
    """Every outcome with chained probability >= ``tau``, with its log-probability (float64 sums).

    One batched forward per step over the surviving prefixes: each prefix keeps a row of the KV
    cache (reordered from its parent's row), so a step runs one new token per prefix. With a
    ``grammar`` the chain is the masked one a grammar run draws from (see ``expand``).
    """
    return expand(lm, prompt_ids, chain, max_new_tokens, tau, grammar, order)[0]


@torch.inference_mode()
def expand(lm: Any, prompt_ids: list[int], chain: list, max_new_tokens: int, tau: float,
           grammar: CompiledGrammar | None = None, order: str = "", limit: int | None = None
           ) -> tuple[dict[Outcome, float], dict[Outcome, str], bool]:
    """(outcome -> chained log-probability, outcome -> how it ends, whether the enumeration is whole).

    How an outcome ends: "eos", "length" (``max_new_tokens`` reached), and with a grammar "complete"
    (the grammar holds the text whole and allows nothing more: the run stops there, drawing nothing)
    or "dead" (the grammar allows no token: the run stops, drawing nothing). ``tau = 0`` expands every
    token of non-zero probability; ``limit`` caps the prefixes kept at a step (more: not whole).
    """
    stage = None if grammar is None else Grammar(grammar, 1)
    chain = with_grammar(chain, stage, order)
    prompt = torch.tensor([prompt_ids], device=lm.device)
    out = lm.forward(prompt, last=True)
    cache, logits = out.cache, out.logits[:, -1]
    frontier: list[tuple[Outcome, float]] = [((), 0.0)]
    done: dict[Outcome, float] = {}
    ends: dict[Outcome, str] = {}
    floor = math.log(tau) if tau > 0 else -math.inf
    for depth in range(max_new_tokens):
        context = torch.cat([prompt.expand(len(frontier), -1),
                             torch.tensor([list(p) for p, _ in frontier], dtype=torch.long,
                                          device=lm.device).view(len(frontier), depth)], dim=1)
        final, dead = chain_with_dead(chain, stage, logits, context)
        step_logp = final.log_softmax(-1).double()
        total = step_logp + torch.tensor([lp for _, lp in frontier], dtype=torch.float64,
                                         device=step_logp.device)[:, None]
        keep = (total >= floor) & torch.isfinite(total)
        for r, is_dead in enumerate(dead):
            if is_dead:
                keep[r] = False
                if frontier[r][1] >= floor:
                    done[frontier[r][0]], ends[frontier[r][0]] = frontier[r][1], "dead"
        rows, cols = keep.nonzero(as_tuple=True)
        nxt, parents = [], []
        for r, c, lp in zip(rows.tolist(), cols.tolist(), total[rows, cols].tolist()):
            ids = frontier[r][0] + (c,)
            if c in lm.eos_ids or depth + 1 == max_new_tokens:
                done[ids], ends[ids] = lp, "eos" if c in lm.eos_ids else "length"
            else:
                nxt.append((ids, lp))
                parents.append(r)
        if limit is not None and len(nxt) > limit:
            return done, ends, False
        if stage is not None and nxt:
            stage.advance(parents, [ids[-1] for ids, _ in nxt])
            open_rows = []
            for j, (ids, lp) in enumerate(nxt):
                if stage.stopped(j):
                    done[ids], ends[ids] = lp, "complete"
                else:
                    open_rows.append(j)
            stage.keep(open_rows)
            nxt, parents = [nxt[j] for j in open_rows], [parents[j] for j in open_rows]
        if not nxt:
            return done, ends, True
        frontier = nxt
        cache.reorder_cache(torch.tensor(parents, device=lm.device))
        last = torch.tensor([[ids[-1]] for ids, _ in frontier], device=lm.device)
        logits = lm.forward(last, cache).logits[:, -1]
    return done, ends, True


@torch.inference_mode()
def text_logprob(lm: Any, prompt_ids: list[int], chain: list, ids: list[int]) -> float:
    """The chained log-probability (no grammar) of ``ids`` after the prompt: one forward pass over
    the whole text, the chain applied at each position to the context before it."""
    full = torch.tensor([prompt_ids + ids], device=lm.device)
    logits = lm.forward(full).logits[0, len(prompt_ids) - 1:len(prompt_ids) - 1 + len(ids)]
    total = 0.0
    for i, token in enumerate(ids):
        final = apply_chain(chain, logits[i:i + 1], full[:, :len(prompt_ids) + i])
        total += float(final.double().log_softmax(-1)[0, token])
    return total


def grammar_gap(lm: Any, prompt_ids: list[int], chain: list, grammar: CompiledGrammar, order: str,
                max_new_tokens: int, counts: dict[Outcome, int], n: int) -> dict[str, Any]:
    """Constrained is not conditioned: the samples beside two exact distributions over the whole
    valid texts y (every one enumerated; at most MAX_VALID):

    - ``masked``: what masked sampling draws, the product of the local distributions renormalised
      over the tokens the grammar allows at each step (the run's own reference);
    - ``conditional``: P(y | y valid), the model's probability of the text y followed by the end of
      text (teacher-forced through the chain without the grammar), renormalised over the valid texts
      (Park et al. 2024, "Grammar-Aligned Decoding").

    With a chi-square of the sampled counts against each."""
    masked, ends, whole = expand(lm, prompt_ids, chain, max_new_tokens, 0.0, grammar, order, MAX_VALID)
    valid = [ids for ids in masked if ends[ids] in ("eos", "complete")]
    out: dict[str, Any] = {"enumerated": whole and len(valid) <= MAX_VALID, "valid": [], "limit": MAX_VALID}
    if not out["enumerated"]:
        out["note"] = (f"the grammar allows more than {MAX_VALID} texts within {max_new_tokens} tokens: "
                       f"no exact P(y | y valid)")
        return out
    eos = min(lm.eos_ids)
    model = {ids: text_logprob(lm, prompt_ids, chain, list(ids) + ([] if ends[ids] == "eos" else [eos]))
             for ids in valid}
    finite = [v for v in model.values() if math.isfinite(v)]
    top = max(finite, default=0.0)
    mass = sum(math.exp(v - top) for v in finite)
    conditional = {ids: (math.exp(v - top) / mass if math.isfinite(v) else 0.0) for ids, v in model.items()}
    masked_p = {ids: math.exp(lp) for ids, lp in masked.items()}
    test_masked, tv_masked = goodness_of_fit(counts, masked_p, n)
    test_conditional, tv_conditional = goodness_of_fit(counts, {k: v for k, v in conditional.items() if v > 0}, n)
    rows = []
    for ids in valid:
        rows.append({"text": lm.decode(list(ids)), "pieces": [lm.piece(i) for i in ids], "ids": list(ids),
                     "count": counts.get(ids, 0), "frequency": counts.get(ids, 0) / n, "masked": masked_p[ids],
                     "conditional": conditional[ids], "model": math.exp(model[ids])})
    rows.sort(key=lambda r: (-r["masked"], -r["conditional"], r["ids"]))
    out.update(valid=rows, valid_mass=sum(math.exp(v) for v in finite),
               invalid_frequency=1.0 - sum(r["count"] for r in rows) / n,
               chi_square_masked=test_masked, tv_masked=tv_masked,
               chi_square_conditional=test_conditional, tv_conditional=tv_conditional)
    return out


def goodness_of_fit(counts: dict[Outcome, int], exact: dict[Outcome, float], n: int) -> tuple[dict | None, float]:
    """Chi-square over the enumerated outcomes plus "everything else", and the total variation
    distance over the same bins. ``exact`` holds probabilities. A bin of "else" expecting fewer than
    MIN_EXPECTED is merged into the smallest enumerated bin for the test (not for the distance)."""
    from scipy.stats import chi2

    keys = sorted(exact, key=lambda k: -exact[k])
    observed = [float(counts.get(k, 0)) for k in keys]
    expected = [n * exact[k] for k in keys]
    other_observed, other_expected = n - sum(observed), max(0.0, n - sum(expected))
    tv = 0.5 * (sum(abs(o - e) for o, e in zip(observed, expected)) + abs(other_observed - other_expected)) / n
    if other_expected >= MIN_EXPECTED or not keys:
        observed, expected = observed + [other_observed], expected + [other_expected]
    else:
        observed[-1] += other_observed
        expected[-1] += other_expected
    if len(observed) < 2:
        return None, tv
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    df = len(observed) - 1
    return {"statistic": statistic, "df": df, "p_value": float(chi2.sf(statistic, df)), "bins": len(observed)}, tv


# --- the whole thing ------------------------------------------------------------------------------


def sample_many(store: ModelStore, req: Request, n: int, batched: bool = True,
                progress: Progress | None = None) -> dict[str, Any]:
    """Draw ``n`` samples with ``req``'s settings (seeds req.seed .. req.seed + n - 1) and compare
    them with the exact distribution. Returns a JSON-ready dict (``outcomes``: text, ids, count,
    frequency, probability, seeds; ``chi_square``; ``tv_distance``; ``timing``)."""
    progress = progress or (lambda f, m: None)
    n = check_size(n, req.max_new_tokens, req.seed)
    spec, params, ctx = prepare(store, req, progress)
    if spec.draws.refusal:
        raise InvalidRequest(spec.draws.refusal)
    if req.forced:
        raise InvalidRequest("sample many takes no forced tokens; put the prefix in the prompt instead")
    if getattr(params, "loop_stop", False) and getattr(params, "loop_repeats", 0):
        raise InvalidRequest("sample many takes no loop_stop: its outcomes are whole runs of the token budget; "
                             "leave loop_repeats on to see each outcome's loops")
    lm, seeds = ctx.lm, list(range(req.seed, req.seed + n))
    grammar, order = ctx.grammar, getattr(params, "order", "")
    started = time.perf_counter()
    chain = reference_chain(spec.name, params)
    # the batched path draws through the five stages of the plain chain; other stages run one by one
    use_batch = batched and spec.name in BATCHED and chain is not None
    if use_batch and chain is not None:  # greedy's chain is temperature 0: the same argmax, and the one-hot probabilities
        samples = draw_batched(lm, chain, spec.name, ctx.prompt_ids, seeds, ctx.max_new_tokens, progress,
                               grammar, order)
    else:
        samples = draw_one_by_one(store, req, seeds, progress)
    sampled = time.perf_counter()
    tally = Tally()
    for s in samples:
        tally.add(s)
    exact = {} if chain is None else enumerate_outcomes(lm, ctx.prompt_ids, chain, ctx.max_new_tokens,
                                                        MIN_EXPECTED / n, grammar, order)
    test, tv = goodness_of_fit(tally.counts, {k: math.exp(v) for k, v in exact.items()}, n) \
        if chain is not None else (None, None)
    gap = None
    if grammar is not None and chain is not None:
        progress(0.95, "enumerating the valid texts")
        gap = dict(grammar_gap(lm, ctx.prompt_ids, chain, grammar, order, ctx.max_new_tokens, tally.counts, n),
                   spec=grammar.spec.to_dict(), meaning=GAP_MEANING)
    seconds = time.perf_counter() - started
    return {"model": lm.key, "dtype": cast(LM, lm).weights, "strategy": spec.name, "params": params.to_dict(), "prompt": req.prompt,
            "prompt_ids": list(ctx.prompt_ids), "seed": req.seed, "n": n, "tokens": ctx.max_new_tokens,
            "batched": use_batch, "reference": _reference_name(spec, chain, grammar is not None),
            "outcomes": _outcomes(lm, tally, exact, n, getattr(params, "loop_repeats", 0),
                                  getattr(params, "loop_min_span", 1)),
            "chi_square": test, "tv_distance": tv, "tau": MIN_EXPECTED / n, "grammar": gap,
            "timing": {"seconds": round(seconds, 3), "sampling_seconds": round(sampled - started, 3),
                       "samples_per_second": round(n / (sampled - started), 2) if sampled > started else None}}


def _reference_name(spec: StrategySpec, chain: list | None, grammar: bool = False) -> str:
    if chain is None:
        return "none (no exact enumeration for this strategy)"
    return spec.draws.reference_name + (", masked by the grammar" if grammar else "")


def _outcomes(lm: Any, tally: Tally, exact: dict[Outcome, float], n: int, loop_repeats: int = 0,
              loop_min_span: int = 1) -> list[dict[str, Any]]:
    """Sampled and enumerated outcomes, most frequent first. ``probability``: the enumerated one, else
    the sampled outcome's own (the sum of its tokens' log-probabilities), else None. With ``loop_repeats``
    (2 or more), each outcome's ``loops``."""
    rows = []
    for ids in set(tally.counts) | set(exact):
        logprob = exact.get(ids, tally.logprobs.get(ids))
        count = tally.counts.get(ids, 0)
        rows.append({"text": lm.decode(list(ids)), "pieces": [lm.piece(i) for i in ids], "ids": list(ids),
                     "count": count, "frequency": count / n,
                     "probability": None if logprob is None else math.exp(logprob),
                     "seeds": tally.seeds.get(ids, [])})
        if loop_repeats:
            rows[-1]["loops"] = [loop.to_dict(lm.decode) for loop in find_loops(ids, loop_repeats, loop_min_span)]
    rows.sort(key=lambda r: (-r["count"], -(r["probability"] or 0.0), r["ids"]))
    return rows
