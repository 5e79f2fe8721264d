"""Every colour the charts draw and the HTML they write, the font, and the plotly template.

Each colour value is written once, in "Hues" below (Tailwind's names, so a shade is easy to
find); the chart modules import the names of what a colour means to them ("Meanings"), and
two meanings that share a hue say so by naming it. The mid-tone hues read on white and on a
dark page; ``theme`` turns the inks (text, grid) to the page's. Pure: plotly only.
"""
from __future__ import annotations

import plotly.graph_objects as go
import plotly.io as pio

# --- Hues: the only colour values in the charts ---------------------------------------------------

BLUE_100, BLUE_600, BLUE_800, BLUE_900 = "#dbeafe", "#2563eb", "#1e40af", "#1e3a8a"
SLATE_100, SLATE_200, SLATE_300, SLATE_400 = "#f1f5f9", "#e2e8f0", "#cbd5e1", "#94a3b8"
SLATE_500, SLATE_600, SLATE_700 = "#64748b", "#475569", "#334155"
GREEN_100, GREEN_500, GREEN_600, GREEN_800, GREEN_900 = "#dcfce7", "#22c55e", "#16a34a", "#166534", "#14532d"
RED_100, RED_200, RED_500, RED_600 = "#fee2e2", "#fecaca", "#ef4444", "#dc2626"
RED_700, RED_800, RED_900 = "#b91c1c", "#991b1b", "#7f1d1d"
AMBER_500, AMBER_600, AMBER_700 = "#f59e0b", "#d97706", "#b45309"
ORANGE_300, ORANGE_500, ORANGE_600 = "#fdba74", "#f97316", "#ea580c"
VIOLET_300, VIOLET_600, PURPLE_600, INDIGO_600 = "#c4b5fd", "#7c3aed", "#9333ea", "#4f46e5"
ROSE_600, PINK_600 = "#e11d48", "#db2777"
EMERALD_600, TEAL_600, CYAN_600 = "#059669", "#0d9488", "#0891b2"
TABLEAU_BLUE, TABLEAU_ORANGE = "#4c78a8", "#f58518"  # the what-if bars (Vega's first two)
WHITE, BLACK = "#ffffff", "black"
NIGHT = "#0b0f19"  # the page background of Gradio's dark theme
CLEAR = "rgba(0,0,0,0)"  # nothing: a transparent background, an outline that is not drawn


def rgb(colour: str) -> tuple[int, int, int]:
    """The (r, g, b) of a ``#rrggbb`` hue."""
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def rgba(colour: str, alpha: float) -> str:
    """A ``#rrggbb`` hue at ``alpha`` opacity, as plotly and CSS read it."""
    r, g, b = rgb(colour)
    return f"rgba({r}, {g}, {b}, {alpha})"


# --- Meanings: what the charts import ------------------------------------------------------------

# Text and lines (theme.py swaps them for the page theme's)
INK = SLATE_700  # text in light mode
SUBDUED_INK = SLATE_600  # secondary text in HTML, where the page gives no --body-text-color-subdued
GRID = rgba(SLATE_400, 0.28)  # grid, zero and axis lines of the template
NOTE_BACKGROUND = rgba(SLATE_400, 0.25)  # behind an annotation that points at a bar
BUTTON_BACKGROUND, BUTTON_BORDER = rgba(SLATE_400, 0.15), rgba(SLATE_400, 0.5)  # in-figure buttons

# The page themes (theme.py): text, grid, and the background an exported PNG gets
LIGHT_INK, LIGHT_GRID, LIGHT_PAGE = INK, rgba(SLATE_400, 0.30), WHITE
DARK_INK, DARK_GRID, DARK_PAGE = SLATE_200, rgba(SLATE_400, 0.25), NIGHT
# before the page says its theme (and for a figure sent without one): a slate that reads on white (4.8:1)
# and on the dark page, where the lighter SLATE_400 read pale grey on a light page
NEUTRAL_INK, NEUTRAL_GRID, NEUTRAL_PAGE = SLATE_500, GRID, WHITE
PLOTLY_INKS = ("#444", "#444444", BLACK, "#000", "#000000", "#2a3f5f")  # the dark inks plotly writes by default

# The step charts (distribution.py, waterfall.py, overview.py, text.py)
KEPT = BLUE_600  # survived every truncation: the selector could draw it
CUT = SLATE_400  # removed by a truncation
CHOSEN = AMBER_500  # the token the selector picked; the selected step
SELECTED_BAND = rgba(SLATE_400, 0.28)  # behind the selected step where amber would read as a value
RAW = SLATE_500  # the model's own probability, before penalty / temperature
FINAL = CYAN_600  # the distribution after the whole chain: what the selector drew from
ENTROPY = VIOLET_600
THINKING_BAND = rgba(VIOLET_300, 0.18)  # behind the steps of a run's thinking phase (strategies/phases.py)
BUDGET_CUT = VIOLET_600  # where a thinking budget forced the marker
CUMULATIVE = ROSE_600  # cumulative mass and the top-p line
TOP_K = VIOLET_600
MIN_P = EMERALD_600
TYPICAL = PINK_600
EPSILON = TEAL_600
ETA = GREEN_600
NSIGMA = INDIGO_600
XTC = RED_600  # the XTC line in the distribution and its coin in the sampler views
MIROSTAT = ORANGE_600  # mirostat's line and mu; the dynamic temperature
PENALISED = AMBER_700  # the tokens a penalty touched (and DRY's repeat, underlined in the text)
BANNED = RED_900  # tokens a ban removed (n-gram, word)
NOISE = PURPLE_600  # the Gumbel-max selector's noise, added to the final logit (samplers.py)

