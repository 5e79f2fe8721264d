"""Controls derived from the registry: one component per (strategy, parameter), read from each
strategy's Params dataclass, so a new strategy file adds its controls without touching the page.
Also the model menu and the sampler chain's reorder buttons."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence, Union

import gradio as gr

from playground.errors import InvalidRequest
from playground.models import DEFAULT_MODEL, OFFLINE, on_space
from playground.serving.model_keys import KeyPolicy
from playground.ui.events import QUIET
from strategies.contrastive.contrastive import ContrastiveParams
from strategies.params import applies, brief_help, describe
from strategies.phases import PHASE_FIELDS
from strategies.registry import all_strategies, get_strategy
from strategies.sampling.chain import ChainParams
from strategies.sampling.grammar import EXAMPLES as GRAMMAR_EXAMPLES
from strategies.sampling.grammar import GRAMMAR_KINDS
from strategies.sampling.samplers import PRESETS, SAMPLER_STAGES, SamplerParams, expand_order
from strategies.speculative.eagle.head import has_head
from strategies.speculative.speculative import SpeculativeParams

if TYPE_CHECKING:
    from strategies.registry import StrategySpec

# Qwen3-0.6B thinks: its chat template opens <think> and its tokenizer has </think> as one token, the
# default phase marker (strategies/phases.py)
HUB_MODELS = ("openai-community/gpt2", "openai-community/gpt2-large", "HuggingFaceTB/SmolLM2-360M-Instruct",
              "HuggingFaceTB/SmolLM2-1.7B-Instruct", "Qwen/Qwen3-0.6B")


@dataclass(frozen=True)
class Control:
    """One generated control: a strategy's parameter as a slider, number, dropdown, checkbox or textbox."""

    strategy: str
    name: str
    kind: str  # "slider", "number", "dropdown", "checkbox", "textbox"
    default: Any
    info: str
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None
    choices: tuple[Any, ...] | None = None
    integer: bool = False
    noop: Any = None  # the value at which the parameter changes nothing (None: it has none)
    advanced: bool = False  # folded into the strategy's "Advanced sampler stages" group
    custom: bool = False  # a menu that also takes a typed value (a draft or amateur model's hub id)
    filled: bool = False  # left empty, the run fills it in (strategies.params.param): written back after a run
    more: str = ""  # the whole help, behind the panel's "About these settings" (``info`` is its one line)
    when: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # read only at these values of other parameters

    def applies(self, values: Mapping[str, Any]) -> bool:
        """Whether a run with ``values`` ({name: value} of the parameters ``when`` names) reads this one."""
        return applies({"when": dict(self.when)}, values)

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")

    def is_on(self, value: Any) -> bool:
        """Whether ``value`` makes this (advanced) parameter change anything: it has a no-op value and
        ``value`` is not it."""
        if self.noop is None:
            return False
        try:
            return float(value) != float(self.noop)
        except (TypeError, ValueError):
            return str(value if value is not None else "").strip() != str(self.noop).strip()


# The chain's settings that stay open for every strategy with a chain; the rest of the chain (the
# repetition penalty, the order, and the sampler's further stages) folds into "Advanced sampler stages".
PRIMARY_CHAIN = ("temperature", "top_k", "top_p", "min_p")
CHAIN_FIELDS = frozenset(f.name for cls in (ChainParams, SamplerParams) for f in dataclasses.fields(cls))
ADVANCED_TITLE = "Advanced settings"
ABOUT_TITLE = "About these settings"
PHASES_TITLE = "Thinking and answer"
PHASES_NOTE = ("The settings above run the thinking, up to its close (`</think>`); here the answer gets its own "
               "and the thinking a budget.")

# Parameters naming a second model that must share the first one's tokenizer, and the kinds that need
# no other model: the menu offers these plus the models of the same tokenizer family.
PAIRED = {"draft": ("early_exit", "prompt_lookup", "eagle"), "amateur": ("early_exit", "window")}


def strategies_in_order() -> list[StrategySpec]:
    """The registry's strategies in its family order (greedy first)."""
    return all_strategies()


