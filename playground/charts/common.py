"""What every chart family shares: the View a page shows."""
from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go


@dataclass
class View:
    title: str
    figure: go.Figure | None = None  # a plotly figure, or
    html: str | None = None  # an HTML fragment whose model text is already escaped
