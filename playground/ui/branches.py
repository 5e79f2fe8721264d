"""The Explore tab's branches: click a bar of the distribution to continue the run with that token.

A branch is the parent's run again (model, strategy, parameters, seed, dtype) with one more forced
step: the chosen token at the chosen step, plus the forced steps the parent already had before it.
The steps before it replay the parent's choices exactly (same seed, same draws); from the forced
step on, the seed-stream rule of ``strategies.forcing`` applies (a forced step draws nothing from
the generator). The forced path is short (one entry per branching), and a share link carries it.

A branch streams into the Explore views like Generate does (Stop ends it), then joins the tree of
branches (playground.whatif.branches), which the panel lists: pick one to go back to it (drawn from its
stored trace, no new run), undo the current one, and read it beside its parent. The forced-tokens
box holds the current branch's path; Generate takes it and a share link carries it.

A share link made while a branch is shown names the steps where it parts from its parent
(playground.ui.share). Restoring it fills the controls with the parent's run and keeps the branch
pending; once that run (Generate, or the link's own re-run) finishes with the parent's forced path,
the branch runs under it, so the panel shows the parent with the branch below, as it was shared. A
branch the parent cannot take (its step past the parent's last one, a token outside the vocabulary)
is not run: a warning names the value and the allowed range, and the parent stays shown.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, TypeGuard

import gradio as gr

from playground.charts.common import escape, show_token
from playground.charts.overview import most_uncertain_step
from playground.charts.text import token_html
from playground.engine import Request
from playground.errors import InvalidRequest
from playground.ui import events
from playground.ui.events import MODEL_EVENT, QUIET, chat_flag, event_data, handler, keyed, refusal
from playground.ui.handlers import generate, stopped
from playground.whatif import branches
from strategies.forcing import FORCEABLE_FAMILIES, parse_path, resolve_token
from strategies.registry import REGISTRY

if TYPE_CHECKING:
    from playground.models import ModelStore
    from playground.ui.components import Shared
    from playground.ui.handlers import Decoder
    from playground.ui.side import Side

HINT = ("Click a bar of the distribution above to continue this run with that token: same strategy, "
        "parameters and seed, the steps before it as they were. Each branch is kept here; pick one to go back to it.")
BRANCH_JS = "window.addEventListener('pg-branch', (e) => trigger('click', {token: e.detail}));"
NOT_BRANCHABLE = ("Branching needs a one-token-per-step strategy (greedy, sampling, gumbel or contrastive): "
                  "a {family} step commits several tokens at once, so there is no single choice to replace. "
                  "Switch the strategy to branch.")
LINK_REFUSED = ("The branch in this link was not run: {err}. The run it branches from is shown; click a bar "
                "of the distribution to branch it.")
RUN_NOTE = '<p class="pg-summary">This is the run itself.</p>'
ROOT_NOTE = ('<p class="pg-summary">This is the run itself. Click a bar of the distribution to branch it; '
             "a branch is shown here beside its parent.</p>")


def finished(trace: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether ``trace`` is a run that ended by itself (its length, EOS, a loop...): one the tree records."""
    return bool(trace) and (trace or {}).get("finish_reason") not in ("", "running", "stopped")