def controls_for(spec: StrategySpec) -> list[Control]:
    """The controls of one strategy, read from its Params dataclass metadata (strategies.params.describe)."""
    out = []
    chain = issubclass(spec.params, ChainParams)
    for d in describe(spec.params):
        advanced = chain and d["name"] in CHAIN_FIELDS and d["name"] not in PRIMARY_CHAIN + PHASE_FIELDS
        kind, common = d["type"], dict(strategy=spec.name, name=d["name"], default=d["default"],
                                       info=brief_help(d), more=d["help"], noop=d.get("noop"), advanced=advanced,
                                       filled=bool(d.get("filled")), when=tuple((d.get("when") or {}).items()))
        if d["name"] in PAIRED and kind == "str" and _pairs_model(spec.params):
            out.append(Control(kind="dropdown", choices=tuple(pair_choices(d["name"], DEFAULT_MODEL)), custom=True,
                               **common))
        elif d.get("choices"):
            out.append(Control(kind="dropdown", choices=tuple(d["choices"]), **common))
        elif kind == "bool":
            out.append(Control(kind="checkbox", **common))
        elif kind == "str":
            out.append(Control(kind="textbox", **common))
        else:
            out.append(_numeric_control(d, common, integer=kind == "int"))
    return out


def _pairs_model(params: type) -> bool:
    return issubclass(params, (SpeculativeParams, ContrastiveParams))


def ordered(controls: list[Control]) -> list[Control]:
    """The strategy's own settings (a draft, an amateur, gamma...), then the primary chain ones, then the
    advanced ones (a stable sort: each group in its dataclass order)."""
    return sorted(controls, key=lambda c: (c.advanced, c.name in CHAIN_FIELDS))


def advanced_label(on: int) -> str:
    return f"{ADVANCED_TITLE} ({on} on)"


def tokenizer_family(model: str) -> str:
    """Which models read the same token ids as ``model``, by name: the toys share theirs, and so do the
    sizes of SmolLM2, of GPT-2 and of Gemma 3 (the run itself checks the whole vocabularies)."""
    key = str(model or "").strip()
    if key in OFFLINE and OFFLINE[key].numeric_prompt:
        return "toy"
    hub = (OFFLINE[key].hub_id or key) if key in OFFLINE else key
    low = hub.lower().rsplit("/", 1)[-1]
    for family in ("smollm2", "gpt2", "gemma-3", "qwen2.5", "qwen3", "pythia", "opt-"):
        if low.startswith(family):
            return family
    return hub


def pair_choices(role: str, model: str, policy: KeyPolicy | None = None) -> list[str]:
    """The menu of ``role`` ("draft" or "amateur") for ``model``: the kinds that need no other model
    (eagle only where the model has a trained head), then the models on offer with its tokenizer."""
    kinds = [k for k in PAIRED[role] if k != "eagle" or has_head(str(model))]
    family = tokenizer_family(model)
    others = [key for _, key in model_choices(policy) if key != model and tokenizer_family(key) == family]
    return [*kinds, *others]


def pair_update(c: Control, model: str, value: Any) -> Any:
    """The draft or amateur menu for ``model``: its choices, and ``value`` kept unless it is an offline model
    that does not fit (a typed hub id stays: the run checks it)."""
    choices = pair_choices(c.name, model)
    value = str(value or c.default)
    if value not in choices and value in OFFLINE:
        value = str(c.default)
    return gr.update(choices=choices if value in choices else [*choices, value], value=value)


def _numeric_control(d: dict[str, Any], common: dict[str, Any], integer: bool) -> Control:
    """A slider over the declared range, ends included (ending at ui_max where given); a number box when
    unbounded."""
    step = d.get("step") or (1 if integer else 0.01)
    low, high = d.get("low"), d.get("ui_max") if d.get("ui_max") is not None else d.get("high")
    if low is None or high is None or (high - low) / step > 5000:
        return Control(kind="number", minimum=d.get("low"), maximum=d.get("high"), step=step, integer=integer,
                       **common)
    # An open end stays on the slider: set there, the run is refused with the field and its range (the
    # message the CLI and the API give), never moved silently one step inside.
    high = max(high, common["default"])
    return Control(kind="slider", minimum=low, maximum=high, step=step, integer=integer, **common)


