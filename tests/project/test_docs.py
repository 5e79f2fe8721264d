"""The documents stay true to the code: docs/strategies.md is what ``python -m playground.tools.docs`` writes
from the registries today, every file path the README and docs/ cite exists, the README stays a short read
whose quick start is the two make targets, each link between the documents lands on a file, and the
contributor's recipes name what the code defines; the stage recipe is followed on a planted stage."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from figure_reading import fig_dict, is_horizontal, stage_shapes

from playground.charts import marks
from playground.charts.distribution import distribution_figure
from playground.charts.palette import MIN_P
from playground.cli import main
from playground.engine import Request, run
from playground.tools import docs
from strategies.sampling import samplers
from strategies.stages import STAGES, Decision, TransformBase, on_values, stage

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a path of the repository written in backticks: `strategies/stages.py`, `docs/trace.md`, `assets/toy/`
CITED = re.compile(r"`((?:playground|strategies|tests|bench|docs|assets)/[\w./-]*|app\.py|Makefile)`")


def test_the_strategies_reference_is_generated_from_the_registries():
    assert docs.OUT.read_text(encoding="utf-8") == docs.render(), \
        "docs/strategies.md is out of date: run python -m playground.tools.docs"


def test_every_cited_path_exists():
    missing = [f"{doc.name}: {path}" for doc in DOCUMENTS
               for path in CITED.findall(doc.read_text(encoding="utf-8")) if not (ROOT / path).exists()]
    assert missing == []


def test_every_link_between_documents_lands_on_a_file():
    links = re.compile(r"\]\(((?!https?:|#)[^)#\s]+)")
    broken = [f"{doc.name}: {target}" for doc in DOCUMENTS
              for target in links.findall(doc.read_text(encoding="utf-8")) if not (doc.parent / target).exists()]
    assert broken == []


def test_the_readme_is_a_short_read_that_starts_with_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    quick = text.split("## Quick start", 1)[1].split("```", 2)[1]
    assert [line.split("#")[0].strip() for line in quick.strip().splitlines()] == ["make run", "make test"]


def test_every_name_the_recipes_cite_is_defined():
    """docs/contributing.md's recipes name classes, tables and functions (`SamplerParams`, `FAMILY_ORDER`,
    `@stage(`, `views(`): each is still defined in the code, so a rename fails here until the recipe follows."""
    recipes = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8").split("## Recipes", 1)[1]
    recipes = recipes.split("## The test suite", 1)[0]
    names = set(re.findall(r"`@?([A-Z][A-Za-z0-9_]+)`", recipes)) | set(re.findall(r"`@?([a-z_]+)\(", recipes))
    code = "\n".join(p.read_text(encoding="utf-8") for folder in ("playground", "strategies", "tests")
                     for p in (ROOT / folder).rglob("*.py"))
    undefined = sorted(n for n in names
                       if not re.search(rf"^\s*(?:class|def) {n}\b|^{n}\s*(?::[^=\n]*)?=", code, re.MULTILINE))
    assert len(names) > 20 and undefined == []


@dataclass(frozen=True)
class Floor(TransformBase):
    """A planted stage: drop the tokens below a fixed probability (the most probable one always stays)."""

    floor: float

    def decide(self, logits: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, Decision]:
        probs = logits.float().softmax(-1)
        keep = (probs >= self.floor) | (probs == probs.max(-1, keepdim=True).values)
        return torch.where(keep, logits, torch.full_like(logits, -math.inf)), {"threshold": self.floor}


def test_the_stage_recipe_followed_on_a_planted_stage(store, monkeypatch, capsys):
    """docs/contributing.md's recipe for a sampler stage, on a planted one that reads min_p (so that no field
    is added to SamplerParams): registered with the values that switch it on, placed in the presets, given
    a Mark; those values switch it on, a run draws its line from its own record, and the CLI's run takes it."""
    try:
        stage("planted", params={"floor": "min_p"}, truncates=True, on={"min_p": 0.3})(Floor)
        monkeypatch.setattr(samplers, "SAMPLER_STAGES", (*samplers.SAMPLER_STAGES, "planted"))
        for preset in ("transformers", "llama.cpp"):
            monkeypatch.setitem(samplers.PRESETS, preset, (*samplers.PRESETS[preset], "planted"))
        monkeypatch.setitem(marks.STAGE_MARKS, "planted",
                            marks.Mark("level", "threshold", "floor {threshold:g}", "p ≥ {threshold:g}", MIN_P))
        on = on_values(samplers.SAMPLER_STAGES)["planted"]
        assert STAGES["planted"].is_on(samplers.SamplerParams(**on))
        trace = run(store, Request("toy", "sampling", "once upon", {**on, "order": "planted"}, seed=1,
                                   max_new_tokens=3)).to_dict()
        assert trace["chain"][0] == "planted" and trace["steps"][0]["stages"][1]["decision"] == {"threshold": 0.3}
        [line] = stage_shapes(fig_dict(distribution_figure(trace, 0)), "planted")
        assert is_horizontal(line) and line["y0"] == 0.3
        assert marks.stage_summary(trace["steps"][0]["stages"][1]) == "p ≥ 0.3"
        capsys.readouterr()
        assert main(["run", "--model", "toy", "--strategy", "sampling", "--prompt", "once upon", "--min-p", "0.3",
                     "--order", "planted", "--max-new-tokens", "2", "--json"]) == 0
        out = capsys.readouterr().out
        assert json.loads(out[out.index("{"):])["chain"][0] == "planted"
    finally:
        STAGES.pop("planted", None)
