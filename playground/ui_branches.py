"""The Explore tab's branches: click a bar of the distribution to continue the run with that token.

A branch streams into the Explore views like Generate does (Stop ends it), then joins the tree of
branches (playground.branches), which the panel lists: pick one to go back to it (drawn from its
stored trace, no new run), undo the current one, and read it beside its parent. The forced-tokens
box holds the current branch's path; Generate takes it and a share link carries it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import gradio as gr

from playground import branches, charts
from playground.errors import InvalidRequest
from playground.ui_whatif import branch_forced, branch_html

HINT = ("Click a bar of the distribution above to continue this run with that token: same strategy, "
        "parameters and seed, the steps before it as they were. Each branch is kept here; pick one to go back to it.")
BRANCH_JS = "window.addEventListener('pg-branch', (e) => trigger('click', {token: e.detail}));"
ROOT_NOTE = ('<p class="pg-summary">This is the run itself. Click a bar of the distribution to branch it; '
             "a branch is shown here beside its parent.</p>")


@dataclass
class BranchPanel:
    tree: gr.Radio
    undo: gr.Button
    forced: gr.Textbox
    token: gr.Textbox
    run: gr.Button
    view: gr.HTML
    hook: gr.HTML
    state: gr.State


def layout() -> BranchPanel:
    """The panel's components; call inside the Explore tab, under the distribution chart."""
    with gr.Accordion("Branches: what if it had picked another token?", open=True, elem_id="pg-branches"):
        gr.Markdown(HINT, elem_classes=["pg-summary"])
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
    return BranchPanel(tree, undo, forced, token, run, view, hook, gr.State(None))


def tree_updates(tree: branches.Tree | None) -> list[Any]:
    """[tree radio, beside-the-parent view, tree state, forced-tokens box] for ``tree``."""
    if not tree:
        return [gr.update(choices=[], value=None), ROOT_NOTE, None, gr.skip()]
    pair = branches.parent_of(tree)
    view = branch_html(*pair) if pair else ROOT_NOTE
    current = tree["nodes"][tree["current"]]["trace"]
    return [gr.update(choices=branches.labels(tree), value=tree["current"]), view, tree,
            branches.path_text(branches.forced_path(current))]


def on_run(trace: dict[str, Any] | None, tree: branches.Tree | None) -> list[Any]:
    """After a finished run (Generate or a branch): it joins the tree of branches."""
    if not trace or trace.get("finish_reason") in ("", "running", "stopped"):
        return [gr.skip()] * 4
    return tree_updates(branches.record(tree, trace))


def wire(page: Any, panel: BranchPanel, store: Any, decode: Any,
         stream_frames: Callable[..., Iterator[list[Any]]], outputs: list[Any],
         show_trace: Callable[..., list[Any]], show_outputs: list[Any]) -> list[Any]:
    """Connect the panel. ``stream_frames(frames, theme)`` turns generate's frames into ``outputs``
    (the Explore run's); ``show_trace(trace, step, model, chat, theme)`` redraws a stored trace into
    ``show_outputs``. Returns the events Stop cancels."""
    from playground.ui import MODEL_EVENT, QUIET, _chat_flag, _gr_errors, _progress_adapter, generate, refusal

    tree_outputs = [panel.tree, panel.view, panel.state, panel.forced]

    def run_branch(trace: dict[str, Any] | None, step: Any, token: Any, max_new: Any, system: str, chat: Any,
                   theme: str, progress: Any = None) -> Iterator[list[Any]]:
        if not trace:
            raise InvalidRequest("generate a run first: a branch continues it")
        forced = branch_forced(trace, step, token)
        k = max(forced)
        chat_flag = _chat_flag(trace["model"], chat)
        frames = generate(store, trace["model"], trace["strategy"], trace["prompt"], dict(trace["params"]),
                          trace["seed"], max_new, system, chat_flag, progress=_progress_adapter(progress),
                          final_step=k, decoder=decode, dtype=trace.get("dtype") or "auto", forced=forced)
        yield from stream_frames(frames, theme)

    def on_bar(trace: dict[str, Any] | None, step: Any, max_new: Any, system: str, chat: Any, theme: str,
               evt: gr.EventData, progress: gr.Progress = gr.Progress()) -> Iterator[list[Any]]:  # noqa: B008
        token = (getattr(evt, "_data", None) or {}).get("token")
        if token is None:
            return  # a click that names no token (the hook itself) changes nothing
        try:
            yield from run_branch(trace, step, int(token), max_new, system, chat, theme, progress)
        except InvalidRequest as err:
            raise refusal(err) from None

    def on_pick(tree: branches.Tree | None, index: Any, model: str, chat: Any, theme: str) -> list[Any]:
        try:
            return _show(branches.pick(tree, index), model, chat, theme)
        except InvalidRequest as err:
            raise refusal(err) from None

    def on_undo(tree: branches.Tree | None, model: str, chat: Any, theme: str) -> list[Any]:
        try:
            return _show(branches.undo(tree), model, chat, theme)
        except InvalidRequest as err:
            raise refusal(err) from None

    def _show(tree: branches.Tree, model: str, chat: Any, theme: str) -> list[Any]:
        node = tree["nodes"][tree["current"]]
        pair = branches.parent_of(tree)
        step = pair[2] if pair else charts.most_uncertain_step(node["trace"])
        return [*show_trace(node["trace"], step, model, chat, theme), *tree_updates(tree)]

    inputs = [page.trace, page.step, page.max_new, page.system, page.chat, page.theme]
    bar = panel.hook.click(on_bar, inputs, outputs, show_progress="full", show_progress_on=[page.main.text],
                           api_visibility="private", **MODEL_EVENT)
    typed = panel.run.click(_gr_errors(run_branch, len(inputs) + 1, True),
                            [page.trace, page.step, panel.token, *inputs[2:]], outputs, api_name="branch",
                            api_visibility="undocumented", show_progress="full", show_progress_on=[page.main.text],
                            **MODEL_EVENT)
    for event in (bar, typed):
        event.success(on_run, [page.trace, panel.state], tree_outputs, **QUIET)
    view_inputs = [page.model, page.chat, page.theme]
    panel.tree.input(on_pick, [panel.state, panel.tree, *view_inputs], [*show_outputs, *tree_outputs], **QUIET)
    panel.undo.click(on_undo, [panel.state, *view_inputs], [*show_outputs, *tree_outputs], **QUIET)
    return [bar, typed]
