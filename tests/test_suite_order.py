"""The order conftest gives the test files: the long ones first, then by the GGUF model a file loads
(none, SmolLM2, Gemma 3), so that with an empty cache a worker reaches a model after its conversion
has been done rather than waiting on it with a core idle."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import LONG_FILES, file_order


@dataclass
class Item:  # the two things file_order reads of a pytest item
    path: Path
    name: str
    fixturenames: list[str] = field(default_factory=list)


def files(tmp_path: Path, sources: dict[str, str]) -> dict[str, Path]:
    out = {}
    for name, source in sources.items():
        out[name] = tmp_path / name
        out[name].write_text(source, encoding="utf-8")
    return out


def test_long_files_first_then_no_model_then_smollm2_then_gemma(tmp_path):
    paths = files(tmp_path, {
        "test_a_gemma_key.py": 'run(store, Request("gemma3-270m", "greedy", "x", {}))\n',
        "test_b_toy.py": 'store.get("toy")\n',
        "test_c_smollm_fixture.py": "def test_x(smollm): ...\n",
        "test_d_says_gemma_unquoted.py": "# Gemma 3's head is tied; gemma3-270m is not loaded here\n",
        LONG_FILES[0]: 'store.get("gemma3-270m")\n',
        "test_e_smollm_key.py": 'store.get("smollm2-135m")\n',
        "test_f_gemma_fixture_in_one_test.py": "",
    })
    items = [Item(paths["test_a_gemma_key.py"], "a1"), Item(paths["test_a_gemma_key.py"], "a2"),
             Item(paths["test_b_toy.py"], "b1"), Item(paths["test_b_toy.py"], "b2"),
             Item(paths["test_c_smollm_fixture.py"], "c1", ["smollm"]),
             Item(paths["test_d_says_gemma_unquoted.py"], "d1"), Item(paths[LONG_FILES[0]], "long"),
             Item(paths["test_e_smollm_key.py"], "e1"),
             Item(paths["test_f_gemma_fixture_in_one_test.py"], "f1", ["store"]),
             Item(paths["test_f_gemma_fixture_in_one_test.py"], "f2", ["store", "gemma"])]
    assert [item.name for item in file_order(items)] == ["long", "b1", "b2", "d1", "c1", "e1", "a1", "a2",
                                                         "f1", "f2"]


def test_within_a_rank_the_files_keep_their_order_and_their_tests_order(tmp_path):
    paths = files(tmp_path, {"test_x.py": "", "test_y.py": 'store.get("smollm2-135m")\n'})
    items = [Item(paths["test_y.py"], f"y{i}") for i in range(3)] + [Item(paths["test_x.py"], f"x{i}") for i in range(3)]
    assert [item.name for item in file_order(items)] == ["x0", "x1", "x2", "y0", "y1", "y2"]
