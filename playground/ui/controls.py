"""Controls derived from the registry: one component per (strategy, parameter), read from each
strategy's Params dataclass, so a new strategy file adds its controls without touching the page.
Also the model menu and the sampler chain's reorder buttons."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import gradio as gr

from playground.errors import InvalidRequest
from playground.models import OFFLINE, on_space
from playground.serving.model_keys import KeyPolicy
from playground.ui.events import QUIET
from strategies.params import describe
from strategies.registry import all_strategies, get_strategy
from strategies.sampling.grammar import EXAMPLES as GRAMMAR_EXAMPLES
from strategies.sampling.grammar import GRAMMAR_KINDS
from strategies.sampling.samplers import PRESETS, SAMPLER_STAGES, SamplerParams, expand_order

if TYPE_CHECKING:
    from strategies.registry import StrategySpec

HUB_MODELS = ("openai-community/gpt2", "openai-community/gpt2-large", "HuggingFaceTB/SmolLM2-360M-Instruct",
              "HuggingFaceTB/SmolLM2-1.7B-Instruct")


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

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def strategies_in_order() -> list[StrategySpec]:
    """The registry's strategies in its family order (greedy first)."""
    return all_strategies()


def controls_for(spec: StrategySpec) -> list[Control]:
    """The controls of one strategy, read from its Params dataclass metadata (strategies.params.describe)."""
    out = []
    for d in describe(spec.params):
        kind, common = d["type"], dict(strategy=spec.name, name=d["name"], default=d["default"],
                                       info=d["help"])
        if d.get("choices"):
            out.append(Control(kind="dropdown", choices=tuple(d["choices"]), **common))
        elif kind == "bool":
            out.append(Control(kind="checkbox", **common))
        elif kind == "str":
            out.append(Control(kind="textbox", **common))
        else:
            out.append(_numeric_control(d, common, integer=kind == "int"))
    return out


def _numeric_control(d: dict[str, Any], common: dict[str, Any], integer: bool) -> Control:
    """A slider over the declared range (ending at ui_max where given); a number box when unbounded."""
    step = d.get("step") or (1 if integer else 0.01)
    low, high = d.get("low"), d.get("ui_max") if d.get("ui_max") is not None else d.get("high")
    if low is None or high is None or (high - low) / step > 5000:
        return Control(kind="number", minimum=d.get("low"), maximum=d.get("high"), step=step, integer=integer,
                       **common)
    if d.get("low_open"):
        low += step  # the open end itself is refused, so the slider starts one step inside
    if d.get("high_open") and d.get("ui_max") is None:
        high -= step
    high = max(high, common["default"])
    return Control(kind="slider", minimum=low, maximum=high, step=step, integer=integer, **common)


def make_component(c: Control, elem_id: str) -> gr.Component:
    common = dict(label=c.label, info=c.info, elem_id=elem_id)
    if c.kind == "slider":
        return gr.Slider(minimum=c.minimum, maximum=c.maximum, value=c.default, step=c.step,
                         precision=0 if c.integer else None, **common)
    if c.kind == "number":
        return gr.Number(value=c.default, minimum=c.minimum, maximum=c.maximum, step=c.step,
                         precision=0 if c.integer else None, **common)
    if c.kind == "dropdown":
        return gr.Dropdown(choices=list(c.choices or ()), value=c.default, **common)
    if c.kind == "checkbox":
        return gr.Checkbox(value=bool(c.default), **common)
    return gr.Textbox(value=str(c.default), **common)


def control_update(c: Control, value: Any) -> Any:
    """An update setting ``c`` to ``value``; a slider grows its end when a link carries a bigger value."""
    if c.kind == "slider" and isinstance(value, (int, float)) and c.maximum is not None and value > c.maximum:
        return gr.update(value=value, maximum=value)
    return gr.update(value=value)


def collect_params(controls: Sequence[Control], strategy: str, values: Sequence[Any]) -> dict[str, Any]:
    """The values of ``strategy``'s controls, by parameter name (the flat list is every strategy's)."""
    out = {}
    for c, v in zip(controls, values):
        if c.strategy == strategy:
            out[c.name] = int(v) if c.integer and isinstance(v, float) and v.is_integer() else v
    return out


def default_strategy(preferred: str) -> str:
    names = [s.name for s in strategies_in_order()]
    return preferred if preferred in names else names[0]


@dataclass
class Panel:
    """The generated controls of every strategy; only the selected strategy's column is visible."""

    controls: list[Control]
    components: list[gr.Component]
    groups: dict[str, gr.Column]

    def params(self, strategy: str, values: Sequence[Any]) -> dict[str, Any]:
        return collect_params(self.controls, strategy, values)

    def visibility(self, strategy: str) -> list[Any]:
        return [gr.update(visible=name == strategy) for name in self.groups]

    def restore(self, strategy: str, params: dict[str, Any]) -> list[Any]:
        """Set ``strategy``'s controls to ``params`` (the rest of them to defaults); leave others alone."""
        return [control_update(c, params.get(c.name, c.default)) if c.strategy == strategy else gr.skip()
                for c in self.controls]


def build_panel(prefix: str, selected: str) -> Panel:
    controls, components, groups = [], [], {}
    for spec in strategies_in_order():
        with gr.Column(visible=spec.name == selected, elem_id=f"pg-{prefix}-{spec.name}",
                       elem_classes=["pg-params"]) as col:
            made = controls_for(spec)
            if not made:
                gr.Markdown("_No parameters: it always takes the most probable token._")
            for c in made:
                controls.append(c)
                components.append(make_component(c, f"pg-{prefix}-{spec.name}-{c.name}"))
                if c.name == "order" and issubclass(spec.params, SamplerParams):
                    _reorder_controls(components[-1], f"pg-{prefix}-{spec.name}")
        groups[spec.name] = col
    return Panel(controls, components, groups)


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

- **json**: a JSON schema, e.g. `{"type": "object", "properties": {"age": {"type": "integer"}}}`;
- **regex**: a regular expression the whole text matches, e.g. `\\d{4}-\\d{2}-\\d{2}`;
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
