"""``eagle_tree='auto'``: the static tree that should give the most tokens per second here.

EAGLE-2 (Li et al. 2024) shapes the tree by the draft's confidence because acceptance follows it;
on a GPU a wider pass is nearly free, on a CPU it is not: the cost of a pass grows with its rows
(for int4 weights from about 4 rows on). So the choice needs two measured things:

- ``PassCosts``: this machine's milliseconds for one target pass over k tree tokens and one head
  pass (with its draft rows) over k nodes, for k in ``SIZES`` (those that fit the model's context),
  measured once per model, weights and draft vocabulary on this machine (the fastest of ``REPEATS``
  after a warm-up, after a cached context of ``CONTEXT`` tokens; a smaller pass never costs more than
  a larger one) and kept on disk (``playground.models.machine_record``), so that every process on
  the machine chooses the same tree for the same request; trees are never larger than the largest
  size measured;
- the head's acceptance by depth and rank, measured on held-out prompts when it was trained
  (``head.json``, ``held_out.acceptance``): at depth d, the share of rounds that reached d in which the
  target's token was among the b most probable drafts.

For a static tree of depth D and branching b, the expected accepted drafts are
sum_{d<=D} prod_{j<=d} a_b(j) (a_b(j): acceptance within the top b at depth j, the last measured
depth's rate beyond it), a round commits that plus one, and costs the head's passes (the catch-up
over the last round's tokens, then one per level below the root, b^l nodes at level l) plus one
target pass over the 1 + b + ... + b^D tree tokens. Plain decoding costs one one-token pass a token.
The choice maximises committed tokens per millisecond. The trace records the tree chosen (``record``:
depth, branching, nodes, the expected tau from the acceptance) and the run's ``eagle_auto_tree``
parameter names it ("4x2"), so a request or a link that carries it replays the same tree without
measuring; what was measured (the costs, the expected milliseconds and speedup) is wall-clock and
goes under ``timing`` (``figures``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from playground.errors import InvalidRequest
from strategies.speculative.drafts import crop, rollback_cache
from strategies.speculative.eagle.tree import attention_mask, position_ids

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
REPEATS = 5
CONTEXT = 48
MAX_NODES = 128  # tree tokens a verification pass may hold
MAX_DEPTH = 8
COSTS_KEY = "eagle_pass_costs"
MEASURING = "measuring this machine's pass costs for the auto tree (first use only)"

Report = Callable[[float, str], None]  # (fraction done, message): ``DecodeContext.report``


@dataclass(frozen=True)
class PassCosts:
    sizes: tuple[int, ...]
    verify_ms: tuple[float, ...]  # one target pass over k tree tokens
    head_ms: tuple[float, ...]  # one head pass over k nodes, with their draft rows

    def at(self, table: tuple[float, ...], k: float) -> float:
        """Linear interpolation in k (beyond the last size: the last slope)."""
        xs = self.sizes
        if k <= xs[0]:
            return table[0]
        for i in range(1, len(xs)):
            if k <= xs[i] or i == len(xs) - 1:
                x0, x1, y0, y1 = xs[i - 1], xs[i], table[i - 1], table[i]
                return y0 + (y1 - y0) * (k - x0) / (x1 - x0)
        return table[-1]

    def as_dict(self) -> dict[str, Any]:
        return {"sizes": list(self.sizes), "verify_ms": [round(v, 3) for v in self.verify_ms],
                "head_ms": [round(v, 3) for v in self.head_ms]}


def _fastest_ms(fn: Callable[[], None]) -> float:
    """The fastest of ``REPEATS`` runs after a warm-up: what the pass costs when nothing else
    interrupts it (other load only ever adds time)."""
    fn()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return min(times)


def monotone(table: list[float]) -> tuple[float, ...]:
    """Each cost no more than any cost of a larger pass (a pass over more tokens never costs less;
    a small pass measured slow was interrupted)."""
    out = list(table)
    for i in range(len(out) - 2, -1, -1):
        out[i] = min(out[i], out[i + 1])
    return tuple(out)


@torch.inference_mode()
def measure(decoder: Any, report: Report | None = None) -> PassCosts:
    """The pass costs of ``decoder``'s target and head (an ``EagleDecoder`` after ``prefill``); ``report``
    hears ``MEASURING`` before each size, with the share of sizes done."""
    target, head = decoder.target, decoder.head
    span = min(CONTEXT, target.max_context // 4)
    sizes = tuple(k for k in SIZES if span + k <= target.max_context)
    context = torch.arange(span, device=target.device).unsqueeze(0) % max(2, target.vocab_size)
    cache = rollback_cache(target)
    cache = target.forward(context, cache, last=True).cache
    d = int(target.model.config.hidden_size)
    feats = torch.zeros(1, span, d, device=target.device, dtype=target.model.dtype)
    emb = target.model.get_input_embeddings()(context)
    head_cache = head.new_cache()
    _, head_cache = head(emb, feats, head_cache)
    verify, draft = [], []
    for i, k in enumerate(sizes):
        if report is not None:
            report(i / len(sizes), MEASURING)
        parents = [-1] + [0] * (k - 1)
        mask, pos = attention_mask(parents, span), position_ids(parents, span)
        tokens = (torch.arange(k, device=target.device).unsqueeze(0) + 1) % max(2, target.vocab_size)

        def verify_pass() -> None:
            target.forward(tokens, cache, hidden=True, attention_mask=mask, position_ids=pos)
            crop(cache, k)

        def head_pass() -> None:
            out, _ = head(target.model.get_input_embeddings()(tokens), feats[:, :1].expand(1, k, d), head_cache, mask.to(target.device, target.model.dtype),
                          pos.to(target.device))
            decoder.draft_logits(out[0])
            crop(head_cache, k)

        verify.append(_fastest_ms(verify_pass))
        draft.append(_fastest_ms(head_pass))
    return PassCosts(sizes, monotone(verify), monotone(draft))


def costs_name(decoder: Any) -> str:
    return f"{COSTS_KEY}-{decoder.vocab_label}"


def costs_pending(decoder: Any, carried: str = "") -> bool:
    """Whether ``auto_tree`` will measure the pass costs now (a one-off of seconds): no tree carried, and
    none kept for this model, weights and draft vocabulary on this machine."""
    return not carried and not decoder.target.is_measured(costs_name(decoder))


def costs_for(decoder: Any, report: Report | None = None) -> tuple[PassCosts, bool]:
    """The measured costs for this model, weights and draft vocabulary on this machine, measured on
    first use (``report`` hears how far) and then read by every run and process on the machine (the
    model's ``measured_once``), so the same request chooses the same tree; (costs, measured just now)."""
    record, fresh = decoder.target.measured_once(costs_name(decoder), lambda: measure(decoder, report).as_dict())
    costs = PassCosts(tuple(record["sizes"]), tuple(record["verify_ms"]), tuple(record["head_ms"]))
    return costs, fresh


def acceptance_rates(acceptance: dict[str, Any], branching: int) -> list[float]:
    """a_b(d) for each measured depth: hits within the top ``branching`` over rounds that reached d."""
    out = []
    for reached, hits in zip(acceptance["reached"], acceptance["rank_hits"]):
        out.append(sum(hits[:branching]) / reached if reached else 0.0)
    return out


def expected_accepted(rates: list[float], depth: int) -> float:
    total, survive = 0.0, 1.0
    for d in range(depth):
        survive *= rates[min(d, len(rates) - 1)] if rates else 0.0
        total += survive
    return total


def tree_nodes(depth: int, branching: int) -> int:
    return sum(branching ** level for level in range(1, depth + 1))


def choose(costs: PassCosts, acceptance: dict[str, Any]) -> dict[str, Any]:
    """The static (depth, branching) of most committed tokens per millisecond, with its figures."""
    plain = costs.at(costs.verify_ms, 1)
    widest = len(acceptance["rank_hits"][0]) if acceptance.get("rank_hits") else 1
    best: dict[str, Any] | None = None
    for branching in range(1, widest + 1):
        rates = acceptance_rates(acceptance, branching)
        for depth in range(1, MAX_DEPTH + 1):
            nodes = tree_nodes(depth, branching)
            if nodes + 1 > min(MAX_NODES, costs.sizes[-1]):
                break
            accepted = expected_accepted(rates, depth)
            tau = 1 + accepted
            draft = costs.at(costs.head_ms, tau) + sum(costs.at(costs.head_ms, branching ** level)
                                                       for level in range(1, depth))
            verify = costs.at(costs.verify_ms, nodes + 1)
            speedup = tau * plain / (draft + verify)
            if best is None or speedup > best["expected_speedup"]:
                best = {"depth": depth, "branching": branching, "nodes": nodes, "expected_tau": round(tau, 3),
                        "expected_draft_ms": round(draft, 3), "expected_verify_ms": round(verify, 3),
                        "plain_ms": round(plain, 3), "expected_speedup": round(speedup, 3)}
    assert best is not None
    return best


def tree_text(depth: int, branching: int) -> str:
    """A static tree as ``eagle_auto_tree`` writes it: "4x2" (depth 4, branching 2)."""
    return f"{depth}x{branching}"


def parse_tree(text: str) -> tuple[int, int]:
    """(depth, branching) of ``text`` ("4x2"); InvalidRequest naming the value and the allowed ranges
    when it is not a tree auto could choose."""
    depth_text, _, branching_text = text.strip().lower().partition("x")
    ok = depth_text.isdigit() and branching_text.isdigit()
    depth, branching = (int(depth_text), int(branching_text)) if ok else (0, 0)
    if not (1 <= depth <= MAX_DEPTH and 1 <= branching <= MAX_DEPTH and tree_nodes(depth, branching) < MAX_NODES):
        raise InvalidRequest(f"eagle_auto_tree must be empty or depth x branching such as 4x2 (depth and branching "
                             f"in [1, {MAX_DEPTH}], at most {MAX_NODES - 1} drafted nodes), got {text!r}")
    return depth, branching


def auto_tree(decoder: Any, record: dict[str, Any], carried: str = "", report: Report | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pick the tree for ``decoder`` (after ``prefill``) from its head's ``record`` (or take ``carried``, a
    tree an earlier auto run chose, "4x2", without measuring; ``report`` hears a measurement's progress);
    set its depth and branching and return
    (what the trace records about the tree, the same for a run and its replay; what was measured and
    whether the tree came from the request, which go under ``timing``)."""
    acceptance = record.get("held_out", {}).get("acceptance")
    if not acceptance:
        raise InvalidRequest(f"eagle_tree 'auto' needs the {decoder.target.key} head's measured acceptance by "
                             f"depth (python -m playground.tools.train_eagle --model {decoder.target.key} "
                             f"--evaluate); use eagle_tree 'static' or 'dynamic'")
    figures: dict[str, Any] = {"tree_from": "the request", "costs_measured_now": False}
    if carried:
        depth, branching = parse_tree(carried)
    else:
        costs, fresh = costs_for(decoder, report)
        choice = choose(costs, acceptance)
        depth, branching = choice["depth"], choice["branching"]
        figures = {key: choice[key] for key in ("expected_draft_ms", "expected_verify_ms", "plain_ms",
                                                "expected_speedup")}
        figures.update(tree_from="measured pass costs", costs=costs.as_dict(), costs_measured_now=fresh)
    decoder.depth, decoder.branching = depth, branching
    rates = acceptance_rates(acceptance, branching)
    chosen = {"depth": depth, "branching": branching, "nodes": tree_nodes(depth, branching),
              "expected_tau": round(1 + expected_accepted(rates, depth), 3), "acceptance": acceptance}
    return chosen, figures
