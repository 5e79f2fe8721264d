"""Reading an exported Python snippet back without running it: the literal keyword arguments of a call."""
from __future__ import annotations

import ast
from typing import Any

from playground.errors import InvalidRequest


def call_kwargs(text: str, name: str) -> dict[str, Any] | None:
    """The keyword arguments of the first call to ``name`` (``name(...)`` or ``x.name(...)``) in ``text``,
    each a Python literal (a nested call's own literal kwargs come as a dict); None when there is no call."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise InvalidRequest(f"the Python snippet does not parse: {e.msg} at line {e.lineno}") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and called(node) == name:
            return {kw.arg: literal(kw.value) for kw in node.keywords if kw.arg}
    return None


def called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Call):
        return {kw.arg: literal(kw.value) for kw in node.keywords if kw.arg}
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise InvalidRequest(f"the Python snippet's {ast.unparse(node)[:80]!r} is not a literal value") from None


def first_int_arg(text: str, name: str) -> int | None:
    """The first positional integer argument of a call to ``name`` (``torch.manual_seed(7)`` -> 7)."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and called(node) == name and node.args:
            value = literal(node.args[0])
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    return None


def python_call(name: str, kwargs: dict[str, Any], indent: str = "    ") -> str:
    """``name(\\n    key=value,\\n)`` with each value as its Python literal."""
    lines = [f"{indent}{k}={v if isinstance(v, Raw) else repr(v)}," for k, v in kwargs.items()]
    return f"{name}(\n" + "\n".join(lines) + "\n)"


class Raw(str):
    """A value written as it is (a nested call), not as a string literal."""
