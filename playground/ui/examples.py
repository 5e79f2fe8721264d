"""The examples row: one click per phenomenon, each a configuration that goes through the same
path as a share link."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from playground.errors import InvalidRequest
from playground.models import spec_for
from playground.models.dtypes import DEFAULT_DTYPE
from playground.ui import share
from playground.ui.handlers import DEFAULT_PROMPT, NUMERIC_PROMPT, prompt_for_model
from strategies.sampling.grammar import EXAMPLES as GRAMMAR


@dataclass(frozen=True)
class Example:
    label: str
    config: share.Config
    note: str
    # what the page does once the run is done: "lens" reads every layer of the step shown (the run's most
    # uncertain one) with the logit lens, drawn under its button; "sample" draws What if's Sample many with
    # the restored settings (its N and tokens as the panel holds them); "detect" reads Score's text with the
    # watermark detector (the sidebar's watermark settings); "rules" picks an answer out of a fresh draw with
    # What if's answer rules (the link's N, tokens, extractor and checker)
    then: tuple[str, ...] = ()

    @property
    def whatif(self) -> bool:
        """Whether the example's phenomenon is on the What-if tab (its lockstep, sweep, Score or sample many)."""
        return bool(self.config.pair_a or self.config.sweep or self.config.score_text
                    or {"sample", "rules"} & set(self.then))

    @property
    def run_flag(self) -> str:
        """What the page runs after restoring the example (RUN_JS's modes, comma-separated)."""
        return ",".join(filter(None, [self.config.run, *(["lockstep"] if self.config.pair_a else []),
                                      *(["sweep"] if self.config.sweep else []),
                                      *(["score"] if self.config.score_text else []), *self.then]))


def examples() -> list[Example]:
    """Each shows one phenomenon; the configuration goes through the same path as a share link."""
    cfg = share.Config
    toy: dict[str, Any] = dict(model="toy", prompt="1 2", max_new_tokens=12, seed=4)
    gemma: dict[str, Any] = dict(model="gemma3-270m", prompt="The best way to learn a new language is", max_new_tokens=40)
    hot: dict[str, Any] = dict(model="smollm2-135m", prompt="Write one sentence about the ocean.", seed=7, max_new_tokens=40)
    smol: dict[str, Any] = dict(model="smollm2-135m", seed=0, max_new_tokens=40)
    return [
        Example("Toy 70/30 · greedy", cfg(strategy="greedy", run="generate", **toy),
                "greedy always takes ' a' (p 0.7): the 30% branch is never seen."),
        Example("Toy 70/30 · temperature", cfg(strategy="sampling", params={"temperature": 1.0}, run="generate",
                                               **toy),
                "sampling at T=1 takes ' the' three times in ten; this seed does."),
        *_toy_whatif_examples(toy),
        Example("Toy · greedy vs sampling", cfg(strategy="greedy", compare_strategy="sampling",
                                                compare_params={"temperature": 1.0}, run="compare", **toy),
                "the same prompt and seed, side by side: the sampler takes the other branch."),
        Example("Gemma · greedy loop", cfg(strategy="greedy", run="generate", **gemma),
                "greedy decoding of a small base model repeats the same sentence."),
        Example("Gemma · loop caught", cfg(strategy="greedy", params={"loop_repeats": 3, "loop_stop": True},
                                           run="generate", **{**gemma, "max_new_tokens": 64}),
                "the loop detector finds the sentence of 14 tokens written a third time and stops the run there "
                "(its view: a band per copy, the step it was found)."),
        Example("Gemma · repetition penalty", cfg(strategy="sampling", params={"temperature": 0.0,
                                                                               "repetition_penalty": 1.3},
                                                  run="generate", **gemma),
                "still greedy (T=0), but tokens already in the text are penalised: the loop breaks."),
        Example("Top-p vs min-p at T=2", cfg(strategy="sampling", params={"temperature": 2.0, "top_p": 0.9},
                                             compare_strategy="sampling",
                                             compare_params={"temperature": 2.0, "min_p": 0.1}, run="compare",
                                             **hot),
                "at T=2 the nucleus swells with junk tokens; min-p scales its cut with the top token."),
        Example("Toy · XTC", cfg(strategy="sampling", params={"xtc_probability": 1.0, "xtc_threshold": 0.2},
                                 run="generate", **toy),
                "both ' a' (0.7) and ' the' (0.3) pass the 0.2 threshold: XTC removes the top one, so ' the' wins."),
        Example("Gemma · DRY vs penalty", cfg(strategy="sampling", params={"temperature": 0.0,
                                                                         "repetition_penalty": 1.3},
                                              compare_strategy="sampling",
                                              compare_params={"temperature": 0.0, "dry_multiplier": 0.8,
                                                              "dry_sequence_breakers": '":", "\\"", "*"'},
                                              run="compare", **gemma),
                "both greedy: the penalty pushes away every word already used; DRY only the token that would "
                "continue a repeat (here across lines: newline is no breaker), and the loop gives way."),
        Example("Top-nσ vs top-p at T=3", cfg(strategy="sampling", params={"temperature": 3.0, "top_p": 0.9},
                                              compare_strategy="sampling",
                                              compare_params={"temperature": 3.0, "top_nsigma": 1.0},
                                              run="compare", **hot),
                "top-nσ keeps the same tokens at any temperature; top-p at T=3 lets noise in."),
        Example("Mirostat · μ settles", cfg(strategy="sampling", params={"mirostat_tau": 3.0, "mirostat_eta": 0.1},
                                            run="generate", **{**hot, "max_new_tokens": 120}),
                "μ starts at 2τ and moves each step until the chosen tokens' surprise averages τ (its own chart)."),
        *_family_examples(toy, gemma, smol),
        *_smollm2_examples(smol),
        *_grammar_examples(toy, smol),
    ]


