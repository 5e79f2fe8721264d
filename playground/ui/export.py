"""Downloads of a run: its trace as JSON, its charts as PNGs rendered on the server, and a sample-many
result as JSON."""
from __future__ import annotations

import importlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from playground.charts.steps import clamp_step, step_figures
from playground.charts.theme import themed
from playground.charts.views import strategy_views
from playground.errors import InvalidRequest


def export_dir() -> Path:
    path = Path(tempfile.gettempdir()) / "decoding-playground"
    path.mkdir(parents=True, exist_ok=True)
    return path


def trace_filename(trace: dict[str, Any], suffix: str, kind: str = "trace") -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in f"{trace['model']}-{trace['strategy']}")
    return f"{kind}-{safe}-seed{trace['seed']}-{int(time.time() * 1000) % 10**9}{suffix}"


def prune_exports(max_age_s: float = 3600) -> None:
    """Forget exports older than ``max_age_s``: a long-running server writes one file per run."""
    cutoff = time.time() - max_age_s
    for path in [*export_dir().glob("trace-*"), *export_dir().glob("sample-many-*"),
                 *export_dir().glob("sweep-*")]:
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
        except OSError:  # another worker removed it first
            pass


def write_trace_json(trace: dict[str, Any]) -> str:
    """The trace as a pretty JSON file for download; returns its path."""
    prune_exports()
    path = export_dir() / trace_filename(trace, ".json")
    path.write_text(json.dumps(trace, indent=1, ensure_ascii=False), encoding="utf-8")
    return str(path)


def write_sample_many_json(result: dict[str, Any]) -> str:
    """A sample-many result (every outcome with its count, frequency, probability and seeds) as a
    pretty JSON file for download; returns its path."""
    prune_exports()
    path = export_dir() / trace_filename(result, f"-n{result['n']}.json", "sample-many")
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    return str(path)


def write_sweep_json(record: dict[str, Any]) -> str:
    """A sweep (playground.whatif.sweep: every point's measures, outcomes and samples) as a pretty JSON file
    for download; each sample keeps its seed, ids and text, not its step records (those are 20
    log-probabilities a token, some 100 MB for the largest sweep). Returns its path."""
    prune_exports()
    points = [{**p, "samples": [{k: s[k] for k in ("seed", "ids", "text")} for s in p.get("samples", [])]}
              for p in record["points"]]
    path = export_dir() / trace_filename(record, f"-{record['param']}-n{record['n']}.json", "sweep")
    path.write_text(json.dumps({**record, "points": points}, indent=1, ensure_ascii=False), encoding="utf-8")
    return str(path)


def png_export_available() -> bool:
    """kaleido renders static images through a Chromium; both must be present."""
    try:
        importlib.import_module("kaleido")
    except ImportError:
        return False
    return any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome"))


def without_buttons(fig: go.Figure) -> go.Figure:
    """A copy of ``fig`` without its updatemenus."""
    out = go.Figure(fig)
    out.layout.updatemenus = ()
    return out


def export_pngs(trace: dict[str, Any] | None, step: Any, theme: str = "light", scale: float = 2.0) -> list[str]:
    """The step's three charts (and any strategy views) as PNG files, in the theme the page shows, without
    their in-chart buttons.

    One kaleido session renders them all (kaleido starts a Chromium per session)."""
    k = clamp_step(trace, step)
    if trace is None or k is None:
        raise InvalidRequest("generate something first: there is no trace to export")
    figs = step_figures(trace, k)._asdict()
    for i, view in enumerate(strategy_views(trace, k)):
        if view.figure is not None:
            figs[f"view{i + 1}"] = view.figure
    base = trace_filename(trace, "")
    paths = [str(export_dir() / f"{base}-step{k}-{name}.png") for name in figs]
    # a PNG shows the chart as it reads, without the in-chart buttons (basis, scale, zoom) it cannot press
    painted = [themed(without_buttons(f), theme, export=True) for f in figs.values()]
    try:
        pio.write_images(painted, paths, width=1280, height=[int(f.layout.height or 560) for f in painted],
                         scale=scale)
    except Exception as err:  # kaleido reports a missing or broken Chromium in several ways
        raise InvalidRequest(f"PNG export needs kaleido and a Chromium browser: {err}") from None
    return paths