# The components make_component builds (each has its own event listeners, .change among them).
Field = Union[gr.Slider, gr.Number, gr.Dropdown, gr.Checkbox, gr.Textbox]


def make_component(c: Control, elem_id: str, visible: bool = True) -> Field:
    common: dict[str, Any] = dict(label=c.label, info=c.info, elem_id=elem_id, visible=visible)
    if c.kind == "slider":
        assert c.minimum is not None and c.maximum is not None  # a slider spans a range (_numeric_control)
        return gr.Slider(minimum=c.minimum, maximum=c.maximum, value=c.default, step=c.step,
                         precision=0 if c.integer else None, **common)
    if c.kind == "number":
        assert c.step is not None  # a numeric control always has its step (_numeric_control)
        return gr.Number(value=c.default, minimum=c.minimum, maximum=c.maximum, step=c.step,
                         precision=0 if c.integer else None, **common)
    if c.kind == "dropdown" and c.custom:
        return gr.Dropdown(choices=list(c.choices or ()), value=c.default, allow_custom_value=True, **common)
    if c.kind == "dropdown":
        return gr.Dropdown(choices=list(c.choices or ()), value=c.default, **common)
    if c.kind == "checkbox":
        return gr.Checkbox(value=bool(c.default), **common)
    return gr.Textbox(value=str(c.default), **common)


def control_update(c: Control, value: Any) -> Any:
    """An update setting ``c`` to ``value``; a slider grows its end when a link carries a bigger value."""
    if c.kind == "slider" and isinstance(value, (int, float)) and c.maximum is not None and value > c.maximum:
        return gr.update(value=value, maximum=value)
    if c.custom and value not in (c.choices or ()):
        return gr.update(value=value, choices=[*(c.choices or ()), value])
    return gr.update(value=value)


def default_strategy(preferred: str) -> str:
    names = [s.name for s in strategies_in_order()]
    return preferred if preferred in names else names[0]


@dataclass(frozen=True)
class Param:
    """One parameter of the panel, one control for every strategy that reads it: how each of them
    declares it (its help, its default and range may differ from one strategy to the next)."""

    name: str
    by_strategy: dict[str, Control]

    @property
    def control(self) -> Control:
        """The declaration the component is built from: the first strategy's that reads it."""
        return next(iter(self.by_strategy.values()))

    @property
    def advanced(self) -> bool:
        """Folded under "Advanced settings": a stage of the chain past the primary ones for some strategy
        that reads it (loops and the watch-list fold too, where a strategy without a chain reads them).
        The phases' settings have a group of their own ("Thinking and answer")."""
        return not self.phase and any(c.advanced for c in self.by_strategy.values())

    @property
    def phase(self) -> bool:
        """A setting of the run's phases (strategies/phases.py): in the "Thinking and answer" group."""
        return self.name in PHASE_FIELDS

    @property
    def defaults_differ(self) -> bool:
        return len({repr(c.default) for c in self.by_strategy.values()}) > 1

    def of(self, strategy: str) -> Control | None:
        """``strategy``'s declaration of it, None where that strategy does not read it."""
        return self.by_strategy.get(strategy)


def panel_params() -> list[Param]:
    """Every parameter name of every strategy, once: the strategies' own settings (a draft, an amateur,
    beams...) first, then the primary chain ones, then the advanced ones; each group in order of first
    appearance (the registry's family order, each strategy's dataclass order)."""
    by: dict[str, dict[str, Control]] = {}
    for spec in strategies_in_order():
        for c in ordered(controls_for(spec)):
            by.setdefault(c.name, {})[spec.name] = c
    params = [Param(name, declared) for name, declared in by.items()]
    return sorted(params, key=lambda p: (p.advanced, p.phase, p.name in CHAIN_FIELDS))


def value_of(c: Control, v: Any) -> Any:
    """A control's value as its parameter takes it (a slider's whole float as an int)."""
    return int(v) if c.integer and isinstance(v, float) and v.is_integer() else v