def _toy_whatif_examples(toy: dict[str, Any]) -> list[Example]:
    """The toy's 70/30 step seen from What if (500 samples of it) and from a branch (the 30% taken)."""
    cfg = share.Config
    return [
        Example("Toy 70/30 · sample many", cfg(strategy="sampling", params={"temperature": 1.0}, **toy),
                "What if → Sample many: 500 samples of 4 tokens at T=1, each outcome's share beside its exact "
                "probability: 'a time there lived' 344 times (0.688 against 0.699), 'the hill rose high' 153 "
                "(0.306 against 0.299), and three of the tail's outcomes once each; chi-square p 0.60.",
                then=("sample",)),
        Example("Toy 70/30 · a branch", cfg(strategy="greedy", run="generate", forced="0:9", branch="0", **toy),
                "greedy takes ' a' (p 0.7) and writes 'a time there lived happily ever'; the branch forces ' the' "
                "(p 0.3) at step 0 and greedy goes on from there: 'the hill rose high happily ever'. The Branches "
                "panel holds both runs in one tree and shows where they part; a click on any bar branches again."),
    ]


def _family_examples(toy: dict[str, Any], gemma: dict[str, Any], smol: dict[str, Any]) -> list[Example]:
    """Beam search and contrastive decoding (the registry's other families), the logit lens and the lockstep
    (What if), each where its phenomenon is plain."""
    cfg = share.Config
    return [
        Example("Toy · beam vs greedy", cfg(strategy="beam", compare_strategy="greedy", run="compare",
                                           **{**toy, "prompt": "5 1"}),
                "after the unseen start 'there once', greedy takes ' upon' (p 0.49) and ends on a text of total "
                "log-probability −2.59; beam search keeps ' a' (p 0.37) alive in its tree and finds 'a time there "
                "lived happily ever' at −0.99, five times as probable as greedy's."),
        Example("Gemma · contrastive vs greedy", cfg(strategy="contrastive", params={"strength": 0.5},
                                                     compare_strategy="greedy", run="compare", **gemma),
                "greedy (B) writes its sentence again; contrastive decoding (A) subtracts half the log-probability "
                "of the model's own layer 15 (the amateur) from the last layer's: what the early layers already "
                "predict, the repeat among it, loses, and the text moves on (the words differ between int4 and "
                "float32 weights; the loop breaks on both)."),
        Example("Gemma · logit lens", cfg(strategy="greedy", run="generate",
                                          **{**gemma, "prompt": "The Eiffel Tower is in the city of",
                                             "max_new_tokens": 3}),
                "the lens reads the step shown (the run's most uncertain: ' Paris') at every layer, drawn under "
                "its button: ' Paris' ranks past 20,000th up to layer 11, about 60th at 12, 2nd at 13 and first from "
                "layer 14 of 18.", then=("lens",)),
        Example("SmolLM2 · weights in lockstep", cfg(
                    strategy="greedy", prompt="Explain in one sentence why the sky is blue.", pair_a="float32",
                    pair_b="auto", pair_text=LOCKSTEP_TEXT, **smol),
                "float32 (A) and the page's default weights (B, auto: int4 on most CPUs) read the same answer "
                "token by token (What if): with int4 the distributions part by 0.002 nats on average (KL), yet "
                "the top token differs at 2 of 18 steps, near ties."),
    ]