@dataclass
class BranchPanel:
    hint: gr.Markdown
    tree: gr.Radio
    undo: gr.Button
    forced: gr.Textbox
    token: gr.Textbox
    run: gr.Button
    view: gr.HTML
    hook: gr.HTML
    state: gr.State
    pending: gr.State  # a restored link's branch, until its parent run finishes: {"parent", "branch"} paths
    go: gr.State  # the link's branch to run now (its change starts the run)
    parent: gr.State  # the run a branch continues, as the branch read it when it started

    def tree_updates(self, tree: branches.Tree) -> dict[Any, Any]:
        """The tree radio, the beside-the-parent view, the tree state and the forced-tokens box for ``tree``."""
        pair = branches.parent_of(tree)
        current = tree["nodes"][tree["current"]]["trace"]
        view = branch_html(*pair) if pair else ROOT_NOTE if branchable(current.get("strategy")) else RUN_NOTE
        return {self.tree: gr.update(choices=branches.labels(tree), value=tree["current"]), self.view: view,
                self.state: tree, self.forced: branches.path_text(branches.forced_path(current))}

    def on_run(self, trace: dict[str, Any] | None, tree: branches.Tree | None) -> Any:
        """After a finished run (Generate or a branch): it joins the tree of branches."""
        if not finished(trace):
            return keyed({})
        return keyed(self.tree_updates(branches.record(tree, trace)))

    def on_branch(self, trace: dict[str, Any] | None, tree: branches.Tree | None,
                  parent: dict[str, Any] | None) -> Any:
        """After a finished branch: it joins the tree under ``parent``, the run it continued, which joins
        first where the tree lacks it (a click the moment that run finished can start the branch before the
        run's own record lands, and the run's record then reads the branch's trace)."""
        if finished(parent):
            tree = branches.record(tree, parent)
        return self.on_run(trace, tree)

    def after_stop(self, trace: dict[str, Any] | None, tree: branches.Tree | None,
                   trace_out: gr.State) -> dict[Any, Any]:
        """After Stop: the stopped run (as far as it got) joins the tree of branches like a finished one, so
        the panel names it and a branch of it has it as parent; the run's trace, marked stopped, goes to
        ``trace_out``. Nothing when no step was made."""
        if not trace or not trace.get("steps"):
            return {}
        final = stopped(trace)
        return {**self.tree_updates(branches.record(tree, final)), trace_out: final}

    def take_pending(self, trace: dict[str, Any] | None, pending: dict[str, str] | None) -> Any:
        """After a Generate run: the branch to run now and the pending branch. A link's pending branch goes
        when the run finished with its parent's forced path, and is dropped otherwise."""
        if not pending:
            return keyed({})
        if (finished(trace)
                and _same_path(branches.forced_path(trace), pending.get("parent", ""))):
            return keyed({self.go: dict(pending, at=time.monotonic_ns()), self.pending: None})
        return keyed({self.pending: None})

    def strategy_updates(self, strategy: Any, note: Any) -> dict[Any, Any]:
        """The ``note`` under the chart, the panel's hint and the continue button, for a run of ``strategy``."""
        ok = branchable(strategy) or not strategy
        hint = HINT if ok else NOT_BRANCHABLE.format(family=family_of(strategy))
        return {note: branch_note(strategy), self.hint: hint, self.run: gr.update(interactive=ok)}


class RunView(Protocol):
    """What the panel reads of the tab it sits in (the Explore tab): its panel, run column and step slider,
    the outputs of a streamed run and of a redrawn one, and how it fills them."""

    branches: BranchPanel
    main: Side
    step: gr.Slider
    outputs: list[Any]
    show_outputs: list[Any]

    def stream_frames(self, frames: Iterator[Any], theme: str, seed_update: Any = None) -> Iterator[Any]: ...

    def show_trace(self, trace: dict[str, Any], k: Any, model: str, chat: Any, theme: str) -> dict[Any, Any]: ...


def layout() -> BranchPanel:
    """The panel's components; call inside the Explore tab, under the distribution chart."""
    with gr.Accordion("Branches: what if it had picked another token?", open=True, elem_id="pg-branches"):
        hint = gr.Markdown(HINT, elem_classes=["pg-summary"], elem_id="pg-branch-hint")
        tree = gr.Radio([], label="Branches of this run", elem_id="pg-branch-tree", type="value")
        with gr.Row(equal_height=True):
            token = gr.Textbox("", label="Token at the step shown (id, or text that is one token)", scale=2,
                               elem_id="pg-branch-token")
            run = gr.Button("Continue with this token", scale=1, elem_id="pg-branch-run")
            undo = gr.Button("Undo this branch", scale=1, elem_id="pg-branch-undo")
        forced = gr.Textbox("", label="Forced tokens (step:token id, comma separated)", elem_id="pg-forced",
                            info="Generate takes these steps as written; a share link carries them.")
        view = gr.HTML(ROOT_NOTE, elem_id="pg-branch-view")
    hook = gr.HTML("", js_on_load=BRANCH_JS, elem_id="pg-branch-hook")
    return BranchPanel(hint, tree, undo, forced, token, run, view, hook, gr.State(None), gr.State(None),
                       gr.State(None), gr.State(None))


def family_of(strategy: Any) -> str:
    spec = REGISTRY.get(str(strategy or ""))
    return spec.family if spec is not None else ""


