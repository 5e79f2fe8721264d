"""The beam tree: every candidate a beam-family search considered, as plain data.

A node is one (parent, token) pair that made it into a step's candidate pool.
Its ``status`` says what became of it:

- ``kept``: entered the running beam (and was expanded at the next step,
  unless the search stopped there);
- ``finished``: a complete hypothesis (ended in EOS or at the length limit)
  that is among the results;
- ``pruned``: would have entered the beam but a pruning rule removed it
  (``reason`` names the rule, ``threshold`` is the bound at that moment);
- ``fell_off``: ranked below the beam, or a finished hypothesis that better
  ones pushed out of the results (``reason`` says which);
- ``sampled``: a token of a sampled prefix (sample-then-beam).

``rank`` is the node's place in its step's pool (0 = best), ``tree`` the
sampled prefix it grew from (0 without one). The JSON form (``to_dict``) is
the ``beam`` section of the trace, with ``best`` (the winning path's node
ids, first token first), ``finished`` (the results, best first) and
``counters``; charts read only that. Scores are cumulative log-probabilities
in nats.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from playground.trace import Token, rnd

STATUSES = ("kept", "finished", "pruned", "fell_off", "sampled")


@dataclass
class BeamTree:
    """Nodes in creation order; a node's id is its index."""

    piece: Callable[[int], str]  # token id -> display text
    kind: str = "beam"
    nodes: list[dict[str, Any]] = field(default_factory=list)
    _logprobs: list[tuple[float, float, float]] = field(default_factory=list, repr=False)

    def add(self, parent: int | None, step: int, token_id: int, logprob: float, score: float, status: str,
            reason: str = "", threshold: float | None = None, rank: int = 0, tree: int = 0,
            drawn_logprob: float | None = None, raw_logprob: float | None = None, **extra: Any) -> int:
        """Append a node and return its id.

        logprob: the token's log-probability in the search's own terms (``score`` sums them);
        drawn_logprob: under the distribution it was sampled from, if it was sampled through a chain;
        raw_logprob: under the model's own distribution. Both default to ``logprob``.
        """
        assert status in STATUSES, status
        node: dict[str, Any] = {"id": len(self.nodes), "parent": parent, "step": int(step), "token_id": int(token_id),
                "text": self.piece(int(token_id)), "logprob": rnd(logprob), "score": rnd(score),
                "status": status, "reason": reason, "threshold": _round_or_none(threshold),
                "rank": int(rank), "tree": int(tree)}
        node.update({k: (rnd(v) if isinstance(v, float) else v) for k, v in extra.items()})
        self.nodes.append(node)
        self._logprobs.append((float(logprob), float(logprob if drawn_logprob is None else drawn_logprob),
                               float(logprob if raw_logprob is None else raw_logprob)))
        return node["id"]

    def set_status(self, node_id: int, status: str, reason: str = "", threshold: float | None = None) -> None:
        assert status in STATUSES, status
        node = self.nodes[node_id]
        node["status"], node["reason"], node["threshold"] = status, reason, _round_or_none(threshold)

    def path(self, node_id: int | None) -> list[int]:
        """Node ids from the first generated token down to ``node_id``."""
        out: list[int] = []
        while node_id is not None:
            out.append(node_id)
            node_id = self.nodes[node_id]["parent"]
        return out[::-1]

    def token_ids(self, node_id: int | None) -> list[int]:
        return [self.nodes[i]["token_id"] for i in self.path(node_id)]

    def tokens(self, node_id: int | None) -> list[Token]:
        """The path to ``node_id`` as trace tokens (log-probs unrounded)."""
        return [Token(self.nodes[i]["token_id"], self.nodes[i]["text"], *self._logprobs[i][1:])
                for i in self.path(node_id)]

    def logprobs(self, node_id: int) -> tuple[float, float, float]:
        """A node's token log-probabilities, unrounded: (own, drawn, raw)."""
        return self._logprobs[node_id]

    def count(self, status: str) -> int:
        return sum(1 for n in self.nodes if n["status"] == status)

    def to_dict(self, best: int | None, finished: list[dict[str, Any]], counters: dict[str, Any],
                **extra: Any) -> dict[str, Any]:
        """The trace's ``beam`` section: nodes, the winning path, the results, the counters."""
        d = {"kind": self.kind, "nodes": self.nodes, "best": self.path(best), "best_node": best,
             "finished": finished, "counters": counters}
        d.update(extra)
        return d


def _round_or_none(x: float | None) -> float | None:
    return None if x is None else rnd(x)


def hypothesis_record(tree: BeamTree, node_id: int, score: float, penalised: float | None,
                      decode: Callable[[list[int]], str], **extra: Any) -> dict[str, Any]:
    """One finished hypothesis as the results table shows it."""
    ids = tree.token_ids(node_id)
    rec = {"node": node_id, "token_ids": ids, "text": decode(ids), "length": len(ids),
           "score": rnd(score), "penalised": None if penalised is None else rnd(penalised),
           "tree": tree.nodes[node_id]["tree"], "step": tree.nodes[node_id]["step"]}
    rec.update({k: (rnd(v) if isinstance(v, float) else v) for k, v in extra.items()})
    return rec