LOCKSTEP_TEXT = "The sky is blue because air molecules scatter short blue wavelengths of sunlight more than red ones."
LIGHTHOUSE = "Write a short story about a lighthouse keeper."
# what the watermark example wrote on float32 weights (44 green tokens of 80 under its key: z 6.20)
WATERMARKED = ("The fire was burning steadily, casting flickering shadows on the weathered wooden hull of the English "
               "Monolith. A young lassitude snaked through the empty beam, a restless spirit with the added touch of a "
               "moral. Lady Isabella Malcolm, she would sing that night, an ancient Calaic prayer of mercy and exile, "
               "but the only light to guide her on her perilous journey.\n\nLady")
EAGLE_TREE = (3, 2)  # depth, branching: 1 + 2 + 4 + 8 = 15 tree tokens


def _smollm2_examples(smol: dict[str, Any]) -> list[Example]:
    """A watermark piling up green tokens, and an EAGLE draft tree (a pinned one: auto picks a chain on a CPU)."""
    cfg = share.Config
    return [
        Example("SmolLM2 · watermark", cfg(strategy="sampling", prompt=LIGHTHOUSE,
                                          params={"watermark_delta": 2.0}, run="generate",
                                          **{**smol, "seed": 11, "max_new_tokens": 80}),
                "each step adds 2 to the logits of a quarter of the vocabulary, drawn from the token before: green "
                "tokens pile up and the detector's z climbs past 4 (its own chart); where one token holds the "
                "mass the bias moves nothing (green mass against entropy)."),
        Example("SmolLM2 · score & detect", cfg(strategy="sampling", prompt=LIGHTHOUSE,
                                                params={"watermark_delta": 2.0}, score_text=WATERMARKED,
                                                **{**smol, "seed": 11, "max_new_tokens": 80}),
                "What if → Score reads a text the watermark example wrote (float32 weights): each token's "
                "surprisal under the model as it is, without the watermark's push. Detect counts its green "
                "tokens: 44 of 80 where a quarter is expected, z 6.2, p 3e-10; a sentence written without the "
                "watermark scores near 0 (0.5 for one about the ocean). The count reads only the tokens and the "
                "key, so any weights give it.", then=("detect",)),
        Example("SmolLM2 · EAGLE draft tree", cfg(strategy="speculative", prompt="Explain how a compass works.",
                                                  params={"draft": "eagle", "eagle_tree": "static",
                                                          "eagle_depth": EAGLE_TREE[0],
                                                          "eagle_branching": EAGLE_TREE[1], "temperature": 0.0},
                                                  run="generate", **{**smol, "max_new_tokens": 48}),
                "the head drafts a tree 3 deep, 2 children a node (15 tokens), the target checks it in one pass "
                "and keeps the longest path it agrees with (about 2.4 tokens a round); the text is greedy's, token "
                "for token. The tree is pinned: 'auto' sizes it from this machine's pass costs, and on a CPU, where "
                "a pass over 15 tokens costs several plain steps, it picks one level (1x1 to 1x3 here), no tree to "
                "see; the break-even lanes say what a round cost and why this tree did not pay."),
    ]