def branchable(strategy: Any) -> bool:
    """Whether a run of ``strategy`` can be branched: its steps choose one token each."""
    return family_of(strategy) in FORCEABLE_FAMILIES


def branch_note(strategy: Any) -> str:
    """The line under the distribution chart: "" where a bar click branches the run, else why it does not."""
    if not strategy or branchable(strategy):
        return ""
    return f'<p class="pg-summary pg-branch-note">{NOT_BRANCHABLE.format(family=family_of(strategy))}</p>'








def _same_path(path: dict[int, int], text: str) -> bool:
    """Whether a run's forced path is the one ``text`` writes (a token given as text matches any id)."""
    try:
        wanted = parse_path(text)
    except InvalidRequest:
        return False
    return set(wanted) == set(path) and all(not isinstance(v, int) or path[k] == v for k, v in wanted.items())


def link_forced(store: ModelStore, parent: dict[str, Any], branch_text: str) -> dict[int, int]:
    """The forced path of a link's branch (``branch_text``, "3:12") of the finished run ``parent``, each
    token checked against the model's vocabulary; InvalidRequest naming the value and its range."""
    branch = parse_path(branch_text)
    forced = branches.linked_forced(parent, branch)
    with store.use(parent["model"]) as lm:
        return {k: resolve_token(lm, v) for k, v in sorted(forced.items())}


def branch_html(parent: dict[str, Any], child: dict[str, Any], step: int) -> str:
    """Parent and branch one above the other, the branch's forced ``step`` selected in both."""
    steps = child.get("steps") or []
    st = steps[step] if 0 <= step < len(steps) else {}
    if st.get("forced"):
        note = (f"<p>Step {step}: forced {show_token(child['tokens'][step]['text'])}; the strategy would "
                f"have taken {show_token(st.get('strategy_choice_text', ''))} there.</p>")
    else:
        note = f"<p>The two runs part at step {step}.</p>"
    return (f"{note}<p><b>parent</b></p>{token_html(parent, step)}"
            f"<p><b>branch</b></p>{token_html(child, step)}")






def wire(shared: Shared, explore: RunView, store: ModelStore, decode: Decoder) -> list[Any]:
    """Connect the panel to the Explore tab: a bar click or a typed token continues the run shown, a
    link's branch runs once its parent has, each streamed by ``explore.stream_frames`` into its views;
    picking a branch or undoing one redraws the stored trace (``explore.show_trace``). Returns the events
    Stop cancels."""
    panel, main = explore.branches, explore.main
    run_branch, run_linked = _runs(store, decode, explore.stream_frames)

    settings = {shared.max_new, shared.system, shared.chat, shared.theme}  # what a branch's run reads of the page

    def run_of(values: dict[Any, Any]) -> dict[str, Any]:
        return {"max_new": values[shared.max_new], "system": values[shared.system], "chat": values[shared.chat],
                "theme": values[shared.theme]}

    def on_bar(values: dict[Any, Any], evt: gr.EventData, progress: gr.Progress = gr.Progress()) -> Iterator[list[Any]]:
        token, trace = event_data(evt).get("token"), values[shared.trace]
        if token is None or not trace or not branchable(trace.get("strategy")):
            return  # a click that names no token (the hook itself), or on a run that cannot branch, changes nothing
        try:
            yield from run_branch(trace, values[explore.step], int(token), **run_of(values), progress=progress)
        except InvalidRequest as err:
            raise refusal(err) from None

    def on_typed(values: dict[Any, Any], progress: Any = None) -> Iterator[list[Any]]:
        yield from run_branch(values[shared.trace], values[explore.step], values[panel.token], **run_of(values),
                              progress=progress)

    def on_linked(values: dict[Any, Any], progress: Any = None) -> Iterator[list[Any]]:
        yield from run_linked(values[shared.trace], values[panel.go], **run_of(values), progress=progress)

    running = dict(show_progress="full", show_progress_on=[main.text], **MODEL_EVENT)
    outputs = [*explore.outputs, panel.parent]
    bar = panel.hook.click(with_parent(on_bar, panel.parent, shared.trace), {shared.trace, explore.step, *settings},
                           outputs, api_visibility="private", **running)
    typed = panel.run.click(handler(with_parent(on_typed, panel.parent, shared.trace), 1, True, status=main.status),
                            {shared.trace, explore.step, panel.token, *settings}, outputs, api_name="branch",
                            api_visibility="undocumented", **running)
    linked = panel.go.change(handler(with_parent(on_linked, panel.parent, shared.trace), 1, True, status=main.status),
                             {shared.trace, panel.go, *settings}, outputs, api_visibility="private", **running)
    tree_outputs = [panel.tree, panel.view, panel.state, panel.forced]
    for event in (bar, typed, linked):
        event.success(panel.on_branch, [shared.trace, panel.state, panel.parent], tree_outputs, **QUIET)
    view_inputs = {shared.model, shared.chat, shared.theme}
    redraw = [*explore.show_outputs, *tree_outputs]
    panel.tree.input(_showing(shared, panel, explore, branches.pick, panel.tree), {panel.state, panel.tree, *view_inputs},
                     redraw, **QUIET)
    panel.undo.click(_showing(shared, panel, explore, branches.undo), {panel.state, *view_inputs}, redraw, **QUIET)
    return [bar, typed, linked]


