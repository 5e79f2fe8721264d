"""What the tabs share (``Shared``: the top row, the sidebar, the run state) and the other tabs' controls a
link carries (``Carried``), and how their values become a configuration: a
share link's, a run's (and its ``engine.Request``), and back (a link or an example restored into the
controls)."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Protocol

import gradio as gr

from playground.engine import MAX_SEED, Request
from playground.models.dtypes import DEFAULT_DTYPE
from playground.ui import share
from playground.ui.controls import NO_GRAMMAR, grammar_placeholder, grammar_request, strategy_summary
from playground.ui.events import Updates, chat_flag, is_chat_model

if TYPE_CHECKING:
    from playground.ui.controls import Panel


class SweepLink(Protocol):
    """What a link needs of What if's Sweep panel (playground.ui.sweep_panel.SweepPanel): its controls, set
    back from a link's configuration, and the sweep last run."""

    record: gr.State
    run: gr.Button

    @property
    def outputs(self) -> list[Any]: ...

    def restore(self, cfg: share.Config) -> dict[Any, Any]: ...


@dataclass
class Carried:
    """The controls outside the top row and the sidebar that a share link carries and restores: Compare's
    strategy B (its panel and summary), the branches' forced path and a link's pending branch, What if's
    lockstep (its model B, both sides' weights, its text, its group and the record last read), its sweep and
    Score's text."""

    compare_strategy: gr.Dropdown
    compare_panel: Panel
    compare_summary: gr.Markdown
    forced: gr.Textbox
    pending: gr.State
    tree: gr.State  # the branches shown (a link names where the shown branch parts from its parent)
    pair_model: gr.Dropdown
    pair_dtypes: list[gr.Dropdown]
    pair_text: gr.Textbox
    pair_box: gr.Accordion
    pair_record: gr.State
    sweep: SweepLink
    score_text: gr.Textbox
    score_trace: gr.State  # the text last scored (a link carries the text while its score is shown)