def _grammar_examples(toy: dict[str, Any], smol: dict[str, Any]) -> list[Example]:
    """The structured-output examples: a schema, a choice, a regex, and where masking is not conditioning."""
    cfg = share.Config
    return [
        Example("JSON schema · SmolLM2", cfg(strategy="greedy", prompt="Give a JSON object for a person named Ada, 36.",
                                             grammar_kind="json", grammar_text=GRAMMAR["json"], run="generate",
                                             **smol),
                "every token must continue a JSON object with a string name and an integer age: the Z chart "
                "shows where the schema took probability away from the model (red below 0.1), diamonds where it "
                "allowed one token only."),
        Example("Choice · yes / no / maybe", cfg(strategy="greedy", prompt="Is the sea salty? Answer yes, no or maybe.",
                                                 grammar_kind="choices", grammar_text=GRAMMAR["choices"],
                                                 run="generate", **{**smol, "max_new_tokens": 8}),
                "the answer is one of three words; the distribution crosses out every other token."),
        Example("Date regex", cfg(strategy="greedy", prompt="When did the Berlin Wall fall? Answer with a date.",
                                  grammar_kind="regex", grammar_text=GRAMMAR["regex"], run="generate",
                                  **{**smol, "max_new_tokens": 16}),
                "the text must match `\\d{4}-\\d{2}-\\d{2}`: only digits and dashes are allowed, so where the model "
                "wanted words (red bars) it writes digits; the regex checks the form, not that the date is real."),
        Example("Toy · constrained ≠ conditioned", cfg(strategy="sampling", params={"temperature": 1.0},
                                                       grammar_kind="choices",
                                                       grammar_text='[" a hill rose high", " the hill rose high"]',
                                                       run="generate", **{**toy, "seed": 1}),
                "two valid texts: ' the hill rose high' has over 99.9% of the model's probability of the two, but the "
                "mask lets the first step take ' a' (p 0.7) and then forces ' hill' (Z 6e-05, red): masked "
                "sampling ends on the text the model almost never writes 7 times in 10."),
        *_thinking_examples(),
    ]


def _thinking_examples() -> list[Example]:
    """A run in two phases (strategies/phases.py) on toy-think, which counts up from a, b steps between
    <think> and </think>, then answers the last number it counted."""
    cfg = share.Config
    think: dict[str, Any] = dict(model="toy-think", prompt="3 + 6 =", max_new_tokens=14, strategy="sampling",
                                 compare_strategy="sampling", run="compare")
    return [
        Example("Toy-think · thinking budget", cfg(params={"thinking_budget": 4}, **think, seed=0),
                "A's budget forces </think> after 4 thinking tokens, mid-count (the model gave it p 3e-05): it "
                "answers 6, the last number it counted; B counts on to 9 and answers 9. What if → Sweep over "
                "thinking_budget draws the accuracy against the budget."),
        Example("Toy-think · two chains", cfg(params={"temperature": 2.0, "answer_params": '{"temperature": 0.2}'},
                                              compare_params={"temperature": 2.0}, **think, seed=48),
                "both think at T 2 and count 4 … 9 alike (the same seed); A answers with its own chain at T 0.2 and "
                "writes 9; B's answer, still at T 2, is 18."),
        Example("Toy-think · budget sweep", cfg(model="toy-think", prompt="3 + 6 =", strategy="sampling", seed=0,
                                                sweep="thinking_budget", sweep_grid="lin:0:10:6", sweep_n=4,
                                                sweep_tokens=16, sweep_extract="last_number", sweep_known="9"),
                "What if → Sweep: 4 samples at each thinking budget from 0 to 10; cut mid-count, the model answers "
                "the last number it counted (6 at budget 4, 8 at 6), so the accuracy against 9 is 0 up to budget 6 "
                "and 1 from 8, where the count ends by itself."),
        Example("Toy-think · answer rules", cfg(model="toy-think", prompt="3 + 6 =", strategy="sampling",
                                                params={"temperature": 3.0}, seed=3, sweep_n=20, sweep_tokens=16,
                                                sweep_extract="last_number", sweep_known="9"),
                "What if → Answer rules: 20 samples at T 3 scatter over 12 answers and only 2 say 9; majority "
                "vote picks 6 (3 votes), while highest mean logprob, DeepConf and CoT-decoding, which weigh "
                "the model's confidence, pick 9.", then=("rules",)),
    ]


