"""What every chart family shares: the View a page shows."""
from __future__ import annotations

import html
from dataclasses import dataclass

import plotly.graph_objects as go


@dataclass
class View:
    title: str
    figure: go.Figure | None = None  # a plotly figure, or
    html: str | None = None  # an HTML fragment whose model text is already escaped


def escape(text: object, quote: bool = True) -> str:
    """Model text (untrusted) or any value made safe for HTML, quotes included (it may sit in an
    attribute). The one escaper of the page and the charts; how a token is *shown* (a space as "·",
    a newline as "↵") is ``figures.show_token``'s job, before this.

    ``quote=False`` for a plotly label (tick, hover, text, annotation): plotly reads <, > and &
    there as markup and decodes &lt; &gt; &amp;, but shows &quot; as those six characters, and a
    quote in a label is plain text."""
    return html.escape(str(text), quote=quote)