class Shared:
    """What the tabs share (built by ``page``): the top row (model, weights, strategy, prompt, Generate,
    Stop, the share link, the examples), the sidebar (seed, budget, the strategy's panel, grammar, chat),
    the run state (Explore's trace, Compare's two, the mode a link re-runs) and the page's theme; and
    ``carried``, the other tabs' controls a share link holds, handed over once the tabs are built."""

    model: gr.Dropdown
    dtype: gr.Dropdown
    strategy: gr.Dropdown
    summary: gr.Markdown
    panel: Panel
    seed: gr.Number
    random_seed: gr.Checkbox
    theme: gr.Textbox
    params_box: gr.Accordion
    max_new: gr.Number
    chat: gr.Checkbox
    system: gr.Textbox
    prompt: gr.Textbox
    prompt_note: gr.Markdown
    prompt_fit: gr.Button  # offers a prompt the chosen model can read, in place of a typed one it cannot
    sees_box: gr.Accordion
    sees: gr.Textbox
    slides: gr.Checkbox
    slides_chart: gr.Dropdown
    generate: gr.Button
    stop: gr.Button
    link: gr.Button
    link_box: gr.Textbox
    example_buttons: list[gr.Button]
    example_note: gr.Markdown
    example_key: gr.State  # the run the note describes (examples.example_run_key), "" when none
    tabs: gr.Tabs
    run_flag: gr.Textbox
    trace: gr.State
    traces: dict[str, gr.State]
    mode: gr.State
    grammar_box: gr.Accordion
    grammar_kind: gr.Dropdown
    grammar_text: gr.Textbox
    carried: Carried
    api_in: list[gr.Component]  # the /generate endpoint's own inputs (playground.ui.api)
    api_out: list[gr.Component]
    api_trigger: gr.Button

    @property
    def config_inputs(self) -> set[Any]:
        """Everything a share link carries (every control that changes a run): an event's inputs as a set,
        so its handler reads one {component: value} dict (``split_config``)."""
        return {self.model, self.strategy, self.prompt, self.system, self.chat, self.seed, self.max_new,
                *self.panel.components, self.carried.compare_strategy, *self.carried.compare_panel.components, self.carried.forced,
                self.grammar_kind, self.grammar_text, self.dtype}

    @property
    def run_inputs(self) -> set[Any]:
        """What a run reads: the share link's configuration, the random-seed toggle (a random seed is
        written into the seed box, which the link carries), the page theme."""
        return self.config_inputs | {self.random_seed, self.theme}

    def split_config(self, values: Mapping[Any, Any]) -> dict[str, Any]:
        """``values`` ({component: value}, ``config_inputs`` among them) as share_query's keyword arguments."""
        strategy, b_strategy = values[self.strategy], values[self.carried.compare_strategy]
        return dict(model=values[self.model], strategy=strategy, prompt=values[self.prompt],
                    system=values[self.system], chat=values[self.chat], seed=values[self.seed],
                    max_new_tokens=values[self.max_new], params=self.panel.params(strategy, values),
                    compare_strategy=b_strategy, compare_params=self.carried.compare_panel.params(b_strategy, values),
                    forced=values[self.carried.forced] or "", grammar_kind=values[self.grammar_kind] or NO_GRAMMAR,
                    grammar_text=values[self.grammar_text] or "", dtype=values[self.dtype] or DEFAULT_DTYPE)

    @property
    def restore_outputs(self) -> list[Any]:
        """Every component ``apply_config`` may set."""
        return [self.model, self.strategy, self.prompt, self.system, self.chat, self.seed, self.max_new,
                *self.panel.outputs, self.summary, self.carried.compare_strategy, *self.carried.compare_panel.outputs,
                self.carried.compare_summary,
                self.tabs, self.run_flag, self.mode, self.carried.forced, self.grammar_box, self.grammar_kind,
                self.grammar_text, self.carried.pending, self.dtype, self.carried.pair_model, *self.carried.pair_dtypes,
                self.carried.pair_text, self.carried.pair_box, *self.carried.sweep.outputs, self.carried.score_text]

    def apply_config(self, cfg: share.Config, weights: bool = True) -> Updates:
        """{component: update} setting every control to ``cfg`` (a share link or an example), within
        ``restore_outputs``. A link's branch leaves its parent's forced path in the forced-tokens box
        (Generate runs the parent) and the branch pending, to run once the parent has. ``weights``: set the
        Weights too (a link); an example leaves the weights a person picked."""
        chat_model = is_chat_model(cfg.model)
        forced, branch = share.split_branch(cfg)
        out: Updates = {
            self.model: cfg.model, self.strategy: cfg.strategy, self.prompt: cfg.prompt,
            self.system: gr.update(value=cfg.system, visible=chat_model and cfg.chat),
            self.chat: gr.update(value=cfg.chat, visible=chat_model), self.seed: cfg.seed,
            self.max_new: cfg.max_new_tokens,
            **self.panel.select(cfg.strategy, cfg.params),
            self.summary: strategy_summary(cfg.strategy), self.carried.compare_strategy: cfg.compare_strategy,
            **self.carried.compare_panel.select(cfg.compare_strategy, cfg.compare_params),
            self.carried.compare_summary: strategy_summary(cfg.compare_strategy),
            self.tabs: gr.Tabs(selected="compare" if cfg.run == "compare" else "explore"), self.run_flag: cfg.run,
            self.mode: "compare" if cfg.run == "compare" else "generate", self.carried.forced: forced,
            self.grammar_kind: cfg.grammar_kind or NO_GRAMMAR,
            self.grammar_text: gr.update(value=cfg.grammar_text, placeholder=grammar_placeholder(cfg.grammar_kind)),
            self.carried.pending: {"parent": forced, "branch": branch} if branch else None}
        if cfg.grammar_kind:
            out[self.grammar_box] = gr.update(open=True)
        if cfg.pair_a:  # a lockstep: its panel filled in and open, read once restored (RUN_JS)
            w = self.carried
            out.update({w.pair_model: cfg.pair_model or None, w.pair_dtypes[0]: cfg.pair_a,
                        w.pair_dtypes[1]: cfg.pair_b or cfg.pair_a, w.pair_text: cfg.pair_text,
                        w.pair_box: gr.update(open=True), self.run_flag: ",".join(filter(None, [cfg.run, "lockstep"]))})
            if cfg.run != "compare":
                out[self.tabs] = gr.Tabs(selected="whatif")
        if cfg.sweep:  # a sweep: its panel filled in and open, run once restored (RUN_JS)
            out.update(self.carried.sweep.restore(cfg))
            out[self.run_flag] = ",".join(filter(None, [str(out[self.run_flag]), "sweep"]))
            if cfg.run != "compare":
                out[self.tabs] = gr.Tabs(selected="whatif")
        elif cfg.sweep_n or cfg.sweep_tokens or cfg.sweep_extract or cfg.sweep_known:  # the answer rules' settings
            out.update(self.carried.sweep.restore(cfg))
        if cfg.score_text:  # a text to score: in Score's box, scored once restored (RUN_JS)
            out[self.carried.score_text] = cfg.score_text
            out[self.run_flag] = ",".join(filter(None, [str(out[self.run_flag]), "score"]))
            if cfg.run != "compare":
                out[self.tabs] = gr.Tabs(selected="whatif")
        if weights:
            out[self.dtype] = cfg.dtype
        return out