@dataclass
class Panel:
    """One control per parameter, for every strategy: choosing a strategy shows the controls it reads,
    with its own help (and its default where strategies' defaults differ), and hides the rest."""

    params_: list[Param]
    fields: dict[str, Field]  # parameter name -> its control
    advanced: gr.Accordion
    none_note: gr.Markdown  # shown for a strategy with nothing to set outside the advanced group
    hubs: dict[str, gr.Textbox] = dataclasses.field(default_factory=dict)  # a hub id box under a paired menu
    phases: gr.Accordion | None = None  # "Thinking and answer": the phases' settings, for the strategies with them
    about: gr.Markdown | None = None  # the chosen strategy's settings, each with its whole help

    @property
    def governors(self) -> dict[str, Field]:
        """{name: control} of the parameters whose value decides whether another is read (a draft, a verifier,
        EAGLE's tree, an amateur, beam's finishing rule)."""
        names = {n for p in self.params_ for c in p.by_strategy.values() for n, _ in c.when}
        return {p.name: self.fields[p.name] for p in self.params_ if p.name in names}

    @property
    def conditional(self) -> list[Param]:
        """The parameters some strategy reads only at some values of others (``Control.when``)."""
        return [p for p in self.params_ if any(c.when for c in p.by_strategy.values())]

    @property
    def components(self) -> list[gr.Component]:
        return list(self.fields.values())

    @property
    def outputs(self) -> list[Any]:
        """Every component ``select`` updates."""
        return [*self.fields.values(), *self.hubs.values(), self.advanced, self.none_note,
                *([self.phases] if self.phases is not None else []), *([self.about] if self.about is not None else [])]

    @property
    def paired(self) -> list[tuple[Control, gr.Component]]:
        """The draft and amateur menus, whose choices follow the model."""
        return [(p.control, self.fields[p.name]) for p in self.params_ if p.control.custom]

    @property
    def filled(self) -> list[gr.Component]:
        """The controls a run fills in when left empty (the tree an EAGLE auto run chose)."""
        return [self.fields[p.name] for p in self.params_ if p.control.filled]

    def filled_updates(self, trace: dict[str, Any]) -> dict[gr.Component, Any]:
        """{control: value} of what ``trace``'s run filled in, written into its strategy's controls (as a
        random seed goes into the seed box), so the page, and a link made from it, replay that run."""
        params = trace.get("params") or {}
        return {self.fields[p.name]: gr.update(value=params[p.name]) for p in self.params_
                if p.control.filled and p.of(str(trace.get("strategy"))) is not None
                and params.get(p.name) not in (None, "")}

    def pair_updates(self, model: str, values: Sequence[Any]) -> list[Any]:
        return [pair_update(c, model, v) for (c, _), v in zip(self.paired, values)]

    def params(self, strategy: str, values: Mapping[Any, Any]) -> dict[str, Any]:
        """The values of the controls ``strategy`` reads, by parameter name; ``values``: {component: value}."""
        out = {}
        for p in self.params_:
            c = p.of(strategy)
            if c is not None and self.fields[p.name] in values:
                out[p.name] = value_of(c, values[self.fields[p.name]])
        return out

    def advanced_label(self, strategy: str, values: Mapping[str, Any]) -> str:
        """The advanced group's label: how many of ``strategy``'s advanced settings are on at ``values``
        ({name: value}; a missing one at its default)."""
        mine = [c for p in self.params_ if p.advanced and (c := p.of(strategy)) is not None]
        return advanced_label(sum(1 for c in mine if c.is_on(values.get(c.name, c.default))))

    def governing(self, strategy: str, params: Mapping[str, Any] | None = None,
                  current: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """{name: value} of ``strategy``'s governors as ``select`` leaves them: ``params``'s (a link's, at the
        default where it has none), else the strategy's default where defaults differ, else ``current``'s
        (what the page shows)."""
        out = {}
        for name in self.governors:
            p = next(q for q in self.params_ if q.name == name)
            c = p.of(strategy)
            if c is None:
                continue
            if params is not None:
                out[name] = params.get(name, c.default)
            else:
                out[name] = c.default if p.defaults_differ else (current or {}).get(name, c.default)
        return out

    def shown(self, p: Param, strategy: str, governing: Mapping[str, Any]) -> bool:
        """Whether ``p``'s control shows for ``strategy`` with its governors at ``governing``."""
        c = p.of(strategy)
        return c is not None and c.applies(governing)

    def select(self, strategy: str, params: Mapping[str, Any] | None = None,
               current: Mapping[str, Any] | None = None) -> dict[Any, Any]:
        """{component: update} showing the controls ``strategy`` reads with its help and hiding the rest (and
        those its settings do not read: EAGLE's tree without an EAGLE draft); with ``params`` (a link's, an
        example's), its controls set to them and to its defaults for the rest; without, only a parameter
        whose default differs between strategies is set (to ``strategy``'s). ``current``: {name: value} of
        the governors as the page shows them (``governors``), read where ``params`` is None."""
        out: dict[Any, Any] = {}
        folded, top, phased = 0, 0, 0
        governing = self.governing(strategy, params, current)
        for p in self.params_:
            c = p.of(strategy)
            if p.name in self.hubs:  # shown with its menu
                out[self.hubs[p.name]] = gr.update(visible=c is not None)
            if c is None:
                out[self.fields[p.name]] = gr.update(visible=False)
                continue
            update = control_update(c, (params or {}).get(p.name, c.default)) \
                if params is not None or p.defaults_differ else gr.update()
            update.update(visible=self.shown(p, strategy, governing), info=c.info)
            out[self.fields[p.name]] = update
            top += not p.advanced and not p.phase
            folded += p.advanced
            phased += p.phase
        out[self.advanced] = gr.update(visible=folded > 0)
        if self.phases is not None:
            out[self.phases] = gr.update(visible=phased > 0)
        if params is not None:  # otherwise the label follows the values (``wire``)
            out[self.advanced] = gr.update(visible=folded > 0, label=self.advanced_label(strategy, params))
        out[self.none_note] = gr.update(visible=top == 0)
        if self.about is not None:
            out[self.about] = about_text(self.params_, strategy)
        return out

    def select_event(self, strategy: gr.Dropdown) -> tuple[set[Any], Any]:
        """The inputs (a set: the strategy menu and the governors) and the handler of a person's choice of
        strategy, as ``select`` with the governors' shown values."""
        governors = self.governors

        def chosen(values: Mapping[Any, Any]) -> dict[Any, Any]:
            return self.select(values[strategy], current={n: values[f] for n, f in governors.items()})
        return {strategy, *governors.values()}, chosen

    def wire(self, strategy: gr.Dropdown) -> None:
        """The advanced group's label counts the chosen strategy's settings that are on, as values (or the
        strategy) change."""
        advanced = [(p.name, self.fields[p.name]) for p in self.params_ if p.advanced]

        def label(chosen: str, *values: Any) -> Any:
            return gr.update(label=self.advanced_label(chosen, dict(zip((n for n, _ in advanced), values))))
        gr.on([strategy.change, *(comp.change for _, comp in advanced)], label, [strategy, *(comp for _, comp in advanced)],
              self.advanced, **QUIET)
        governors, conditional = self.governors, self.conditional

        def show(values: Mapping[Any, Any]) -> dict[Any, Any]:
            chosen, governing = values[strategy], {n: values[f] for n, f in governors.items()}
            return {self.fields[p.name]: gr.update(visible=self.shown(p, chosen, governing)) for p in conditional}
        if governors:  # a draft, a verifier or a finishing rule chosen shows the settings it reads
            gr.on([f.change for f in governors.values()], show, {strategy, *governors.values()},
                  [self.fields[p.name] for p in conditional], **QUIET)


def about_text(params: Sequence[Param], strategy: str) -> str:
    """Markdown: every setting ``strategy`` reads, in the panel's order, with its whole help."""
    lines = [f"**{c.label}**: {c.more}" for p in params if (c := p.of(strategy)) is not None]
    return "\n\n".join(lines) or "_Nothing to set._"


def build_panel(prefix: str, selected: str) -> Panel:
    """One control per parameter (``panel_params``), ``selected``'s shown: the strategies' own settings
    and the primary chain ones first, the rest in a closed "Advanced settings" accordion whose label
    counts those that are on. Element ids: ``pg-{prefix}-{name}``, ``pg-{prefix}-advanced``."""
    params, fields = panel_params(), {}
    hubs: dict[str, gr.Textbox] = {}
    with gr.Column(elem_id=f"pg-{prefix}-params", elem_classes=["pg-params"]):
        top = [p for p in params if not p.advanced and not p.phase]
        none_note = gr.Markdown("_Nothing to set: it always takes the most probable token._",
                                visible=not any(p.of(selected) for p in top), elem_id=f"pg-{prefix}-none")
        for p in top:
            fields[p.name] = _field(p, selected, prefix, hubs)
        phased = [p for p in params if p.phase]
        with gr.Accordion(PHASES_TITLE, open=False, elem_id=f"pg-{prefix}-phases", elem_classes=["pg-advanced"],
                          visible=any(p.of(selected) for p in phased)) as phases:
            gr.Markdown(PHASES_NOTE, elem_classes=["pg-summary"])
            for p in phased:
                fields[p.name] = _field(p, selected, prefix, hubs)
        rest = [p for p in params if p.advanced]
        with gr.Accordion(advanced_label(0), open=False, elem_id=f"pg-{prefix}-advanced",
                          visible=any(p.of(selected) for p in rest), elem_classes=["pg-advanced"]) as box:
            for p in rest:
                fields[p.name] = _field(p, selected, prefix, hubs)
                if p.name == "order":
                    _reorder_controls(fields[p.name], f"pg-{prefix}")
        with gr.Accordion(ABOUT_TITLE, open=False, elem_id=f"pg-{prefix}-about", elem_classes=["pg-advanced"]):
            about = gr.Markdown(about_text(params, selected), elem_classes=["pg-summary"])
    panel = Panel(params, fields, box, none_note, hubs, phases, about)
    for p in panel.conditional:  # shown only where the strategy's defaults read it
        c = p.of(selected)
        if c is not None and not panel.shown(p, selected, panel.governing(selected)):
            fields[p.name].visible = False
    return panel


def _field(p: Param, selected: str, prefix: str, hubs: dict[str, gr.Textbox]) -> Field:
    """The control of ``p``, as ``selected`` declares it where it reads it (hidden where it does not); a
    paired menu's hub id box goes into ``hubs``."""
    c, shown = p.of(selected) or p.control, p.of(selected) is not None
    elem_id = f"pg-{prefix}-{p.name}"
    field = make_component(c, elem_id, visible=shown)
    if c.custom:
        hubs[p.name] = _hub_field(field, c, elem_id, shown)
    return field


def _hub_field(menu: gr.Component, c: Control, elem_id: str, visible: bool) -> gr.Textbox:
    """A box under a draft or amateur menu for a hub id the menu does not list; it becomes the menu's value."""
    box = gr.Textbox("", label=f"or a hub id as {c.name}", placeholder="e.g. HuggingFaceTB/SmolLM2-135M-Instruct",
                     elem_id=f"{elem_id}-hub", max_lines=1, visible=visible,
                     info="A model with the same tokenizer, where the network allows; Enter sets it.")

    def use(hub: str) -> Any:
        hub = (hub or "").strip()
        return gr.update(value=hub) if hub else gr.skip()
    gr.on([box.submit, box.blur], use, box, menu, **QUIET)
    return box


def move_stage(order: str, stage: str, delta: int) -> str:
    """``order`` (a preset name or stage names) with ``stage`` moved ``delta`` places, written out in full;
    an order that does not parse starts again from the transformers preset."""
    try:
        names = expand_order(order or "transformers").split(",")
    except InvalidRequest:
        names = list(PRESETS["transformers"])
    if stage in names:
        i = names.index(stage)
        names.insert(min(max(i + delta, 0), len(names) - 1), names.pop(i))
    return ",".join(names)


def _reorder_controls(order_box: gr.Component, elem_id: str) -> None:
    """Presets and up / down buttons under the order textbox: the chain is reordered without typing."""
    with gr.Row(equal_height=True, elem_classes=["pg-reorder"]):
        preset = gr.Dropdown(choices=list(PRESETS), value=None, label="preset order", elem_id=f"{elem_id}-preset",
                             min_width=120)
        stage = gr.Dropdown(choices=list(SAMPLER_STAGES), value=SAMPLER_STAGES[0], label="move stage",
                            elem_id=f"{elem_id}-stage", min_width=120)
        up = gr.Button("↑ earlier", size="sm", elem_id=f"{elem_id}-up", min_width=60)
        down = gr.Button("↓ later", size="sm", elem_id=f"{elem_id}-down", min_width=60)
    preset.input(lambda p: p, preset, order_box, **QUIET)
    up.click(lambda o, st: move_stage(o, st, -1), [order_box, stage], order_box, **QUIET)
    down.click(lambda o, st: move_stage(o, st, 1), [order_box, stage], order_box, **QUIET)


def strategy_summary(name: str) -> str:
    try:
        spec = get_strategy(name)
    except InvalidRequest:
        return ""
    return f"**{spec.name}** · {spec.summary}"


def model_choices(policy: KeyPolicy | None = None) -> list[tuple[str, str]]:
    """Offline models always; hub models where the network allows (a Space, or PLAYGROUND_HUB=1);
    only those ``policy`` (``$PLAYGROUND_MODELS``) permits."""
    policy = policy or KeyPolicy.from_env(OFFLINE)
    choices = [(f"{key} · {spec.title}", key) for key, spec in OFFLINE.items()]
    if on_space() or os.environ.get("PLAYGROUND_HUB") == "1":
        choices += [(f"{hub} (hub)", hub) for hub in HUB_MODELS]
    return [(label, key) for label, key in choices if policy.permits(key)]


# --- the grammar (structured decoding): one group of the sidebar, for every strategy -----------------

NO_GRAMMAR = "none"
GRAMMAR_CHOICES = (NO_GRAMMAR, *GRAMMAR_KINDS)
GRAMMAR_PLACEHOLDERS = {"json": GRAMMAR_EXAMPLES["json"], "regex": GRAMMAR_EXAMPLES["regex"],
                        "choices": GRAMMAR_EXAMPLES["choices"] + '   or   [" once upon a time", " a hill rose high"]',
                        "lark": GRAMMAR_EXAMPLES["lark"]}
GRAMMAR_HELP = """The text must follow a grammar. At every step the grammar stage (first in the chain) removes
every token that cannot continue a valid text and the model's distribution is renormalised over the rest;
the Z chart shows how much of the model's probability the allowed tokens had.

- **json**: a JSON schema, e.g. `{"type": "object", "properties": {"age": {"type": "integer"}}}`; where JSON
  allows whitespace, one space or a line break and at most 16 spaces or tabs (a top-level
  `"x-guidance": {"whitespace_flexible": true}` allows any);
- **regex**: a regular expression the whole text matches, e.g. `\\d{4}-\\d{2}-\\d{2}` (Rust regex syntax, where
  `\\d` is an ASCII digit 0-9, not any Unicode digit, and `/` may be written `\\/`);
- **choices**: the text is one of them: `yes | no | maybe` (spaces around each are trimmed), or a JSON
  list that keeps them: `[" once", " a hill"]`;
- **lark**: a Lark grammar in llguidance's dialect, starting at `start:`.

Constrained is not conditioned: token-by-token masking does not sample the model's distribution over
valid texts. With speculative decoding, drafts the grammar forbids are rejected before verification: the
output follows the *constrained* target, not the target itself."""


GRAMMAR_NOTE = ("With speculative decoding the output follows the *constrained* target "
                "(drafts the grammar forbids are rejected before verification), not the target itself.")


def grammar_request(kind: Any, text: Any) -> dict[str, str] | None:
    """The grammar controls' values as a Request's ``grammar``: None for "none" or an empty text."""
    kind = str(kind or NO_GRAMMAR).strip()
    if kind == NO_GRAMMAR or not str(text or "").strip():
        return None
    return {"kind": kind, "text": str(text)}


def grammar_placeholder(kind: Any) -> str:
    """The text box's placeholder for ``kind``: an example of that kind ("" for none)."""
    return GRAMMAR_PLACEHOLDERS.get(str(kind), "")
