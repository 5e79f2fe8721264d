"""The tree of branches of one run: every run continued with another token, and its parent.

A branch is a run with a *forced path* (step -> token id, see strategies.forcing): the parent's
own tokens before the chosen step and the chosen token at it, with the parent's model, strategy,
parameters and seed. The tree is a plain dict (a page's ``gr.State``) of nodes, each holding its
path, its parent's index and its finished trace, so going back to any branch redraws it without
running the model again. Pure: no gradio, no tensors; the ``step:token`` notation of a path is
read by strategies.forcing's one parser (``parse_path``).

A finished run joins the tree of the run before it when it has the same model, strategy,
parameters, seed and prompt ids; its parent is the current node when the current node's path is
part of the run's path, otherwise the node with the longest such path; a run whose path is part of the
root's (a parent recorded after its branch) becomes the root above it. Anything else starts a new
tree with the run as its root.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from playground.errors import InvalidRequest

MAX_BRANCHES = 12  # nodes kept per page: each holds a whole trace
PREVIEW_CHARS = 36
INDENT = "\u00a0" * 4  # no-break spaces: a page keeps them, so the list reads as a tree

Tree = dict[str, Any]  # {"nodes": [{"path", "parent", "trace"}], "current": index}


def forced_path(trace: dict[str, Any]) -> dict[int, int]:
    """Step -> token id of every forced step of ``trace``."""
    steps, tokens = trace.get("steps") or [], trace.get("tokens") or []
    return {i: int(tok["id"]) for i, (tok, st) in enumerate(zip(tokens, steps)) if st.get("forced")}


def branch_forced(trace: dict[str, Any], step: Any, token: int | str) -> dict[int, int | str]:
    """The forced path of a branch at ``step`` of ``trace``: the parent's own forced steps before it,
    then ``token`` at it (an id, or text the model maps to one token)."""
    n = len(trace.get("tokens") or [])
    if n == 0:
        raise InvalidRequest("generate a run first: a branch continues it")
    k = index_in(step, n, "step")
    token = token.strip() if isinstance(token, str) and token.strip().isdigit() else token
    if token in ("", None):
        raise InvalidRequest("token must be a token id or text that is one token, got nothing")
    forced: dict[int, int | str] = {i: t for i, t in forced_path(trace).items() if i < k}
    forced[k] = token
    return forced


def branch_settings(trace: dict[str, Any], step: Any, token: int | str) -> dict[str, Any]:
    """The run settings of a branch (engine.Request's and ui.generate's keywords): ``trace``'s model,
    strategy, prompt, parameters, seed and weights' dtype, its grammar when it has one (a forced token
    the grammar forbids is then refused by the run, naming the token), and the branch's forced path."""
    return run_settings(trace, branch_forced(trace, step, token))


def run_settings(trace: dict[str, Any], forced: Mapping[int, int | str]) -> dict[str, Any]:
    """``trace``'s run settings (model, strategy, prompt, parameters, seed, dtype, grammar) with the
    forced path ``forced``."""
    settings = dict(model=trace["model"], strategy=trace["strategy"], prompt=trace["prompt"],
                    params=dict(trace["params"]), seed=trace["seed"], dtype=trace.get("dtype") or "auto",
                    forced=dict(forced))
    if trace.get("grammar"):
        settings["grammar"] = dict(trace["grammar"])
    return settings


def share_steps(tree: Tree | None, forced_text: Any) -> str:
    """The steps a share link names as the current branch's own (its ``branch=``, "3"): those of its
    forced path that its parent does not have. "" at a root, and when ``forced_text`` (the forced-tokens
    box) no longer holds the current branch's path: the link then carries the box as one run."""
    if not tree or not tree.get("nodes"):
        return ""
    node = tree["nodes"][tree["current"]]
    if node["parent"] is None or "".join(str(forced_text or "").split()) != path_text(node["path"]):
        return ""
    theirs = tree["nodes"][node["parent"]]["path"]
    return ",".join(str(k) for k in sorted(k for k, v in node["path"].items() if theirs.get(k) != v))