def with_parent(run: Callable[..., Iterator[Any]], parent: gr.State, trace: gr.State) -> Callable[..., Iterator[Any]]:
    """``run`` (a branch's handler, taking one dict of its inputs) whose first frame also writes the run it
    continues (``trace``'s value as the branch read it) into ``parent``, where the branch's record reads it."""
    @functools.wraps(run)
    def wrapped(values: dict[Any, Any], *args: Any, **kwargs: Any) -> Iterator[Any]:
        first = True
        for frame in run(values, *args, **kwargs):
            if first and isinstance(frame, dict):
                frame, first = {**frame, parent: values[trace]}, False
            yield frame
    return wrapped


def _runs(store: ModelStore, decode: Decoder, stream_frames: Callable[..., Iterator[Any]]) -> tuple[Callable[..., Any], ...]:
    """The two branch runs: one token typed or clicked at a step of the run shown, and a restored link's
    branch once its parent has run."""
    def run_branch(trace: dict[str, Any] | None, step: Any, token: Any, max_new: Any, system: str, chat: Any,
                   theme: str, progress: Any = None) -> Iterator[list[Any]]:
        if not trace:
            raise InvalidRequest("generate a run first: a branch continues it")
        settings = branches.branch_settings(trace, step, token)
        req = Request(**settings, max_new_tokens=max_new, system=system or "", chat=chat_flag(trace["model"], chat))
        yield from stream_frames(generate(store, req, progress=events.progress(progress),
                                          final_step=max(settings["forced"]), decoder=decode), theme)

    def run_linked(trace: dict[str, Any] | None, go: dict[str, str] | None, max_new: Any, system: str, chat: Any,
                   theme: str, progress: Any = None) -> Iterator[list[Any]]:
        """A restored link's branch, run from its parent ``trace`` (just finished)."""
        if not go or not trace or not trace.get("tokens"):
            return
        try:
            forced = link_forced(store, trace, go.get("branch", ""))
        except InvalidRequest as err:
            events.LOG.warning("link's branch refused: %s", err)
            gr.Warning(escape(LINK_REFUSED.format(err=err)), title="Branch not restored")
            return
        first = min(parse_path(go["branch"]))
        req = Request(**branches.run_settings(trace, forced), max_new_tokens=max_new, system=system or "",
                      chat=chat_flag(trace["model"], chat))
        yield from stream_frames(generate(store, req, progress=events.progress(progress), final_step=first,
                                          decoder=decode), theme)
    return run_branch, run_linked


def _showing(shared: Shared, panel: BranchPanel, explore: RunView, change: Callable[..., branches.Tree],
             *picked: Any) -> Callable[..., Any]:
    """A handler that changes the tree with ``change`` (given the values of the ``picked`` components too) and
    redraws its current branch."""
    def on_change(values: dict[Any, Any]) -> dict[Any, Any]:
        try:
            tree = change(values[panel.state], *(values[c] for c in picked))
        except InvalidRequest as err:
            raise refusal(err) from None
        node = tree["nodes"][tree["current"]]
        pair = branches.parent_of(tree)
        step = pair[2] if pair else most_uncertain_step(node["trace"])
        return {**explore.show_trace(node["trace"], step, values[shared.model], values[shared.chat], values[shared.theme]),
                **panel.tree_updates(tree)}
    return on_change