# The text coloured by the model's probability of each token: a ramp through these three
SURPRISING, UNSURE, CONFIDENT = RED_500, AMBER_500, GREEN_500  # p = 0, 0.5, 1

# Speculative decoding and EAGLE (speculative.py, eagle.py)
ACCEPTED = GREEN_600  # a draft the target accepted; the tokens a round kept
REJECTED = RED_600  # a draft the target rejected
GREEN_LISTED, RED_LISTED = GREEN_600, RED_600  # a token in its step's watermark green list, or not
ADDED = BLUE_600  # the target's own token of a round (resampled or bonus); the mean tau
UNUSED = SLATE_400  # a draft never checked (after a rejection), or discarded (after the end)
TARGET = BLUE_800  # the target model's probability
DRAFT = AMBER_500  # the draft model's probability
RESIDUAL = VIOLET_600  # what the target's token was drawn from; the speedup with measured costs
GUIDE = SLATE_500  # a reference to read against: the K-th largest, the uniform draw u, the i.i.d. law
FASTER, SLOWER, BASELINE = GREEN_600, RED_600, SLATE_400  # the timing against plain decoding
ROOT = SLATE_700  # the last committed token, which an EAGLE draft tree grows from
ACCEPTED_BACKGROUND, ACCEPTED_INK = GREEN_100, GREEN_800  # the round timeline's spans (HTML)
REJECTED_BACKGROUND, REJECTED_INK = RED_100, RED_800
UNUSED_BACKGROUND, UNUSED_INK = SLATE_100, SLATE_400
ADDED_BACKGROUND, ADDED_INK = BLUE_100, BLUE_900
LOSSY_INK = RED_700  # the warning that top-K verification does not follow the target
SLOW_INK = AMBER_600  # why a run was not faster

# The beam tree (beam.py): each status's marker and edge
BEAM_KEPT, BEAM_EDGE = BLUE_600, SLATE_400
FINISHED, FINISHED_OUTLINE = GREEN_600, GREEN_900
SAMPLED_PREFIX, SAMPLED_EDGE = PURPLE_600, VIOLET_300  # sample_beam's prefixes, and the tree labels
PRUNED, PRUNED_EDGE = ORANGE_500, ORANGE_300
FELL_OFF, FELL_OFF_EDGE = SLATE_400, SLATE_200
PROMPT = SLATE_500
BEST = RED_600  # the winning path
SELECTED = AMBER_500  # the selected step, in the amber the other charts give the chosen token
BEST_ROW = RED_100  # the best row of the finished hypotheses (HTML)

# Contrastive decoding (contrastive.py)
EXPERT = BLUE_600
AMATEUR = ORANGE_500
SCORE = GREEN_600
MASKED = SLATE_300  # outside the plausible set (below the alpha line)
AGREE, DISAGREE = SLATE_400, RED_600  # the contrastive pick against expert greedy
OUTLINE = BLACK  # the chosen token's outline and the alpha line
OVERRIDDEN = RED_200  # text where the contrast changed the pick (HTML)

# Structured decoding (grammar.py; the grammar's marks in marks.py)
FEASIBLE = BLUE_600  # Z_t where the grammar leaves the model enough of its mass
FIGHTING = RED_600  # Z_t below LOW_Z: the grammar is fighting the model
FIGHTING_BAND = rgba(RED_500, 0.10)  # the band below LOW_Z
GRAMMAR_FORCED = VIOLET_600  # a step where the grammar allowed one token, and its mark in the text
DISALLOWED = RED_700  # the cross on a token the grammar does not allow

# Loops and the watch-list (loops.py, watch.py; the loop's mark in the text, assets/style.css)
LOOP = TEAL_600  # a loop's copies and its mark over the text's tokens
LOOP_FOUND = RED_600  # the step where a loop was found (its last copy ended there)
WATCHED = (BLUE_600, ORANGE_500, GREEN_600, VIOLET_600, ROSE_600, CYAN_600, AMBER_700, SLATE_500)  # one per token

# What if (whatif.py)
SAMPLED, EXACT = TABLEAU_BLUE, TABLEAU_ORANGE  # sampled frequency, exact probability


# --- Type and template -----------------------------------------------------------------------------

FONT = "Inter, ui-sans-serif, system-ui, -apple-system, 'Segoe UI', sans-serif"
TEMPLATE = "playground"


def _register_template() -> None:
    """A transparent, large-type template: the page colour shows through in light and dark mode."""
    axis = dict(gridcolor=GRID, zerolinecolor=GRID, linecolor=GRID, tickfont=dict(size=13),
                title=dict(font=dict(size=14)), automargin=True)
    pio.templates[TEMPLATE] = go.layout.Template(layout=dict(
        font=dict(family=FONT, size=14, color=INK),
        paper_bgcolor=CLEAR, plot_bgcolor=CLEAR,
        colorway=[KEPT, CUMULATIVE, MIN_P, TOP_K, CHOSEN, RAW],
        title=dict(font=dict(size=17), x=0.01, xanchor="left", y=0.97, yanchor="top"),
        xaxis=axis, yaxis=axis, bargap=0.18,
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                    bgcolor=CLEAR, font=dict(size=13)),
        hoverlabel=dict(font=dict(family=FONT, size=13)),
        margin=dict(l=60, r=60, t=86, b=60)))


_register_template()
