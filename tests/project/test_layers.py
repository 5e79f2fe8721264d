"""The rooms of the code and the one-way arrows between them, read from every import with ``ast``.

Layers, top to bottom (``docs/contributing.md``, "The rooms"): tools and app; ui and cli; whatif; engine; the
strategy families (``FAMILY_ORDER``: sampling, beam, contrastive, speculative); the strategies' root (registry,
params, context, recording, forcing, pairing); models; serving. charts and the contract (trace,
errors, ``playground.ASSETS``) are leaves that any layer may read. The rules:

- R1 imports point down; a family imports sampling/ and the root, never another family.
- R2 strategies import from playground only the contract; charts import no torch, gradio,
  strategies, models or engine; whatif imports no gradio or plotly; models and serving import no
  strategies, engine, ui or charts; serving imports only errors; gradio only in ui (and tools).
- R3 no ``_name`` is imported from another module.
- R4 no function-level import of project code (lazy imports are for heavy optional packages).
- R5 an ``__init__.py`` is a docstring and at most 15 lines of re-exports with their ``__all__``
  (three listed exceptions).
- R6 plug-ins are listed, never discovered by file name (``pkgutil`` only where strategies load).
- And no import cycle between project modules (imports under ``TYPE_CHECKING`` do not count).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from strategies.registry import FAMILY_ORDER  # the families, each a folder of strategies/

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("playground", "strategies")
ORDER = ["top", "front", "whatif", "engines", "engine", "families", "strategies", "models", "serving"]
LEAVES = {"charts", "contract"}
# where code may do what a rule forbids, and why
INIT_CODE = {"playground/__init__.py": "ASSETS, the one path to assets/",
             "playground/cli/__init__.py": "main's dispatch (keeps `from playground.cli import main`)",
             "strategies/__init__.py": "imports every family module, which registers its strategies"}
LAZY = {("strategies/registry.py", "strategies"): "the registry fills itself from the package on first use"}
DISCOVERY = {"strategies/__init__.py"}


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    """The layer a project module belongs to."""
    parts = module.split(".")
    if module == "app" or parts[:2] in (["playground", "tools"], ["playground", "__main__"]):
        return "top"
    if parts[0] == "strategies":
        return "families" if len(parts) > 1 and parts[1] in FAMILY_ORDER else "strategies"
    sub = parts[1] if len(parts) > 1 else ""
    return {"ui": "front", "cli": "front", "whatif": "whatif", "engines": "engines", "engine": "engine",
            "models": "models", "serving": "serving", "charts": "charts"}.get(sub, "contract")


def sources(root: Path = ROOT) -> dict[str, str]:
    files = [root / "app.py", *root.glob("playground/**/*.py"), *root.glob("strategies/**/*.py")]
    return {str(f.relative_to(root)): f.read_text(encoding="utf-8") for f in files}


def imports(tree: ast.AST) -> list[tuple[str, list[str], bool, int]]:
    """(module, names, inside a function, line) of every import not under ``if TYPE_CHECKING:``."""
    out = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((a.name, [], inner, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                out.append((child.module, [a.name for a in child.names], inner, child.lineno))
            walk(child, inner)

    walk(tree, False)
    return out


def imported_modules(module: str, names: list[str], known: set[str]) -> list[str]:
    """``from module import a, b``: the project modules it reads (a submodule, or the module itself)."""
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in known]
    return subs if subs and len(subs) == len(names) else [module, *subs]


def allowed(src: str, dst: str) -> bool:
    a, b = room(src), room(dst)
    if b == "contract" or a == b == "charts":
        return True
    if a in LEAVES:
        return False
    if a in ("families", "strategies") and dst.startswith("playground"):
        return False  # from playground, strategies take only the contract
    if b == "charts":
        return a in ("top", "front")
    if a == b == "families":
        src_family, dst_family = src.split(".")[1], dst.split(".")[1]
        return dst_family in (src_family, "sampling")
    if a == "serving":
        return b == "serving"  # serving reads only itself and the contract
    return ORDER.index(a) <= ORDER.index(b)


FORBIDDEN_PACKAGES = {"charts": ("torch", "gradio", "transformers"), "whatif": ("gradio", "plotly"),
                      "families": ("gradio", "plotly"), "strategies": ("gradio", "plotly"),
                      "models": ("gradio", "plotly"), "serving": ("gradio", "plotly", "torch"),
                      "engine": ("gradio", "plotly"), "engines": ("gradio", "plotly"), "contract": ("gradio", "plotly")}


def violations(files: dict[str, str]) -> list[str]:
    known = {module_name(p) for p in files}
    found, graph = [], {}
    for path, text in sorted(files.items()):
        src = module_name(path)
        tree = ast.parse(text, path)
        edges = graph.setdefault(src, set())
        for module, names, in_function, line in imports(tree):
            top = module.split(".")[0]
            where = f"{path}:{line}"
            for package in FORBIDDEN_PACKAGES.get(room(src), ()):
                if top == package and not in_function:
                    found.append(f"{where}: {room(src)} imports {package}")
            if top not in PROJECT:
                continue
            for dst in imported_modules(module, names, known):
                if dst == src:
                    continue
                if not allowed(src, dst):
                    found.append(f"{where}: {src} ({room(src)}) imports {dst} ({room(dst)}), against the layers")
                if in_function and (path, dst) not in LAZY:
                    found.append(f"{where}: {src} imports {dst} inside a function")
                if not in_function:
                    edges.add(dst)
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                found.append(f"{where}: {src} imports private {', '.join(private)} from {module}")
        if path.endswith("__init__.py") and path not in INIT_CODE:
            body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            code = [n for n in body if not isinstance(n, (ast.Import, ast.ImportFrom)) and not (
                isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["__all__"])]
            lines = sum(n.end_lineno - n.lineno + 1 for n in body)
            if code or lines > 15:
                found.append(f"{path}: an __init__ holds code or more than 15 lines of re-exports")
        if "pkgutil" in text and path not in DISCOVERY:
            found.append(f"{path}: discovers modules by file name (pkgutil)")
    found.extend(cycles(graph))
    return found


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """One line per import cycle found by a depth-first walk over top-level imports."""
    state, found = {}, []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt in graph and nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_code_keeps_its_layers():
    assert violations(sources()) == []


def test_every_module_has_a_room():
    for path in sources():
        assert room(module_name(path)) in ORDER + sorted(LEAVES), path
    assert room("playground.models.fast.int4") == "models" and room("strategies.beam.tree") == "families"
    assert room("strategies.forcing") == "strategies" and room("playground.trace") == "contract"


@pytest.mark.parametrize("path, text, expected", [
    ("playground/serving/planted.py", "from playground.ui import build_demo\n", "against the layers"),
    ("strategies/beam/planted.py", "from playground.models import LM\n", "against the layers"),
    ("strategies/beam/planted.py", "from strategies.speculative.verify import greedy\n", "against the layers"),
    ("playground/charts/planted.py", "import torch\n", "charts imports torch"),
    ("playground/engine_planted.py", "def f():\n    from playground.engine import run\n", "inside a function"),
    ("playground/whatif/planted.py", "from playground.engine import _private\n", "imports private _private"),
    ("playground/serving/__init__.py", "x = 1\n", "holds code"),
    ("playground/charts/planted.py", "import pkgutil\n", "discovers modules"),
])
def test_a_planted_violation_is_found(path, text, expected):
    files = {**sources(), path: text}
    found = violations(files)
    assert any(expected in line and path in line for line in found), found


def test_a_planted_cycle_is_found():
    files = {**sources(), "playground/serving/a.py": "from playground.serving import b\n",
             "playground/serving/b.py": "from playground.serving import a\n"}
    assert "import cycle: playground.serving.a -> playground.serving.b -> playground.serving.a" in violations(files)