def run_key(cfg: share.Config, mode: str) -> str:
    """What makes a run of ``cfg`` in ``mode`` ("generate" or "compare") the run it is, as a share
    query: the settings that run reads (a Generate run reads no Compare strategy), less the weights,
    which an example leaves as a person picked them. Two runs with one key are the same run. Mode ""
    (an example that starts no Explore or Compare run: a lockstep) gives a key no such run has."""
    compare = mode == "compare"
    return share.encode(dataclasses.replace(
        cfg, run=mode if mode in ("generate", "compare") else "", dtype=DEFAULT_DTYPE, branch="",
        compare_strategy=cfg.compare_strategy if compare else share.DEFAULT_COMPARE,
        compare_params=cfg.compare_params if compare else {}))


def example_run_key(ex: Example) -> str:
    """The key (``run_key``) of the run an example starts: for a branch, its parent's (the branch runs after
    it, from the restored link's pending branch, and starts no run a note follows)."""
    cfg = ex.config
    if cfg.branch:
        cfg = dataclasses.replace(cfg, forced=share.split_branch(cfg)[0])
    return run_key(cfg, cfg.run)


def note_after(example_key: str, run: share.Config | None, mode: str) -> bool:
    """Whether an example's note stays when a run of ``run`` starts in ``mode``: only while that run is
    the example's (``example_key``: ``example_run_key``) once more. The note says what the example's run
    shows, and stays while that run is on screen: a control moved and moved back, or the example run
    again, keeps it; any other run replaces what it describes (``run`` None: settings that make no run)."""
    if not example_key or run is None:
        return False
    try:
        return run_key(run, mode) == example_key
    except InvalidRequest:  # a value over its limit: that run is refused, and is no example's
        return False


def example_prompts() -> frozenset[str]:
    """Prompts a person did not type: the page's defaults and every example's."""
    return frozenset({DEFAULT_PROMPT, NUMERIC_PROMPT, *(ex.config.prompt for ex in examples())})


def prompt_on_model(model: str, prompt: str, vocabulary: list[str] | None = None) -> tuple[str, str]:
    """(prompt, note under the box) after the model changes to ``model``. Only a prompt that is empty or
    still a default or an example's is replaced by one the model can take; a typed prompt is kept, and for
    a toy model the note says what its prompts are (token numbers, or words of ``vocabulary``)."""
    text = prompt or ""
    fitted = prompt_for_model(model, text)
    if not text.strip():
        fitted = prompt_for_model(model, NUMERIC_PROMPT) if _numeric(model) else DEFAULT_PROMPT
    keep = bool(text.strip()) and text.strip() not in example_prompts()
    return (text if keep else fitted), toy_note(model, vocabulary)


def prompt_offer(model: str, prompt: str, vocabulary: list[str] | None = None) -> str:
    """The prompt the page offers, with a button, in place of a typed one a toy model cannot read
    (neither token numbers nor words of ``vocabulary``, when that is known); "" when it can, or for a
    text model. The typed prompt is never replaced unasked."""
    words = (prompt or "").split()
    if not _numeric(model) or not words or all(w.isdigit() for w in words):
        return ""
    known = set(vocabulary or ())
    if vocabulary is not None and all(w in known for w in words):
        return ""
    return prompt_for_model(model, prompt)


def toy_note(model: str, vocabulary: list[str] | None = None) -> str:
    """The line under the prompt for a toy model ("" for a text model)."""
    if not _numeric(model):
        return ""
    shown = [w for w in vocabulary or () if w and not (w.startswith("<") and w.endswith(">"))]  # not <eos> & co
    words = f": {', '.join(shown)}" if shown else ""
    return (f"{model} prompts are token numbers (e.g. `{NUMERIC_PROMPT}`: ids 1 and 2) or words of its "
            f"vocabulary{words}.")


def _numeric(model: str) -> bool:
    try:
        return spec_for(model).numeric_prompt
    except InvalidRequest:
        return False
