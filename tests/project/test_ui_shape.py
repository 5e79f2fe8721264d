"""The page's code keeps its shape: no function in playground/ui over 60 lines, no import circle in ui/ even
through annotation-only imports, and one control per parameter in each strategy panel."""
from __future__ import annotations

import ast
from pathlib import Path

from playground.ui.controls import controls_for, strategies_in_order
from playground.ui.page import build_demo

UI = Path(__file__).resolve().parents[2] / "playground" / "ui"
MAX_LINES = 60


def test_no_function_of_the_page_is_over_60_lines():
    long = [f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(UI.glob("*.py")) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > MAX_LINES]
    assert not long


def ui_imports(path: Path) -> set[str]:
    """The ui modules ``path`` imports, at its top or under TYPE_CHECKING alike."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "playground.ui":
                out.update(alias.name for alias in node.names)
            elif node.module.startswith("playground.ui."):
                out.add(node.module.split(".")[2])
    return out - {"__init__"}


def test_no_import_circle_in_the_page_even_through_annotations():
    graph = {path.stem: ui_imports(path) for path in UI.glob("*.py") if path.stem != "__init__"}
    circles = []

    def walk(node: str, stack: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in stack:
                circles.append(" -> ".join([*stack[stack.index(nxt):], nxt]))
            else:
                walk(nxt, [*stack, nxt])
    for start in graph:
        walk(start, [start])
    assert not circles
    planted = {"a": {"b"}, "b": {"a"}}  # the walk finds a planted one
    graph, circles = planted, []
    walk("a", ["a"])
    assert circles == ["a -> b -> a"]


def test_one_control_per_parameter_and_fewer_components_than_one_per_strategy():
    demo = build_demo(store=None)  # type: ignore[arg-type]  (building needs no model)
    per_strategy = sum(len(controls_for(spec)) for spec in strategies_in_order())
    names = {c.name for spec in strategies_in_order() for c in controls_for(spec)}
    ids = [getattr(b, "elem_id", None) or "" for b in demo.blocks.values()]
    for prefix in ("pg-p-", "pg-b-"):  # the sidebar's panel and Compare's strategy B
        assert {i[len(prefix):] for i in ids if i.startswith(prefix)} >= names
        assert sum(1 for i in ids if i[len(prefix):] in names and i.startswith(prefix)) == len(names)
    assert len(names) < per_strategy / 2
    demo.close()
