"""Beam search's parameters (``BeamParams``): the width, the finishing rule, the pruning knobs, the phases
(strategies/phases.py: a thinking budget per hypothesis; beam has no chain for answer_params). Their own file,
below the search (beam.py) and its records (beam_trace.py), which both read them."""
from __future__ import annotations

from dataclasses import dataclass

from strategies.beam.prune import PruneRules
from strategies.loops import LoopParams
from strategies.params import param
from strategies.phases import PhaseParams

EARLY_STOPPING: dict[str, bool | str] = {"false": False, "true": True, "never": "never"}
FINISHING = ("transformers", "keep_slot")
MAX_BEAMS = 16


@dataclass(frozen=True)
class BeamParams(PhaseParams, LoopParams):
    """Beam width, the finishing rule, and the pruning knobs; loops are looked for on the best path; every
    hypothesis has its own phase and thinking budget."""

    num_beams: int = param(4, "Hypotheses kept per step (k). 1 = greedy.", low=1, high=MAX_BEAMS, noop=1, step=1)
    finishing: str = param(
        "transformers", "What a hypothesis that ends (EOS or the length limit) does. transformers: it leaves the "
        "beam for a set of the k best finished ones, ranked by score / length ** length_penalty, and k "
        "hypotheses keep running; early_stopping decides when to stop; the results match "
        "generate(num_beams=k). keep_slot (the textbook rule of the course notes): it keeps its beam slot and "
        "competes with the running ones by raw summed log-probability, the search runs to the length limit, "
        "and fewer slots run as hypotheses finish, so the best result can differ; length_penalty and "
        "early_stopping do not apply.", choices=FINISHING, noop="transformers")
    length_penalty: float = param(
        1.0, "Finished hypotheses rank by score / length ** length_penalty (length = generated tokens, EOS "
        "included), as in transformers. 0 = off (raw log-probability); > 0 favours longer, < 0 shorter. "
        "Not used by finishing = keep_slot.",
        low=-10.0, high=10.0, noop=0.0, step=0.1, ui_max=3.0, when={"finishing": ("transformers",)}, brief="Finished hypotheses rank by score / length ** length_penalty.")
    early_stopping: str = param(
        "false", "When to stop, as in transformers: true = once num_beams hypotheses are finished; false = once "
        "the best running score at its current length cannot beat the worst finished one; never = that test "
        "at the longest reachable length (canonical beam search, no early stop). Not used by finishing = "
        "keep_slot.", choices=tuple(EARLY_STOPPING), noop="never", when={"finishing": ("transformers",)}, brief="When beam search stops: true, false or never, as transformers reads them.")
    relative_threshold: float = param(
        0.0, "Relative threshold r_p on probabilities (Freitag & Al-Onaizan 2017): of the continuations that "
        "won a beam slot, prune c when P(c) <= r_p x P(best of them), i.e. score(c) <= log(r_p) + best "
        "score; its slot stays empty. 0 = off.",
        low=0.0, high=1.0, high_open=True, noop=0.0, step=0.01, brief="Prune a beam continuation with P ≤ r_p × the best one's (Freitag & Al-Onaizan 2017).")
    absolute_threshold: float = param(
        0.0, "Absolute threshold a_p in nats: of the continuations that won a beam slot, prune c when "
        "score(c) <= best score - a_p. 0 = off.", low=0.0, high=100.0, noop=0.0, step=0.1, ui_max=10.0, brief="Prune a beam continuation scoring at most best - a_p nats (Freitag & Al-Onaizan 2017).")
    local_threshold: float = param(
        0.0, "Relative local threshold r_pl: of the continuations that won a beam slot, prune c when "
        "p(last token of c) <= r_pl x the best last-token probability among them. 0 = off.", low=0.0, high=1.0,
        high_open=True, noop=0.0, step=0.01, brief="Prune a beam continuation whose last-token probability ≤ r_pl × the best one's.")
    max_candidates_per_node: int = param(
        0, "Of the continuations that won a beam slot, prune c when this many better ones share its parent; "
        "its slot stays empty. 0 = off.", low=0, high=MAX_BEAMS, noop=0, step=1)

    def __post_init__(self) -> None:
        # Accept the transformers spellings True / False / "never" as well as the strings.
        value = self.early_stopping
        object.__setattr__(self, "early_stopping", str(value).lower() if isinstance(value, (bool, str)) else value)
        super().__post_init__()

    @property
    def early(self) -> bool | str:
        return EARLY_STOPPING[self.early_stopping]

    @property
    def keep_slot(self) -> bool:
        return self.finishing == "keep_slot"

    @property
    def rules(self) -> PruneRules:
        return PruneRules(self.relative_threshold, self.absolute_threshold, self.local_threshold,
                          self.max_candidates_per_node)


BEAM_FIELDS = tuple(f for f in BeamParams.__dataclass_fields__)
