"""What every chart family shares: the View a page shows."""
from __future__ import annotations

import html
import math
import re
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
    a newline as "↵") is ``show_token``'s job, before this.

    ``quote=False`` for a plotly label (tick, hover, text, annotation): plotly reads <, > and &
    there as markup and decodes &lt; &gt; &amp;, but shows &quot; as those six characters, and a
    quote in a label is plain text."""
    return html.escape(str(text), quote=quote)


TOKEN_MARKS = "in tokens, · is a space and ↵ a newline"  # said once, in the captions that show tokens


def token_text(text: str) -> str:
    """How every chart writes a token: a leading space as "·", a newline as "↵" (a tab "⇥", a
    carriage return "␍"), the empty token as "∅". Not escaped: for plain-text places (a tooltip
    attribute escapes it as a whole)."""
    visible = str(text).replace("\n", "↵").replace("\t", "⇥").replace("\r", "␍")
    if visible.startswith(" "):
        visible = "·" + visible[1:]
    return visible or "∅"


def show_token(text: str) -> str:
    """``token_text`` escaped for a plotly label or HTML text (plotly decodes the entities back, so
    '<script>' shows as text; quotes are harmless in its labels)."""
    return escape(token_text(text), quote=False)


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless n is 1: "1 token", "1,024 tokens"."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def num(x: float | None, digits: int = 2) -> str:
    """A float for reading in a title or caption: ``digits`` decimals (1.84615 -> "1.85")."""
    return "?" if x is None else f"{float(x):.{digits}f}"


def prob_text(p: float | None) -> str:
    """A probability for reading: 3 decimals from 0.001 up, scientific form below, "0" only for 0."""
    if p is None:
        return "?"
    p = float(p)
    if p == 0:
        return "0"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.2e}"


def as_prob(x: float | None) -> float:
    """A recorded probability as a float, 0.0 where none was recorded."""
    return 0.0 if x is None else float(x)


def prob_brief(p: float) -> str:
    """A probability in a title or tooltip: 3 decimals from 0.001 up, one digit in scientific form below."""
    if p == 0:
        return "0"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


CAPTION = "caption"  # the name of a figure's one-line reading guide (an annotation under the plot)
CAPTION_ROW = 22  # px a caption line takes at the figure's foot
NOTES = "stage warnings"  # the name of the warnings a figure writes under its plot (13 px lines), over the caption
NOTE_ROW = 20  # px a line of them takes
NOTES_FLOOR = 36  # px under the plot where they start at the least (the axis's tick labels)
CHOSEN_WORD = "chosen-word"  # the annotation naming the chosen (or forced) bar: on a patch of the page's colour


def add_caption(fig: go.Figure, text: str) -> go.Figure:
    """How to read ``fig``, in one line built from the trace's recorded numbers, written inside the
    figure under everything else (legend, buttons), so a screenshot or PNG export carries it.
    ``place_caption`` (theme.themed calls it on every figure on its way out) gives it its own row at
    the figure's foot, whatever margins were set after it; calling it again replaces the caption."""
    fig.layout.annotations = [a for a in fig.layout.annotations or () if a.name != CAPTION]
    margin_b = fig.layout.margin.b if fig.layout.margin.b is not None else 60
    fig.add_annotation(text=text, name=CAPTION, xref="paper", yref="paper", x=0, y=0, xanchor="left",
                       yanchor="top", yshift=-max(0, margin_b - CAPTION_ROW), showarrow=False, align="left",
                       font=dict(size=12))
    return fig


