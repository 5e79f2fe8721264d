"""Engines on the page: a value preset for the strategy's chain (beside the order presets), Copy as (the last
run's settings in an engine's format, with what that engine cannot express) in the Explore tab's export, and
an import box (a llama-server line, a generation_config.json, a Modelfile or a request body into the panel,
with what could not be carried). The presets, formats and importers are playground.engines; this module only
moves their values into the controls and their text onto the page."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import gradio as gr

from playground.engines import FORMATS, PRESETS, export, import_text, preset, settings_of_trace
from playground.engines.gaps import shown
from playground.engines.importing import Imported
from playground.engines.presets import order_words
from playground.engines.settings import changed_values, phase_values
from playground.errors import InvalidRequest
from playground.ui.controls import CHAIN_FIELDS, strategy_summary
from playground.ui.events import QUIET, Updates, keyed
from strategies.phases import PHASE_FIELDS
from strategies.sampling.samplers import WATCHING_FIELDS

if TYPE_CHECKING:
    from playground.ui.components import Shared

# the values a preset or an import sets; watching knobs and phases stay
SAMPLER_CHAIN = CHAIN_FIELDS - WATCHING_FIELDS - set(PHASE_FIELDS)
PRESET_INFO = "Sets the chain: a model's recommendation, everything off, or an engine's defaults."
IMPORT_PLACEHOLDER = ("llama-server -m model.gguf --temp 0.7 --top-k 20 --samplers 'top_k;top_p;temperature'\n"
                      "or a generation_config.json, an Ollama Modelfile, a vLLM/OpenAI request body")
NO_RUN = "_Generate a run first: Copy as writes the last run's settings._"


def reads_chain(shared: Shared, strategy: str) -> bool:
    """Whether ``strategy`` has a sampler chain (it reads the chain's order)."""
    return any(p.name == "order" and p.of(strategy) is not None for p in shared.panel.params_)


def panel_values(shared: Shared, strategy: str, current: Mapping[Any, Any], chain: Mapping[str, Any],
                 phases: Mapping[str, Any] | None = None) -> Updates:
    """{component: update} setting ``strategy``'s panel to ``chain`` (the sampler's values; the rest of the
    chain at its defaults) and keeping its other values (a draft, a watch-list, the phases) as they are;
    ``phases``: phase settings to set too (an import's thinking budget)."""
    kept = {k: v for k, v in shared.panel.params(strategy, current).items() if k not in SAMPLER_CHAIN}
    return shared.panel.select(strategy, {**kept, **{k: v for k, v in chain.items() if k in SAMPLER_CHAIN},
                                          **(phases or {})})


def preset_updates(shared: Shared, note: gr.Markdown, name: str, values: Mapping[Any, Any]) -> Updates:
    """The value preset ``name`` chosen: the panel set to its values (a greedy preset: temperature 0, the
    chain's greedy case) and the sentence saying what it set, with its source, under the menu."""
    strategy = values[shared.strategy]
    if not name:
        return {}
    try:
        chosen = preset(name, values[shared.model])
    except InvalidRequest as err:
        return {note: gr.update(value=f"_{err}_", visible=True)}
    chain = chosen.values if chosen.strategy != "greedy" else {"temperature": 0.0}
    said = f"{chosen.sentence} Source: {chosen.source}"
    return {**panel_values(shared, strategy, values, chain), note: gr.update(value=said, visible=True)}


def import_updates(shared: Shared, note: gr.Markdown, text: str, values: Mapping[Any, Any]) -> Updates:
    """A pasted engine config read into the page: the strategy switched to sampling where the chosen one has no
    chain, its values, seed, token limit and grammar set, and under the box what was set and what could not
    be carried."""
    try:
        imported = import_text(text or "")
    except InvalidRequest as err:
        return {note: f"**Not imported:** {err}"}
    s, strategy = imported.settings, values[shared.strategy]
    if not reads_chain(shared, strategy):
        strategy = s.strategy if s.strategy != "greedy" else "sampling"
    out = {**panel_values(shared, strategy, values, s.params.to_dict(), phase_values(s.params)), shared.strategy: strategy,
           shared.summary: strategy_summary(strategy)}
    if s.seed is not None:
        out[shared.seed] = s.seed
    if s.max_new_tokens is not None:
        out[shared.max_new] = s.max_new_tokens
    if s.grammar:
        out.update({shared.grammar_kind: s.grammar["kind"], shared.grammar_text: s.grammar["text"],
                    shared.grammar_box: gr.update(open=True)})
    return {**out, note: import_note(imported, strategy)}


def import_note(imported: Imported, strategy: str) -> str:
    """What an import set (the values that differ from everything off) and, listed, what it could not carry."""
    s = imported.settings
    changed = {k: v for k, v in {**changed_values(s.params), **phase_values(s.params)}.items() if k != "order"}
    set_ = ", ".join(f"{k} {shown(v)}" for k, v in {"temperature": s.params.temperature, **changed}.items())
    set_ += f", order {order_words(s.params)}"
    left = list(imported.not_carried) + ([f"stop {list(s.stop)!r}: the page has no stop strings"] if s.stop else [])
    lines = [f"**Imported a {imported.kind}** into {strategy}: {set_}."]
    lines += ["", "**Not carried:**", *(f"- {line}" for line in left)] if left else ["", "Everything was carried."]
    return "\n".join(lines)


def copy_as(trace: Mapping[str, Any] | None, engine: str) -> tuple[str, str]:
    """(the code box, the lines under it): the run's settings in ``engine``'s format and what that engine
    cannot express of them; a run the formats do not take says why."""
    if not trace:
        return "", NO_RUN
    try:
        e = export(engine, settings_of_trace(trace))
    except InvalidRequest as err:
        return "", f"_{err}_"
    gaps = "\n".join(f"- {line}" for line in e.cannot_express)
    head = f"**{e.title}** ({e.version})"
    return e.text, f"{head}. What it cannot express of this run:\n\n{gaps}" if gaps else f"{head}: all of this run."


def edited() -> list[Any]:
    """A control moved by hand: the value preset's name and note go (the values are the person's now)."""
    return [gr.update(value=None), gr.update(value="", visible=False)]


class EnginesPanel:
    """The value preset (``layout``, in the strategy's parameters), the import box (``import_layout``, in the
    sidebar) and Copy as (``copy_as_layout``, in the Explore tab's export); ``wire`` registers their events."""

    def layout(self) -> None:
        self.preset = gr.Dropdown(list(PRESETS), value=None, label="Value preset", elem_id="pg-value-preset",
                                  info=PRESET_INFO)
        self.preset_note = gr.Markdown("", visible=False, elem_id="pg-value-preset-note", elem_classes=["pg-summary"])

    def import_layout(self) -> None:
        with gr.Accordion("Import an engine's settings", open=False, elem_id="pg-import"):
            self.import_text = gr.Textbox("", label="Settings to import", lines=3, max_lines=12,
                                          placeholder=IMPORT_PLACEHOLDER, elem_id="pg-import-text")
            self.import_button = gr.Button("Import", size="sm", elem_id="pg-import-run")
            self.import_note = gr.Markdown("", elem_id="pg-import-note", elem_classes=["pg-summary"])

    def copy_as_layout(self) -> None:
        choices = [(f.title, name) for name, f in FORMATS.items()]
        self.engine = gr.Dropdown(choices, value="llama-server", label="Copy as", elem_id="pg-copy-as")
        self.code = gr.Textbox("", label="The run's settings", lines=6, max_lines=20, interactive=False,
                               buttons=["copy"], elem_id="pg-copy-as-code")
        self.gaps = gr.Markdown(NO_RUN, elem_id="pg-copy-as-gaps", elem_classes=["pg-summary"])

    def wire(self, shared: Shared, trace_file: gr.File) -> None:
        """The preset and the import set the panel (reading its values as one dict); Copy as follows the engine
        chosen and each finished run (its trace file is written when it ends); the preset shows for a chain."""
        inputs = {shared.strategy, shared.model, *shared.panel.components}
        self.preset.input(lambda v: keyed(preset_updates(shared, self.preset_note, v[self.preset], v)),
                          inputs | {self.preset}, [*shared.panel.outputs, self.preset_note], **QUIET)
        outputs = [*shared.panel.outputs, shared.strategy, shared.summary, shared.seed, shared.max_new,
                   shared.grammar_kind, shared.grammar_text, shared.grammar_box, self.import_note]
        self.import_button.click(lambda v: keyed(import_updates(shared, self.import_note, v[self.import_text], v)),
                                 inputs | {self.import_text}, outputs, **QUIET)
        gr.on([self.engine.change, trace_file.change], copy_as, [shared.trace, self.engine], [self.code, self.gaps],
              **QUIET)
        shared.strategy.change(lambda s: [gr.update(visible=reads_chain(shared, s))] * 2, shared.strategy,
                               [self.preset, self.preset_note], **QUIET)
        # a value a person edits after a preset: the menu no longer names what the panel holds, so it empties
        # (a preset, an import or a link sets the values without an input event, and keeps it)
        gr.on([getattr(c, "input") for c in shared.panel.components], edited, None, [self.preset, self.preset_note], **QUIET)
