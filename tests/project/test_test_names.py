"""The tests can be found: tests/README.md's table ("Where the tests are") names every module of
playground/ and strategies/ with the test files that test it, so a new module without tests shows up here.

The table is held to the tree both ways: each file it names exists and imports the module (or the package
the names come from, or names the module in a string, as a subprocess's ``-m``) unless the row says it
tests it "(through ...)"; each row is a module that exists; and each test file is named somewhere in it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
ROW = re.compile(r"^\| `([\w/]+\.py)` \| (.+) \|$")
ENTRY = re.compile(r"(test_\w+\.py)( \(through [^)]+\))?")
DOTTED = re.compile(r"\b(?:playground|strategies)(?:\.\w+)+")


def dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def has_code(path: Path) -> bool:
    """A module worth a row: any file but a package's ``__init__``, or an ``__init__`` that defines something."""
    if path.name != "__init__.py":
        return True
    return any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in ast.parse(path.read_text()).body)


MODULES = {dotted(p): p for d in ("playground", "strategies") for p in sorted((ROOT / d).rglob("*.py"))}
# every test file by its name (the table names files, not folders: a file's folder is its layer)
TEST_FILES = {p.name: p for p in sorted(TESTS.rglob("test_*.py"))}
LAYERS = ("browser", "charts", "engine", "engines", "models", "project", "serving", "strategies", "tools", "ui", "whatif")


def table() -> dict[str, list[tuple[str, bool]]]:
    """module path -> [(test file, tested through something else)], from tests/README.md."""
    rows = {}
    for line in (TESTS / "README.md").read_text().splitlines():
        if m := ROW.match(line):
            assert m[1] not in rows, f"{m[1]} has two rows"
            rows[m[1]] = [(e[1], bool(e[2])) for e in ENTRY.finditer(m[2])]
            assert rows[m[1]], f"{m[1]}'s row names no test file"
    return rows


def touched(test_file: Path) -> set[str]:
    """The project modules a test file imports, or names in a string (``python -m playground.tools.x``)."""
    found = set()
    for node in ast.walk(ast.parse(test_file.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
            found |= subs or {node.module}
            if len(subs) < len(node.names):
                found.add(node.module)  # some names come from the package itself
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= set(DOTTED.findall(node.value))
    return found


def test_every_module_has_a_row_or_a_test_file_named_after_it():
    rows = table()
    missing = [str(p.relative_to(ROOT)) for p in MODULES.values()
               if has_code(p) and str(p.relative_to(ROOT)) not in rows
               and f"test_{p.stem}.py" not in TEST_FILES]
    assert not missing, (f"no test file named after these modules and no row in tests/README.md: {missing}; "
                         "add their tests and a row (module -> test files)")


def test_every_row_is_a_module_and_every_file_it_names_tests_it():
    wrong = []
    for module, entries in table().items():
        if not (ROOT / module).is_file():
            wrong.append(f"{module}: no such module")
            continue
        name = dotted(ROOT / module)
        for test_file, through in entries:
            if test_file not in TEST_FILES:
                wrong.append(f"{module}: {test_file} does not exist")
            elif not through and not any(t == name or name.startswith(t + ".") and t != name.split(".")[0]
                                         for t in touched(TEST_FILES[test_file])):
                wrong.append(f"{module}: {test_file} neither imports nor names it")
    assert not wrong, "tests/README.md's table is out of date:\n" + "\n".join(wrong)


def test_every_test_file_is_named_in_the_table():
    text = (TESTS / "README.md").read_text()
    unnamed = [name for name in TEST_FILES if name not in text]
    assert not unnamed, f"tests/README.md does not say what these test: {unnamed}"


def test_every_test_file_is_in_a_layers_folder_under_a_name_no_other_has():
    """tests/<layer>/test_*.py, one level down (make check and the browser tier are paths), and no two files
    of one name: pytest imports each test file by its name alone (no package), and the table names files."""
    paths = sorted(TESTS.rglob("test_*.py"))
    misplaced = [str(p.relative_to(TESTS)) for p in paths if p.parent.parent != TESTS or p.parent.name not in LAYERS]
    assert not misplaced, f"a test file belongs in one of tests/{{{','.join(LAYERS)}}}/: {misplaced}"
    assert len(TEST_FILES) == len(paths), sorted(p.name for p in paths if [q.name for q in paths].count(p.name) > 1)