def share_query(model: str, strategy: str, prompt: str, system: str, chat: bool, seed: Any, max_new_tokens: Any,
                params: dict[str, Any], compare_strategy: str, compare_params: dict[str, Any],
                run: str = "generate", forced: str = "", grammar_kind: str = "", grammar_text: str = "",
                branch: str = "", dtype: str = DEFAULT_DTYPE, pair: dict[str, str] | None = None,
                sweep: dict[str, Any] | None = None, score_text: str = "") -> str:
    """The page's configuration as a query string ('?model=...'), to append to the page's address.
    ``branch``: the steps of ``forced`` where the branch shown parts from its parent ("" for one run);
    ``pair``: the lockstep read on the What-if tab (share.Config's ``pair_*`` fields), if any; ``sweep``: the
    sweep last run there (its ``sweep*`` fields); ``score_text``: the text Score shows scored ("" for none).
    Raises InvalidRequest naming the value and its limit where one is over it (share.encode)."""
    cfg = page_config(model, strategy, prompt, system, chat, seed, max_new_tokens, params, compare_strategy,
                      compare_params, run, forced, grammar_kind, grammar_text, branch, dtype)
    for key, value in {**(pair or {}), **(sweep or {})}.items():  # pair_model, ..., sweep, sweep_grid, ...
        setattr(cfg, key, value)
    cfg.score_text = score_text or ""
    return share.encode(cfg)


def page_config(model: str, strategy: str, prompt: str, system: str, chat: bool, seed: Any, max_new_tokens: Any,
                params: dict[str, Any], compare_strategy: str, compare_params: dict[str, Any],
                run: str = "generate", forced: str = "", grammar_kind: str = "", grammar_text: str = "",
                branch: str = "", dtype: str = DEFAULT_DTYPE) -> share.Config:
    """The controls' values (``Shared.split_config``'s) as the configuration a link or an example holds."""
    kind = "" if grammar_kind in (None, "", NO_GRAMMAR) else grammar_kind
    return share.Config(model=model, strategy=strategy, prompt=prompt or "", system=system or "", chat=bool(chat),
                        seed=int(seed or 0), max_new_tokens=int(max_new_tokens or share.DEFAULT_MAX_NEW_TOKENS),
                        params=params, compare_strategy=compare_strategy, compare_params=compare_params, run=run,
                        forced=(forced or "").strip(), branch=(branch or "") if forced else "", grammar_kind=kind,
                        grammar_text=(grammar_text or "") if kind else "", dtype=dtype or DEFAULT_DTYPE)


def run_config(page: Shared, values: Mapping[Any, Any]) -> tuple[dict[str, Any], Any, str]:
    """(configuration, seed update, theme) from ``page.run_inputs``' values. With Random seed on, a fresh
    seed that the update writes back into the box, so the run can be repeated."""
    cfg, theme = page.split_config(values), values[page.theme]
    if not values[page.random_seed]:
        return cfg, gr.skip(), theme
    cfg["seed"] = random_seed()
    return cfg, gr.update(value=cfg["seed"]), theme


def run_request(cfg: Mapping[str, Any], forced: dict[int, int | str] | None = None) -> Request:
    """The run ``cfg`` (``Shared.split_config``'s values) asks for: its strategy A with its parameters,
    the chat flag as the model takes it, the grammar controls as a grammar, and the forced path ``forced``
    (Explore's; a Compare run forces nothing). Raises InvalidRequest naming a value out of range."""
    return Request(model=cfg["model"], strategy=cfg["strategy"], prompt=cfg["prompt"], params=dict(cfg["params"] or {}),
                   seed=cfg["seed"], max_new_tokens=cfg["max_new_tokens"], system=cfg["system"] or "",
                   chat=chat_flag(cfg["model"], cfg["chat"]), dtype=cfg["dtype"], forced=dict(forced or {}),
                   grammar=grammar_request(cfg["grammar_kind"], cfg["grammar_text"]))


def random_seed() -> int:
    return secrets.randbelow(MAX_SEED + 1)