def linked_forced(parent: dict[str, Any], branch: dict[int, int | str]) -> dict[int, int | str]:
    """The forced path of a share link's branch of the run ``parent``: the parent's forced steps and the
    branch's own (``branch``, step -> token). InvalidRequest naming the step and the range when the
    branch would part from the parent past the parent's last step."""
    if not branch:
        raise InvalidRequest("the link's branch names no step")
    n = len(parent.get("tokens") or [])
    index_in(min(branch), n, "the branch step")
    return {**forced_path(parent), **branch}


def path_text(path: dict[int, int]) -> str:
    """A forced path as the page and a share link write it: ``"0:9,3:12"`` (step:token id)."""
    return ",".join(f"{k}:{int(v)}" for k, v in sorted(path.items()))


def signature(trace: dict[str, Any]) -> str:
    """What two runs of one tree share: model, strategy, parameters, seed, the prompt's ids and the grammar."""
    return json.dumps([trace.get("model"), trace.get("strategy"), trace.get("params"), trace.get("seed"),
                       trace.get("prompt_ids"), trace.get("grammar")], sort_keys=True, default=str)


def _within(small: dict[int, int], big: dict[int, int]) -> bool:
    return all(big.get(k) == v for k, v in small.items())


def record(tree: Tree | None, trace: dict[str, Any]) -> Tree:
    """The tree after a finished run ``trace`` (see the module docstring); the run becomes current."""
    path = forced_path(trace)
    node = {"path": path, "trace": trace}
    if not tree or not tree.get("nodes") or signature(tree["nodes"][0]["trace"]) != signature(trace):
        return {"nodes": [dict(node, parent=None)], "current": 0}
    nodes = [dict(n) for n in tree["nodes"]]
    same = next((i for i, n in enumerate(nodes) if n["path"] == path), None)
    if same is not None:  # the same path again (a re-run): its newest trace, the tree unchanged
        nodes[same]["trace"] = trace
        return {"nodes": nodes, "current": same}
    holders = [i for i, n in enumerate(nodes) if _within(n["path"], path)]
    if not holders and _within(path, nodes[0]["path"]):
        return _under(nodes, node, tree.get("current", 0))
    if not holders:
        return {"nodes": [dict(node, parent=None)], "current": 0}
    current = tree.get("current", 0)
    parent = current if current in holders else max(holders, key=lambda i: (len(nodes[i]["path"]), i))
    nodes.append(dict(node, parent=parent))
    return _trim({"nodes": nodes, "current": len(nodes) - 1})


def _under(nodes: list[dict[str, Any]], node: dict[str, Any], current: int) -> Tree:
    """The tree of ``nodes`` under a new root ``node`` whose path is part of the old root's: a run that
    comes after the branch made from it (its record arrived late). The current node stays current."""
    moved = [dict(n, parent=0 if n["parent"] is None else n["parent"] + 1) for n in nodes]
    return _trim({"nodes": [dict(node, parent=None), *moved], "current": current + 1})


def _trim(tree: Tree) -> Tree:
    """Keep at most MAX_BRANCHES nodes: drop the oldest leaves that are neither the root nor on the
    current node's line."""
    while len(tree["nodes"]) > MAX_BRANCHES:
        line = set(_line(tree, tree["current"]))
        parents = {n["parent"] for n in tree["nodes"]}
        victim = next(i for i in range(1, len(tree["nodes"])) if i not in line and i not in parents)
        tree = _remove(tree, {victim}, tree["current"])
    return tree


def _line(tree: Tree, index: int) -> list[int]:
    """``index`` and its ancestors up to the root."""
    out = [index]
    while tree["nodes"][out[-1]]["parent"] is not None:
        out.append(tree["nodes"][out[-1]]["parent"])
    return out