def _foot(fig: go.Figure, per_row: int = 3, floor: int | None = None) -> int:
    """Pixels under the plot area that the bottom margin (or ``floor``), and the buttons and legend placed
    below the plot (at a negative paper y, a fraction of the plot's height), take."""
    margin = fig.layout.margin
    bottom = margin.b if margin.b is not None else 60
    top = margin.t if margin.t is not None else 86
    plot = max(60, (fig.layout.height or 450) - top - bottom)
    lowest = max(bottom if floor is None else floor, tick_depth(fig))
    for menu in fig.layout.updatemenus or ():
        if menu.y is not None and menu.y < 0 and menu.visible is not False:
            lowest = max(lowest, int(-menu.y * plot) + 34)
    legend = fig.layout.legend
    items = sum(1 for t in fig.data if t.showlegend is not False and t.name and t.visible is not False)
    if legend.y is not None and legend.y < 0 and items and fig.layout.showlegend is not False:
        rows = -(-items // per_row)
        lowest = max(lowest, int(-legend.y * plot) + 21 * rows + 6)
    return lowest


def tick_depth(fig: go.Figure) -> int:
    """Pixels under the plot that the x axes' tick labels reach: a tilted label takes its length times the
    sine of its angle (about 0.62 of its type size a character), plus its own height and the tick's gap."""
    deepest = 0
    for name in fig.layout:
        if not name.startswith("xaxis"):
            continue
        ax = fig.layout[name]
        if ax.showticklabels is False or ax.visible is False:
            continue
        texts = [str(t) for t in ax.ticktext or ()]
        if not texts:  # labels from the data: the category values on this axis
            ref = "x" + name[5:]
            texts = [str(v) for t in fig.data if (getattr(t, "xaxis", None) or "x") == ref
                     for v in (() if getattr(t, "x", None) is None else t.x) if isinstance(v, str)]
        if not texts:
            continue
        angle = math.radians(float(ax.tickangle)) if isinstance(ax.tickangle, (int, float)) else 0.0
        size = ax.tickfont.size or 13
        chars = max(len(re.sub(r"<[^>]+>", "", t)) for t in texts)
        deepest = max(deepest, int(chars * 0.62 * size * abs(math.sin(angle)) + size * abs(math.cos(angle)) + 14))
    return deepest


def caption_annotation(fig: go.Figure):
    return next((a for a in fig.layout.annotations or () if a.name == CAPTION), None)


def caption_of(fig: go.Figure) -> str | None:
    """The caption ``add_caption`` wrote, or None."""
    ann = caption_annotation(fig)
    return None if ann is None else ann.text


def place_caption(fig: go.Figure, per_line: int | None = None, narrow: bool = False) -> None:
    """The caption's row at the foot of ``fig`` (a copy on its way out): the bottom margin and the
    height grow by its lines, so the plot, its legend and buttons keep their places above it;
    ``per_line`` wraps it (a phone). Warnings written under the plot (an annotation named ``NOTES``) are
    wrapped too and placed between the legend and buttons and the caption."""
    ann = caption_annotation(fig)
    if ann is None:
        return
    if per_line:
        ann.text = "<br>".join(wrap(str(ann.text).replace("<br>", " "), per_line))
    lines = str(ann.text).count("<br>") + 1
    bottom = fig.layout.margin.b if fig.layout.margin.b is not None else 60
    above = _foot(fig, 1 if narrow else 3)  # the room the legend and buttons under the plot take
    notes = next((a for a in fig.layout.annotations or () if a.name == NOTES), None)
    if notes is not None:  # the warnings: under the legend and buttons, over the caption
        if per_line:
            notes.text = "<br>".join(wrap(str(notes.text), per_line * 12 // 13))  # 13 px type, the caption's 12
        under = _foot(fig, 1 if narrow else 3, floor=NOTES_FLOOR)
        notes.yshift = -under
        above = max(above, under + NOTE_ROW * (str(notes.text).count("<br>") + 1))
    # the plot keeps its height: the figure grows by the caption's row and any room the legend lacked
    fig.update_layout(margin_b=above + CAPTION_ROW * lines,
                      height=(fig.layout.height or 450) + above - bottom + CAPTION_ROW * lines)
    ann.yshift = -above
    # buttons that swap the figure's annotations (the distribution's bases) carry the same caption row
    for menu in fig.layout.updatemenus or ():
        buttons = list(menu.buttons or ())
        for button in buttons:
            args = list(button.args or ())
            if len(args) > 1 and isinstance(args[1], dict) and args[1].get("annotations") is not None:
                swapped = [a.to_plotly_json() if hasattr(a, "to_plotly_json") else dict(a)
                           for a in args[1]["annotations"]]
                for a in swapped:
                    if a.get("name") == CAPTION:
                        text = str(a.get("text", ""))
                        if per_line:
                            text = "<br>".join(wrap(text.replace("<br>", " "), per_line))
                        a.update(text=text, yshift=-above)
                button.args = [args[0], dict(args[1], annotations=swapped), *args[2:]]
        menu.buttons = buttons


def wrap(text: str, per_line: int) -> list[str]:
    """Words of a plotly label (which may hold <b> and <br>) in lines of at most ``per_line``
    visible characters; tags count for nothing and are never split (plotly never wraps a title)."""
    lines: list[str] = []
    for part in text.split("<br>"):
        line, shown = "", 0
        for word in part.split(" "):
            visible = len(re.sub(r"<[^>]+>", "", word))
            if line and shown + 1 + visible > per_line:
                lines.append(line)
                line, shown = word, visible
            else:
                line, shown = (f"{line} {word}" if line else word), shown + (1 if line else 0) + visible
        lines.append(line)
    return lines