def _remove(tree: Tree, gone: set[int], current: int) -> Tree:
    keep = [i for i in range(len(tree["nodes"])) if i not in gone]
    new_index = {old: new for new, old in enumerate(keep)}
    nodes = [dict(tree["nodes"][i], parent=new_index.get(tree["nodes"][i]["parent"])) for i in keep]
    return {"nodes": nodes, "current": new_index[current]}


def undo(tree: Tree | None) -> Tree:
    """The tree without its current branch (and the branches made from it); its parent is current."""
    if not tree or not tree.get("nodes"):
        raise InvalidRequest("there is no branch to undo: generate a run and click a bar to branch it")
    current = tree["current"]
    parent = tree["nodes"][current]["parent"]
    if parent is None:
        raise InvalidRequest("the first run of the tree has no parent: there is no branch to undo")
    gone = {current}
    changed = True
    while changed:  # every descendant of the undone branch goes with it
        changed = False
        for i, n in enumerate(tree["nodes"]):
            if i not in gone and n["parent"] in gone:
                gone.add(i)
                changed = True
    return _remove(tree, gone, parent)


def pick(tree: Tree | None, index: Any) -> Tree:
    """The tree with node ``index`` current."""
    n = len(tree["nodes"]) if tree and tree.get("nodes") else 0
    current = index_in(index, n, "branch")  # InvalidRequest for a tree with no nodes (or none)
    assert tree is not None
    return {"nodes": tree["nodes"], "current": current}


def index_in(value: Any, n: int, what: str) -> int:
    """``value`` as an integer in [0, n - 1], or InvalidRequest naming ``what`` and the range."""
    try:
        ok = float(value).is_integer() and 0 <= int(value) < n
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise InvalidRequest(f"{what} must be an integer in [0, {max(n - 1, 0)}], got {value!r}")
    return int(value)


def divergence(parent: dict[str, Any], child: dict[str, Any]) -> int:
    """The step where ``child`` branches off ``parent``: its first forced step that the parent does not
    have (or, for a run with no such step, the first step where their tokens differ)."""
    mine, theirs = forced_path(child), forced_path(parent)
    new = [k for k, v in mine.items() if theirs.get(k) != v]
    if new:
        return min(new)
    a = [t["id"] for t in parent.get("tokens") or []]
    b = [t["id"] for t in child.get("tokens") or []]
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), max(min(len(a), len(b)) - 1, 0))


def _preview(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 1] + "…"


def labels(tree: Tree | None) -> list[tuple[str, int]]:
    """(label, index) of every node in depth-first order, indented by depth: the tree as a list."""
    if not tree or not tree.get("nodes"):
        return []
    nodes = tree["nodes"]
    children: dict[int | None, list[int]] = {}
    for i, n in enumerate(nodes):
        children.setdefault(n["parent"], []).append(i)
    out: list[tuple[str, int]] = []

    def walk(i: int, depth: int) -> None:
        n = nodes[i]
        text = repr(_preview(n["trace"].get("text", "")))
        if n["parent"] is None:
            label = f"run: {text}"
        else:
            k = divergence(nodes[n["parent"]]["trace"], n["trace"])
            toks = n["trace"].get("tokens") or []
            tok = repr(toks[k]["text"]) if k < len(toks) else "?"
            label = f"{INDENT * (depth - 1)}└ step {k} → {tok}: {text}"
        out.append((label, i))
        for c in children.get(i, []):
            walk(c, depth + 1)

    for root in children.get(None, []):
        walk(root, 0)
    return out


def parent_of(tree: Tree | None) -> tuple[dict[str, Any], dict[str, Any], int] | None:
    """(parent trace, current trace, step where they part) for the current branch; None at a root."""
    if not tree or not tree.get("nodes"):
        return None
    node = tree["nodes"][tree["current"]]
    if node["parent"] is None:
        return None
    parent = tree["nodes"][node["parent"]]["trace"]
    return parent, node["trace"], divergence(parent, node["trace"])
